package manager

import (
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// router is the one event handler of a kind on its shared informer. It routes each event to the
// profile that owns the object by a map lookup.
type router struct {
	engine *Engine
	kind   *Kind
}

var _ toolscache.ResourceEventHandler = &router{}

// OnAdd routes a created object (or one listed by the informer) to its owner.
func (r *router) OnAdd(obj any, isInInitialList bool) {
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	if r.pass(func(p predicate.Predicate) bool {
		return p.Create(event.CreateEvent{Object: o, IsInInitialList: isInInitialList})
	}) {
		r.route(r.kind.Key(o), o)
	}
}

// OnUpdate routes an updated object to its owner and, if the key changed, to the former owner.
func (r *router) OnUpdate(oldObj, newObj any) {
	oldO, ok1 := oldObj.(client.Object)
	newO, ok2 := newObj.(client.Object)
	if !ok1 || !ok2 {
		return
	}
	oldKey, newKey := r.kind.Key(oldO), r.kind.Key(newO)
	// A key change always reaches the new owner, even if the predicates would filter the update:
	// for the new owner it is the object's first appearance.
	if oldKey != newKey {
		r.route(newKey, newO)
		r.route(oldKey, newO)
		return
	}
	if r.pass(func(p predicate.Predicate) bool {
		return p.Update(event.UpdateEvent{ObjectOld: oldO, ObjectNew: newO})
	}) {
		r.route(newKey, newO)
	}
}

// OnDelete routes a deleted object, also when only its tombstone is known.
func (r *router) OnDelete(obj any) {
	unknown := false
	if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj, unknown = tomb.Obj, true
	}
	o, ok := obj.(client.Object)
	if !ok {
		return
	}
	if r.pass(func(p predicate.Predicate) bool {
		return p.Delete(event.DeleteEvent{Object: o, DeleteStateUnknown: unknown})
	}) {
		r.route(r.kind.Key(o), o)
	}
}

// pass reports whether every predicate of the kind lets the event through.
func (r *router) pass(accepts func(predicate.Predicate) bool) bool {
	for _, p := range r.kind.Predicates {
		if !accepts(p) {
			return false
		}
	}
	return true
}

func (r *router) route(key string, o client.Object) {
	if key == "" {
		return
	}
	r.engine.Enqueue(r.kind.Name, key, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
}
