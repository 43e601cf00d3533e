package scheduler

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/keymutex"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// Cache indexes of ClusterRequests the scheduler registers.
const (
	// indexCluster: ClusterRequest → the namespace/name of the Cluster it was granted.
	indexCluster = "scheduler.status.cluster"
	// indexUID: ClusterRequest → its UID, to find the request behind a Cluster's finalizer.
	indexUID = "scheduler.metadata.uid"
	// indexWaiting: ClusterRequest → waitingKey while it has no Cluster. The index holds only the
	// requests that wait, so it is as small as the backlog.
	indexWaiting = "scheduler.waiting"
	waitingKey   = "waiting"
)

// SetupWithManager fills the defaults, registers the cache indexes and builds the controller on the
// manager's shared cache. One Reconciler per manager: the index names are fixed.
//
// ClusterRequest events pass when the request is the scheduler's and the event can change the
// outcome: a create, or a change of the spec, labels, annotations or deletion; status-only
// updates (the scheduler's own writes among them) do not. Cluster events reach:
//   - every request that waits for a Cluster, when a Cluster goes, starts deleting, serves fewer
//     requests, or changes labels or purposes (any of which can unblock a waiting request);
//   - the requests whose finalizer a Cluster lost, and the requests granted a Cluster that goes or
//     starts deleting.
//
// A grant (a finalizer added) reaches no one, so a burst of grants costs no extra passes.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Config == nil {
		return fmt.Errorf("the scheduler needs its configuration (the scheduler: section)")
	}
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorder(ControllerName)
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if r.Intn == nil {
		r.Intn = rand.IntN
	}
	sel, err := r.Config.RequestSelector()
	if err != nil {
		return err
	}
	r.requests = sel
	r.book = newBook(r.Client)
	r.stripes = keymutex.NewHashed(stripes)
	if err := registerIndexes(mgr.GetFieldIndexer()); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&clustersv1alpha1.ClusterRequest{}, builder.WithPredicates(
			predicate.NewPredicateFuncs(r.wants),
			predicate.Or[client.Object](predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{},
				predicate.AnnotationChangedPredicate{}, deletionStarted()),
		)).
		Watches(&clustersv1alpha1.Cluster{}, r.clusterHandler()).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

func registerIndexes(indexer client.FieldIndexer) error {
	indexes := []struct {
		name  string
		value func(*clustersv1alpha1.ClusterRequest) []string
	}{
		{indexCluster, func(cr *clustersv1alpha1.ClusterRequest) []string {
			if cr.Status.Cluster == nil {
				return nil
			}
			return []string{cr.Status.Cluster.Key(cr.Namespace).String()}
		}},
		{indexUID, func(cr *clustersv1alpha1.ClusterRequest) []string { return []string{string(cr.UID)} }},
		{indexWaiting, func(cr *clustersv1alpha1.ClusterRequest) []string {
			if cr.Status.Cluster != nil {
				return nil
			}
			return []string{waitingKey}
		}},
	}
	for _, ix := range indexes {
		if err := indexer.IndexField(context.Background(), &clustersv1alpha1.ClusterRequest{}, ix.name, func(o client.Object) []string {
			return ix.value(o.(*clustersv1alpha1.ClusterRequest))
		}); err != nil {
			return fmt.Errorf("registering cache index %s: %w", ix.name, err)
		}
	}
	return nil
}

// deletionStarted passes updates that set the deletion timestamp.
func deletionStarted() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() && !e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// clusterHandler maps Cluster events to the ClusterRequests they concern (see SetupWithManager).
func (r *Reconciler) clusterHandler() handler.EventHandler {
	type queue = workqueue.TypedRateLimitingInterface[reconcile.Request]
	return handler.Funcs{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			old, cl := e.ObjectOld.(*clustersv1alpha1.Cluster), e.ObjectNew.(*clustersv1alpha1.Cluster)
			started := old.DeletionTimestamp.IsZero() && !cl.DeletionTimestamp.IsZero()
			lost := requestUIDs(old).Difference(requestUIDs(cl))
			if started || lost.Len() > 0 || !maps.Equal(old.Labels, cl.Labels) || !slices.Equal(old.Spec.Purposes, cl.Spec.Purposes) {
				r.enqueue(ctx, q, indexWaiting, waitingKey)
			}
			if started {
				r.enqueue(ctx, q, indexCluster, client.ObjectKeyFromObject(cl).String())
			}
			for uid := range lost {
				r.enqueue(ctx, q, indexUID, uid)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			r.enqueue(ctx, q, indexWaiting, waitingKey)
			r.enqueue(ctx, q, indexCluster, client.ObjectKeyFromObject(e.Object).String())
		},
	}
}

// enqueue adds the ClusterRequests under key in index that the scheduler wants.
func (r *Reconciler) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], index, key string) {
	list := &clustersv1alpha1.ClusterRequestList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{index: key}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing the ClusterRequests concerned by a Cluster", "index", index, "key", key)
		return
	}
	for i := range list.Items {
		if r.wants(&list.Items[i]) {
			q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
}

// requestUIDs are the UIDs of the requests cl serves, from its finalizers.
func requestUIDs(cl *clustersv1alpha1.Cluster) sets.Set[string] {
	s := sets.New[string]()
	for _, f := range cl.Finalizers {
		if uid, ok := strings.CutPrefix(f, requestFinalizerPrefix); ok {
			s.Insert(uid)
		}
	}
	return s
}
