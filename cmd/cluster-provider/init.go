package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	apischeme "github.com/openmcp-local/cluster-provider/api/scheme"
	"github.com/openmcp-local/cluster-provider/deploy/crds"
	"github.com/openmcp-local/cluster-provider/deploy/policy"
)

// fieldManager owns what `init` applies.
const fieldManager = "cluster-provider"

// establishedPoll is how often init checks whether the CRDs are Established.
const establishedPoll = 200 * time.Millisecond

// ownGroup is the API group of this project's own CRDs (ProviderConfig). The other embedded CRDs
// are copies of openMCP's clusters.openmcp.cloud CRDs, which openMCP's operator installs.
var ownGroup = providersv1alpha1.GroupVersion.Group

// initCluster installs the embedded CRDs and waits until each is Established. Our own CRDs are
// server-side applied, forcing ownership, so re-running it takes back fields someone else changed.
// openMCP's four are created only where they are absent (standalone use): a CRD that exists
// belongs to openMCP's operator, or to whoever installed it, and is never changed, unless every
// field of it was written by this command (an install of ours, which it upgrades). Each CRD's line
// on stdout says which of these happened; --verbosity ERROR prints none. Running it again changes
// nothing.
func initCluster(ctx context.Context, o *initOptions, stdout io.Writer) error {
	objs, err := crds.CRDs()
	if err != nil {
		return fmt.Errorf("reading the embedded CRDs: %w", err)
	}
	if level, _ := verbosityLevel(o.Verbosity); level > zapcore.InfoLevel {
		stdout = io.Discard
	}
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: apischeme.New()})
	if err != nil {
		return fmt.Errorf("connecting to the API server: %w", err)
	}
	if o.ProviderName != "" {
		fmt.Fprintf(stdout, "Installing the CRDs of ClusterProvider %s (environment %s)\n", o.ProviderName, o.Environment)
	}
	for _, crd := range objs {
		what, err := installCRD(ctx, c, crd)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "customresourcedefinition.apiextensions.k8s.io/%s %s\n", crd.Name, what)
	}
	waitCtx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	for _, crd := range objs {
		if err := waitEstablished(waitCtx, c, crd.Name, o.Timeout); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "customresourcedefinition.apiextensions.k8s.io/%s established\n", crd.Name)
	}
	return applyPolicies(ctx, c, stdout)
}

// applyPolicies server-side applies the embedded admission policies (deploy/policy: a reference
// across namespaces needs the verb use) and the ClusterRole that lets namespace admins grant that
// verb. They are this project's own, so re-running init takes back fields someone else changed.
func applyPolicies(ctx context.Context, c client.Client, stdout io.Writer) error {
	objs, err := policy.Objects()
	if err != nil {
		return fmt.Errorf("reading the embedded admission policies: %w", err)
	}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		what := strings.ToLower(gvk.Kind) + "." + gvk.Group + "/" + u.GetName()
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("applying %s (the identity that runs init needs deploy/rbac/init_role.yaml): %w", what, err)
		}
		fmt.Fprintf(stdout, "%s serverside-applied\n", what)
	}
	return nil
}

// installCRD installs crd as initCluster says and returns what it did, in words for the output.
func installCRD(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) (string, error) {
	if crd.Spec.Group == ownGroup {
		return "serverside-applied", applyCRD(ctx, c, crd)
	}
	existing := &apiextensionsv1.CustomResourceDefinition{}
	err := c.Get(ctx, client.ObjectKeyFromObject(crd), existing)
	switch {
	case apierrors.IsNotFound(err):
		if err := applyCRD(ctx, c, crd); err != nil {
			return "", err
		}
		return "created (absent: this copy of openMCP's CRD serves until openMCP's operator installs its own)", nil
	case err != nil:
		return "", fmt.Errorf("reading CustomResourceDefinition %s: %w", crd.Name, err)
	case writtenOnlyBy(existing, fieldManager):
		return "serverside-applied (installed by an earlier cluster-provider init, and changed by nobody else)", applyCRD(ctx, c, crd)
	default:
		return fmt.Sprintf("exists, left unchanged (owned by %s)", strings.Join(managers(existing), ", ")), nil
	}
}

// writtenOnlyBy reports whether manager wrote every field of obj outside its status (which the API
// server writes).
func writtenOnlyBy(obj client.Object, manager string) bool {
	m := managers(obj)
	return len(m) == 1 && m[0] == manager
}

// managers are the field managers of obj outside its status, sorted, each once.
func managers(obj client.Object) []string {
	var out []string
	for _, mf := range obj.GetManagedFields() {
		if mf.Subresource == "" && !slices.Contains(out, mf.Manager) {
			out = append(out, mf.Manager)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		return []string{"no recorded field manager"}
	}
	return out
}

// applyCRD server-side applies crd as field manager "cluster-provider".
func applyCRD(ctx context.Context, c client.Client, crd *apiextensionsv1.CustomResourceDefinition) error {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(crd)
	if err != nil {
		return fmt.Errorf("converting CustomResourceDefinition %s: %w", crd.Name, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	// The typed object carries zero values the files do not set; none of them are ours to own.
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	u.SetGroupVersionKind(apiextensionsv1.SchemeGroupVersion.WithKind("CustomResourceDefinition"))
	if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(fieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying CustomResourceDefinition %s: %w", crd.Name, err)
	}
	return nil
}

// waitEstablished waits until the CRD named name is Established. On timeout the error says which
// conditions are not True and why.
func waitEstablished(ctx context.Context, c client.Client, name string, timeout time.Duration) error {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, establishedPoll, true, func(ctx context.Context) (bool, error) {
		if lastErr = c.Get(ctx, client.ObjectKey{Name: name}, crd); lastErr != nil {
			return false, nil
		}
		return isEstablished(crd), nil
	})
	if err == nil {
		return nil
	}
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return fmt.Errorf("waiting for CustomResourceDefinition %s: %w", name, err)
	}
	why := notTrue(crd)
	if lastErr != nil {
		why = lastErr.Error()
	}
	return fmt.Errorf("CustomResourceDefinition %s is not Established after %s (--timeout): %s", name, timeout, why)
}

func isEstablished(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established {
			return cond.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// notTrue describes the CRD's conditions that are not True, e.g.
// "NamesAccepted=False (NameConflict: ...)".
func notTrue(crd *apiextensionsv1.CustomResourceDefinition) string {
	var parts []string
	for _, cond := range crd.Status.Conditions {
		if cond.Status != apiextensionsv1.ConditionTrue {
			parts = append(parts, fmt.Sprintf("%s=%s (%s: %s)", cond.Type, cond.Status, cond.Reason, cond.Message))
		}
	}
	if len(parts) == 0 {
		return "the API server has not reported the Established condition yet"
	}
	return strings.Join(parts, "; ")
}
