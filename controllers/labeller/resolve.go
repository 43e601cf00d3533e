package labeller

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// target is what an AccessRequest is prepared with: its two labels and its Cluster.
type target struct {
	// Provider is the ClusterProfile's spec.providerRef.name.
	Provider string
	// Profile is the ClusterProfile's name.
	Profile string
	// Cluster is the Cluster the request is for; its namespace is always set.
	Cluster types.NamespacedName
}

// String describes t for the ProviderResolved condition.
func (t target) String() string {
	return fmt.Sprintf("ClusterProvider %q is responsible: Cluster %s has ClusterProfile %q", t.Provider, t.Cluster, t.Profile)
}

// label is one label the labeller sets.
type label struct{ key, value string }

// labels returns the labels t asks for: provider first, then profile.
func (t target) labels() []label {
	return []label{{clustersv1alpha1.ProviderLabel, t.Provider}, {clustersv1alpha1.ProfileLabel, t.Profile}}
}

// lacksLabel reports whether o misses the provider or the profile label: only such
// AccessRequests are the labeller's to label.
func lacksLabel(o client.Object) bool { return !kit.Labelled(o) }

// resolve follows ar's references through the cache to the responsible provider. Outcomes the
// AccessRequest has to wait for, or that a user has to fix, are kit.ReasonErrors; any other
// error is unexpected.
func (r *Reconciler) resolve(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (target, error) {
	clusterKey, err := r.clusterOf(ctx, ar)
	if err != nil {
		return target{}, err
	}
	cluster := &clustersv1alpha1.Cluster{}
	if err := r.Client.Get(ctx, clusterKey, cluster); err != nil {
		return target{}, notFound(err, ReasonClusterNotFound, "Cluster %s", clusterKey)
	}
	profile := &clustersv1alpha1.ClusterProfile{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: cluster.Spec.Profile}, profile); err != nil {
		return target{}, notFound(err, ReasonClusterProfileNotFound, "ClusterProfile %q of Cluster %s", cluster.Spec.Profile, clusterKey)
	}
	t := target{Provider: profile.Spec.ProviderRef.Name, Profile: profile.Name, Cluster: clusterKey}
	for _, l := range t.labels() {
		if errs := validation.IsValidLabelValue(l.value); len(errs) > 0 {
			return target{}, kit.Errorf(ReasonInvalidLabelValue, "%q cannot be the value of label %s: %s", l.value, l.key, strings.Join(errs, "; "))
		}
	}
	return t, nil
}

// clusterOf returns the Cluster ar is for: spec.clusterRef if set (it wins), else the cluster of
// the ClusterRequest spec.requestRef names.
func (r *Reconciler) clusterOf(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (types.NamespacedName, error) {
	switch {
	case ar.Spec.ClusterRef != nil:
		return ar.Spec.ClusterRef.Key(ar.Namespace), nil
	case ar.Spec.RequestRef != nil:
		key := ar.Spec.RequestRef.Key(ar.Namespace)
		cr := &clustersv1alpha1.ClusterRequest{}
		if err := r.Client.Get(ctx, key, cr); err != nil {
			return types.NamespacedName{}, notFound(err, ReasonClusterRequestNotFound, "ClusterRequest %s", key)
		}
		return grantedCluster(cr)
	default:
		return types.NamespacedName{}, kit.Errorf(ReasonNoReference, "neither spec.clusterRef nor spec.requestRef is set")
	}
}

// grantedCluster returns the Cluster a ClusterRequest was granted, or why there is none yet.
func grantedCluster(cr *clustersv1alpha1.ClusterRequest) (types.NamespacedName, error) {
	switch {
	case cr.Status.Phase == common.PhaseDenied:
		return types.NamespacedName{}, kit.Errorf(ReasonClusterRequestDenied, "ClusterRequest %s was denied", client.ObjectKeyFromObject(cr))
	case cr.Status.Phase != common.PhaseGranted || cr.Status.Cluster == nil:
		return types.NamespacedName{}, kit.Errorf(ReasonWaitingForClusterRequest, "waiting for ClusterRequest %s to be granted a Cluster (phase %q)", client.ObjectKeyFromObject(cr), cr.Status.Phase)
	default:
		return cr.Status.Cluster.Key(cr.Namespace), nil
	}
}

// checkLabels fails with ReasonLabelConflict if labels already hold a value other than t's for
// either key.
func checkLabels(labels map[string]string, t target) error {
	var conflicts []string
	for _, l := range t.labels() {
		if v, ok := labels[l.key]; ok && v != l.value {
			conflicts = append(conflicts, fmt.Sprintf("label %s is %q but the responsible one is %q", l.key, v, l.value))
		}
	}
	if len(conflicts) > 0 {
		return kit.Errorf(ReasonLabelConflict, "%s; the AccessRequest is left unchanged: remove the label to have it set", strings.Join(conflicts, "; "))
	}
	return nil
}

// notFound turns a NotFound error for the object described by format into a reason error (the
// AccessRequest waits for the object) and wraps any other error.
func notFound(err error, reason, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if apierrors.IsNotFound(err) {
		return kit.Errorf(reason, "%s not found", what)
	}
	return fmt.Errorf("reading %s: %w", what, err)
}
