package accessrequest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/utils/ptr"

	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// FieldManager is the server-side apply field manager of every object this provider writes.
const FieldManager = "cluster-provider"

// target is the cluster an AccessRequest grants access to, reached as the provider's admin.
type target struct {
	// dyn reads, applies and deletes the objects of every kind in kinds.
	dyn dynamic.Interface
	// cs asks for ServiceAccount tokens.
	cs kubernetes.Interface
}

// target is a client of the cluster that admin reaches, as the provider's admin.
func (r *Reconciler) target(admin *rest.Config) (target, error) {
	return newTarget(admin, r.Options.WrapTransport)
}

// newTarget is a client of the cluster that admin reaches, its transport wrapped by wrap (nil:
// not wrapped).
func newTarget(admin *rest.Config, wrap transport.WrapperFunc) (target, error) {
	cfg := rest.CopyConfig(admin)
	cfg.WrapTransport = wrap
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	// One transport for both clients, as a clientset shares one between its API groups.
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return target{}, fmt.Errorf("a client for the cluster: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return target{}, fmt.Errorf("a client for the cluster: %w", err)
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return target{}, fmt.Errorf("a client for the cluster: %w", err)
	}
	return target{dyn: dyn, cs: cs}, nil
}

// kind is how the target writes, finds and deletes the objects of one kind.
type kind struct {
	name     string
	resource schema.GroupVersionResource
	// owned: each object is one request's own, labelled with its RequestID: written with a
	// forced server-side apply, deleted when the request no longer renders it (prune), and
	// checked by missing. An object of a kind not owned (a namespace) is created when missing
	// and left alone after: others may put their objects into it.
	owned bool
}

// kinds are the kinds of the objects a plan renders, in the order prune deletes them: bindings
// before the roles they bind, the ServiceAccount after the bindings that name it.
var kinds = []kind{
	{name: "RoleBinding", resource: rbacv1.SchemeGroupVersion.WithResource("rolebindings"), owned: true},
	{name: "ClusterRoleBinding", resource: rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"), owned: true},
	{name: "Role", resource: rbacv1.SchemeGroupVersion.WithResource("roles"), owned: true},
	{name: "ClusterRole", resource: rbacv1.SchemeGroupVersion.WithResource("clusterroles"), owned: true},
	{name: "ServiceAccount", resource: corev1.SchemeGroupVersion.WithResource("serviceaccounts"), owned: true},
	{name: "Namespace", resource: corev1.SchemeGroupVersion.WithResource("namespaces")},
}

// kindOfObject is the entry of kinds for o.
func kindOfObject(o object) (kind, error) {
	i := slices.IndexFunc(kinds, func(k kind) bool { return k.name == kindOf(o.obj) })
	if i < 0 {
		return kind{}, fmt.Errorf("cannot write kind %q", kindOf(o.obj))
	}
	return kinds[i], nil
}

// resource is the client of the objects of kind k in namespace (all namespaces, or cluster-scoped
// objects, for "").
func (t target) resource(k kind, namespace string) dynamic.ResourceInterface {
	return t.dyn.Resource(k.resource).Namespace(namespace)
}

// grant makes the cluster hold exactly what p renders: its namespaces, created if missing, and
// its ServiceAccount (token plans), (Cluster)Roles and bindings, each written with one
// server-side apply. Unless fresh (nothing was ever made for this request), objects of the
// request that p no longer renders are deleted. Errors the user must fix carry a reason.
func (t target) grant(ctx context.Context, p plan, fresh bool) error {
	if err := p.check(); err != nil {
		return err
	}
	for _, o := range p.render() {
		if err := t.apply(ctx, p.id, o); err != nil {
			return err
		}
	}
	if fresh {
		return nil
	}
	return t.prune(ctx, p)
}

// revoke deletes everything made for the request with id: it prunes to an empty plan. The
// ServiceAccount's deletion invalidates its tokens.
func (t target) revoke(ctx context.Context, id string) error {
	return t.prune(ctx, plan{id: id})
}

// apply writes o for the request with id. An object of an owned kind is written with a forced
// server-side apply as FieldManager, after checking that a name the user chose is not taken by
// someone else's object (checkName); one of a kind not owned is created unless it exists.
func (t target) apply(ctx context.Context, id string, o object) error {
	k, err := kindOfObject(o)
	if err != nil {
		return err
	}
	ns, name := o.meta.Namespace, o.meta.Name
	if !k.owned {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.obj)
		if err != nil {
			return err
		}
		_, err = t.resource(k, ns).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{FieldManager: FieldManager})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return explain(fmt.Errorf("creating %s %s: %w", strings.ToLower(k.name), qualified(ns, name), err), k.name, ns, name)
		}
		return nil
	}
	if o.userNamed {
		if err := t.checkName(ctx, id, k, ns, name); err != nil {
			return err
		}
	}
	if k.name == "ServiceAccount" {
		if err := t.dropEarlier(ctx, k, ns, name, o.meta.Labels[LabelRequestUID]); err != nil {
			return err
		}
	}
	data, err := json.Marshal(o.obj)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}
	if _, err := t.resource(k, ns).Patch(ctx, name, types.ApplyPatchType, data, opts); err != nil {
		return explain(err, k.name, ns, name)
	}
	return nil
}

// prune deletes every object of the owned kinds that is labelled for the request p.id and that
// p does not render, in the order of kinds. Deleting goes on past an error; all are returned.
func (t target) prune(ctx context.Context, p plan) error {
	sel := metav1.ListOptions{LabelSelector: LabelRequestID + "=" + p.id}
	var errs []error
	for _, k := range kinds {
		if !k.owned {
			continue
		}
		list, err := t.resource(k, "").List(ctx, sel)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("listing the %ss of the request: %w", k.name, err))...)
		}
		for _, o := range list.Items {
			if p.wants(k.name, o.GetNamespace(), o.GetName()) {
				continue
			}
			if err := t.resource(k, o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{}); client404(err) != nil {
				errs = append(errs, fmt.Errorf("deleting %s %s: %w", k.name, qualified(o.GetNamespace(), o.GetName()), err))
			}
		}
	}
	return errors.Join(errs...)
}

// dropEarlier deletes the object of kind k named namespace/name when it was made for an earlier
// AccessRequest of the same name (its LabelRequestUID is another than uid): a restore can bring
// back the ServiceAccount of a request deleted since, and the new request must not take it over,
// since the tokens issued for the old one would work again. Nothing happens when uid is empty or
// the object has no such label (made before the label existed).
func (t target) dropEarlier(ctx context.Context, k kind, namespace, name, uid string) error {
	if uid == "" {
		return nil
	}
	m, err := t.resource(k, namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", k.name, qualified(namespace, name), err)
	}
	if old := m.GetLabels()[LabelRequestUID]; old == "" || old == uid {
		return nil
	}
	del := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(m.GetUID())}}
	if err := t.resource(k, namespace).Delete(ctx, name, del); client404(err) != nil {
		return fmt.Errorf("deleting %s %s of an earlier AccessRequest of the same name: %w", k.name, qualified(namespace, name), err)
	}
	return nil
}

// token asks the TokenRequest API for a token of sa valid for d. It returns the token and when
// it expires, as the API server says.
func (t target) token(ctx context.Context, sa *corev1.ServiceAccount, d time.Duration) (string, time.Time, error) {
	tr, err := t.cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(d / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("requesting a token of ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

// checkName fails with ReasonNameConflict if an object of kind k named namespace/name exists
// that was not made for the request with id.
func (t target) checkName(ctx context.Context, id string, k kind, namespace, name string) error {
	m, err := t.resource(k, namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", k.name, qualified(namespace, name), err)
	case m.GetLabels()[LabelRequestID] == id:
		return nil
	case m.GetAnnotations()[AnnotationRequestName] != "":
		return kit.Errorf(ReasonNameConflict, "%s %s exists in the cluster and belongs to AccessRequest %s; choose another name in spec.token.permissions",
			k.name, qualified(namespace, name), m.GetAnnotations()[AnnotationRequestName])
	default:
		return kit.Errorf(ReasonNameConflict, "%s %s exists in the cluster and was not made by this provider; choose another name in spec.token.permissions, or leave the name empty to have one generated",
			k.name, qualified(namespace, name))
	}
}

// missing says what of p the cluster no longer holds ("ServiceAccount openmcp-access/ar-x, ClusterRoleBinding y"),
// or "" when everything is there: a cluster restored from an older state, replaced, or tampered
// with. Only objects of owned kinds count. For a token plan, token is the token the request's
// Secret holds: a ServiceAccount of the same name made anew (another UID) counts as missing,
// since that token no longer authenticates.
func (t target) missing(ctx context.Context, p plan, token string) (string, error) {
	var gone []string
	for _, o := range p.render() {
		k, err := kindOfObject(o)
		if err != nil {
			return "", err
		}
		if !k.owned {
			continue
		}
		ns, name := o.meta.Namespace, o.meta.Name
		obj, err := t.resource(k, ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			gone = append(gone, k.name+" "+qualified(ns, name))
		case err != nil:
			return "", fmt.Errorf("reading %s %s: %w", k.name, qualified(ns, name), err)
		case k.name == "ServiceAccount" && token != "" && tokenUID(token) != "" && tokenUID(token) != string(obj.GetUID()):
			gone = append(gone, k.name+" "+qualified(ns, name)+" (made anew since the token was issued)")
		}
	}
	return strings.Join(gone, ", "), nil
}

// tokenUID is the ServiceAccount UID a service-account token names, or "" (it does not read).
// The token is not verified: it is the provider's own, read from its Secret.
func tokenUID(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Kubernetes struct {
			ServiceAccount struct {
				UID string `json:"uid"`
			} `json:"serviceaccount"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	return claims.Kubernetes.ServiceAccount.UID
}

// explain gives an error of the cluster's API server about an object of the request the reason
// the user must act on: an invalid object, or a namespace that does not exist.
func explain(err error, kind, namespace, name string) error {
	switch {
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return kit.Errorf(ReasonInvalidPermissions, "the cluster rejected %s %s: %s; fix spec.token", kind, qualified(namespace, name), apiMessage(err))
	case apierrors.IsNotFound(err) && namespace != "":
		return kit.Errorf(ReasonNamespaceNotFound, "namespace %s does not exist in the cluster and its automatic creation is disabled (disableAutomaticNamespaceCreation); create it, or enable its creation", namespace)
	case apierrors.IsForbidden(err) && kind == "Namespace":
		return kit.Errorf(ReasonInvalidPermissions, "the cluster refused to create namespace %s: %s", name, apiMessage(err))
	}
	return fmt.Errorf("applying %s %s: %w", kind, qualified(namespace, name), err)
}

func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

func qualified(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
