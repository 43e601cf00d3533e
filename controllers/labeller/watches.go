package labeller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Cache indexes the labeller registers. Values are namespace/name keys (a plain name for the
// cluster-scoped ClusterProfile). The AccessRequest indexes hold only AccessRequests that still
// lack a label, so they stay as small as the backlog.
const (
	// indexRequestRef: AccessRequest → its spec.requestRef, if spec.clusterRef is empty.
	indexRequestRef = "labeller.spec.requestRef"
	// indexClusterRef: AccessRequest → its spec.clusterRef.
	indexClusterRef = "labeller.spec.clusterRef"
	// indexGrantedCluster: ClusterRequest → the Cluster it was granted.
	indexGrantedCluster = "labeller.status.cluster"
	// indexProfile: Cluster → its spec.profile.
	indexProfile = "labeller.spec.profile"
)

// SetupWithManager fills the defaults, registers the cache indexes and builds the controller on
// the manager's shared cache. One Reconciler per manager: the index names are fixed.
//
// AccessRequest events pass when the AccessRequest wants labelling (lacks a label, matches the
// selector, is not ignored) and the event can change the outcome: a create, or an update of the
// spec, the labels (a removed label, a selector label) or the annotations (ignore lifted,
// reconcile added). Status-only updates, the labeller's own status write among them, do not pass;
// generation filtering alone would miss label removals. ClusterRequest, Cluster and
// ClusterProfile events are mapped back to the AccessRequests waiting for them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}
	if r.Selector == nil {
		r.Selector = labels.Everything()
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if err := registerIndexes(mgr.GetFieldIndexer()); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&clustersv1alpha1.AccessRequest{}, builder.WithPredicates(
			predicate.NewPredicateFuncs(r.wants),
			predicate.Or(predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, predicate.AnnotationChangedPredicate{}),
		)).
		Watches(&clustersv1alpha1.ClusterRequest{}, handler.EnqueueRequestsFromMapFunc(r.mapClusterRequest)).
		Watches(&clustersv1alpha1.Cluster{}, handler.EnqueueRequestsFromMapFunc(r.mapCluster)).
		Watches(&clustersv1alpha1.ClusterProfile{}, handler.EnqueueRequestsFromMapFunc(r.mapClusterProfile)).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// owns reports whether AccessRequest o is this labeller's: it lacks a label and matches the
// selector.
func (r *Reconciler) owns(o client.Object) bool {
	return lacksLabel(o) && r.Selector.Matches(labels.Set(o.GetLabels()))
}

// resets reports whether AccessRequest o is labelled, matches the selector and must be set Pending
// for its provider (kit.NeedsPending), and is not ignored.
func (r *Reconciler) resets(o client.Object) bool {
	ar, ok := o.(*clustersv1alpha1.AccessRequest)
	return ok && kit.NeedsPending(ar) && r.Selector.Matches(labels.Set(o.GetLabels())) &&
		kit.OperationOf(o) != kit.OperationIgnore
}

// wants reports whether the labeller is to work on AccessRequest o: it owns it or must set it
// Pending, and o is not ignored.
func (r *Reconciler) wants(o client.Object) bool {
	return (r.owns(o) || r.resets(o) || hasTTL(o)) && kit.OperationOf(o) != kit.OperationIgnore
}

func registerIndexes(indexer client.FieldIndexer) error {
	indexes := []struct {
		obj   client.Object
		name  string
		value func(client.Object) []string
	}{
		{&clustersv1alpha1.AccessRequest{}, indexRequestRef, func(o client.Object) []string {
			ar := o.(*clustersv1alpha1.AccessRequest)
			if !lacksLabel(ar) || ar.Spec.ClusterRef != nil || ar.Spec.RequestRef == nil {
				return nil
			}
			return []string{ar.Spec.RequestRef.Key(ar.Namespace).String()}
		}},
		{&clustersv1alpha1.AccessRequest{}, indexClusterRef, func(o client.Object) []string {
			ar := o.(*clustersv1alpha1.AccessRequest)
			if !lacksLabel(ar) || ar.Spec.ClusterRef == nil {
				return nil
			}
			return []string{ar.Spec.ClusterRef.Key(ar.Namespace).String()}
		}},
		{&clustersv1alpha1.ClusterRequest{}, indexGrantedCluster, func(o client.Object) []string {
			cluster, err := grantedCluster(o.(*clustersv1alpha1.ClusterRequest))
			if err != nil {
				return nil
			}
			return []string{cluster.String()}
		}},
		{&clustersv1alpha1.Cluster{}, indexProfile, func(o client.Object) []string {
			return []string{o.(*clustersv1alpha1.Cluster).Spec.Profile}
		}},
	}
	for _, ix := range indexes {
		if err := indexer.IndexField(context.Background(), ix.obj, ix.name, ix.value); err != nil {
			return fmt.Errorf("registering cache index %s: %w", ix.name, err)
		}
	}
	return nil
}

// mapClusterRequest returns the AccessRequests waiting for ClusterRequest o.
func (r *Reconciler) mapClusterRequest(ctx context.Context, o client.Object) []reconcile.Request {
	return r.waitingOn(ctx, indexRequestRef, client.ObjectKeyFromObject(o).String())
}

// mapCluster returns the AccessRequests waiting for Cluster o: those naming it in
// spec.clusterRef and those whose ClusterRequest was granted it.
func (r *Reconciler) mapCluster(ctx context.Context, o client.Object) []reconcile.Request {
	key := client.ObjectKeyFromObject(o).String()
	reqs := r.waitingOn(ctx, indexClusterRef, key)
	crs := &clustersv1alpha1.ClusterRequestList{}
	if err := r.Client.List(ctx, crs, client.MatchingFields{indexGrantedCluster: key}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing the ClusterRequests granted a Cluster", "index", indexGrantedCluster, "cluster", key)
		return reqs
	}
	for i := range crs.Items {
		reqs = append(reqs, r.mapClusterRequest(ctx, &crs.Items[i])...)
	}
	return reqs
}

// mapClusterProfile returns the AccessRequests waiting for ClusterProfile o: those waiting for
// any Cluster of that profile.
func (r *Reconciler) mapClusterProfile(ctx context.Context, o client.Object) []reconcile.Request {
	clusters := &clustersv1alpha1.ClusterList{}
	if err := r.Client.List(ctx, clusters, client.MatchingFields{indexProfile: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing the Clusters of a ClusterProfile", "index", indexProfile, "clusterProfile", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	for i := range clusters.Items {
		reqs = append(reqs, r.mapCluster(ctx, &clusters.Items[i])...)
	}
	return reqs
}

// waitingOn returns the AccessRequests in the given index under key that the labeller wants.
func (r *Reconciler) waitingOn(ctx context.Context, index, key string) []reconcile.Request {
	ars := &clustersv1alpha1.AccessRequestList{}
	if err := r.Client.List(ctx, ars, client.MatchingFields{index: key}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing the AccessRequests waiting for an object", "index", index, "key", key)
		return nil
	}
	var reqs []reconcile.Request
	for i := range ars.Items {
		if r.wants(&ars.Items[i]) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ars.Items[i])})
		}
	}
	return reqs
}

// hasTTL reports whether AccessRequest o has a spec.ttl: the labeller deletes it when it ends.
func hasTTL(o client.Object) bool {
	ar, ok := o.(*clustersv1alpha1.AccessRequest)
	return ok && ar.Spec.TTL != nil
}
