package accessrequest

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=accessrequests,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=accessrequests/status,verbs=get;patch;update

// Reconciler reconciles the AccessRequests of one ClusterProfile.
type Reconciler struct {
	kit.ProfileScope
}

// Reconcile answers one prepared AccessRequest.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ar := &clustersv1alpha1.AccessRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, ar); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.Profile == "" || ProfileOf(ar, r.ProviderName) != r.Profile {
		return reconcile.Result{}, nil
	}
	if stop, err := kit.HandleOperation(ctx, r.Client, ar); stop || err != nil {
		return reconcile.Result{}, err
	}
	if !ar.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	base := ar.DeepCopy()
	setPendingNotImplemented(ar)
	if err := kit.PatchStatusIfChanged(ctx, r.Client, base, ar, statusOf); err != nil {
		return reconcile.Result{}, fmt.Errorf("writing the status: %w", err)
	}
	return reconcile.Result{}, nil
}

// ProfileOf returns the profile an AccessRequest was prepared for, if the central labeller
// assigned it to providerName (provider label equal to providerName and a profile label set);
// else "". Only such AccessRequests are this provider's to answer.
func ProfileOf(ar client.Object, providerName string) string {
	l := ar.GetLabels()
	if l[clustersv1alpha1.ProviderLabel] != providerName {
		return ""
	}
	return l[clustersv1alpha1.ProfileLabel]
}

func statusOf(ar *clustersv1alpha1.AccessRequest) any { return ar.Status }
