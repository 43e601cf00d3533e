package cluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusters,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusters/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusterprofiles,verbs=get;list;watch

// Reconciler reconciles the Clusters of one ClusterProfile.
type Reconciler struct {
	kit.ProfileScope
}

// Reconcile follows the usual shape: fetch, responsibility check, operation annotation,
// then reconcileDelete or reconcileNormal with one status patch.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cl := &clustersv1alpha1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	mine, err := r.responsible(ctx, cl)
	if err != nil || !mine {
		return reconcile.Result{}, err
	}

	if stop, err := kit.HandleOperation(ctx, r.Client, cl); stop || err != nil {
		return reconcile.Result{}, err
	}

	if !cl.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, cl)
	}
	return r.reconcileNormal(ctx, cl)
}

// responsible reports whether cl's profile is the one this instance serves and belongs to this
// provider. A Cluster of another provider's profile, or of a profile that does not exist, is not
// this reconciler's business: it is neither touched nor an error.
func (r *Reconciler) responsible(ctx context.Context, cl *clustersv1alpha1.Cluster) (bool, error) {
	if cl.Spec.Profile != r.Profile {
		return false, nil
	}
	prof := &clustersv1alpha1.ClusterProfile{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: cl.Spec.Profile}, prof); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading ClusterProfile %s: %w", cl.Spec.Profile, err)
	}
	return prof.Spec.ProviderRef.Name == r.ProviderName, nil
}

func (r *Reconciler) reconcileNormal(ctx context.Context, cl *clustersv1alpha1.Cluster) (reconcile.Result, error) {
	if err := kit.AddFinalizer(ctx, r.Client, cl, kit.Finalizer(r.ProviderName)); err != nil {
		return reconcile.Result{}, err
	}
	base := cl.DeepCopy()
	setNoBackend(cl)
	if err := kit.PatchStatusIfChanged(ctx, r.Client, base, cl, statusOf); err != nil {
		return reconcile.Result{}, fmt.Errorf("writing the status: %w", err)
	}
	return reconcile.Result{}, nil
}

func (r *Reconciler) reconcileDelete(ctx context.Context, cl *clustersv1alpha1.Cluster) (reconcile.Result, error) {
	finalizer := kit.Finalizer(r.ProviderName)
	if !controllerutil.ContainsFinalizer(cl, finalizer) {
		return reconcile.Result{}, nil
	}
	// No backend is wired in yet, so there is nothing to delete behind the Cluster.
	if err := kit.RemoveFinalizer(ctx, r.Client, cl, finalizer); err != nil {
		return reconcile.Result{}, err
	}
	if r.Recorder != nil {
		r.Recorder.Eventf(cl, nil, "Normal", ReasonDeleted, "Delete", "Cluster released: nothing was provisioned for it")
	}
	return reconcile.Result{}, nil
}

func statusOf(cl *clustersv1alpha1.Cluster) any { return cl.Status }
