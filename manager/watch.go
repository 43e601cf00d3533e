package manager

import (
	"context"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Watch maps the events of a secondary kind (one the engine does not route on its own, or routes
// for another reason) to objects of a routed kind: a Cluster that became Ready to the
// AccessRequests waiting for it, a deleted Secret to the AccessRequest that owns it. Like a Kind,
// it has exactly one event handler on the shared informer, whatever the number of profiles; Map
// costs what its lookup costs (a cache index), never a scan of the profiles.
type Watch struct {
	// Name identifies the watch in logs, e.g. "cluster-to-accessrequest".
	Name string
	// Object is an empty object of the watched kind, e.g. &clustersv1alpha1.Cluster{}.
	Object client.Object
	// Kind is the Kind.Name of the routed kind the mapped requests go to.
	Kind string
	// Predicates filter events before Map; an event is mapped only if all pass.
	Predicates []predicate.Predicate
	// Map returns the objects of Kind that must be reconciled because of obj, each with the
	// profile that owns it. It must not block: read from the shared cache only. ctx ends when
	// the engine stops.
	Map func(ctx context.Context, obj client.Object) []Target
}

// Target is one object a Watch maps to: a request for the reconciler of Profile.
type Target struct {
	Profile string
	Request reconcile.Request
}

// watcher is the one event handler of a Watch on its shared informer.
type watcher struct {
	ctx    context.Context
	engine *Engine
	watch  *Watch
}

var _ toolscache.ResourceEventHandler = &watcher{}

// OnAdd maps a created object. The replay of the informer's contents when the handler is
// registered is skipped: no profile runs then, and StartProfile enqueues a profile's own objects.
func (w *watcher) OnAdd(obj any, isInInitialList bool) {
	if isInInitialList {
		return
	}
	if o, ok := obj.(client.Object); ok && w.pass(func(p predicate.Predicate) bool {
		return p.Create(event.CreateEvent{Object: o, IsInInitialList: isInInitialList})
	}) {
		w.send(o)
	}
}

func (w *watcher) OnUpdate(oldObj, newObj any) {
	oldO, ok1 := oldObj.(client.Object)
	newO, ok2 := newObj.(client.Object)
	if ok1 && ok2 && w.pass(func(p predicate.Predicate) bool {
		return p.Update(event.UpdateEvent{ObjectOld: oldO, ObjectNew: newO})
	}) {
		w.send(newO)
	}
}

func (w *watcher) OnDelete(obj any) {
	unknown := false
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, unknown = tomb.Obj, true
	}
	if o, ok := obj.(client.Object); ok && w.pass(func(p predicate.Predicate) bool {
		return p.Delete(event.DeleteEvent{Object: o, DeleteStateUnknown: unknown})
	}) {
		w.send(o)
	}
}

func (w *watcher) pass(accepts func(predicate.Predicate) bool) bool {
	for _, p := range w.watch.Predicates {
		if !accepts(p) {
			return false
		}
	}
	return true
}

// send enqueues every target of o with its profile; targets of profiles that do not run reach
// nobody.
func (w *watcher) send(o client.Object) {
	for _, t := range w.watch.Map(w.ctx, o) {
		w.engine.Enqueue(w.watch.Kind, t.Profile, t.Request)
	}
}
