package kit

import (
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/openmcp-local/cluster-provider/api/constants"
)

// HasLabel passes objects that carry the label key; with a non-empty value, only if the label
// has that value.
func HasLabel(key, value string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		v, ok := o.GetLabels()[key]
		return ok && (value == "" || v == value)
	})
}

// HasAnnotation passes objects whose annotation key has value.
func HasAnnotation(key, value string) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(o client.Object) bool {
		v, ok := o.GetAnnotations()[key]
		return ok && v == value
	})
}

// GotAnnotation passes updates after which the annotation key has value and before which it had
// not.
func GotAnnotation(key, value string) predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[key] != value && e.ObjectNew.GetAnnotations()[key] == value
	}}
}

// LostAnnotation passes updates before which the annotation key had value and after which it has
// not.
func LostAnnotation(key, value string) predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetAnnotations()[key] == value && e.ObjectNew.GetAnnotations()[key] != value
	}}
}

// AnnotationsChanged passes updates that set, change or remove any of the annotations keys: the
// requests a user makes of an object by annotating it (a snapshot, a restore) change no
// generation.
func AnnotationsChanged(keys ...string) predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, cur := e.ObjectOld.GetAnnotations(), e.ObjectNew.GetAnnotations()
		return slices.ContainsFunc(keys, func(k string) bool {
			o, had := old[k]
			c, has := cur[k]
			return had != has || o != c
		})
	}}
}

// DeletionTimestampChanged passes updates that set or clear the deletion timestamp.
func DeletionTimestampChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	}}
}

// FinalizersChangedWhileDeleting passes updates of an object being deleted whose finalizers
// changed: a controller that waits for other finalizers to go learns when one went.
func FinalizersChangedWhileDeleting() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return !e.ObjectNew.GetDeletionTimestamp().IsZero() &&
			!slices.Equal(e.ObjectOld.GetFinalizers(), e.ObjectNew.GetFinalizers())
	}}
}

// StandardFilter is the event filter of controller-guidelines.md: updates pass only on a
// generation change, a deletion timestamp change, gaining operation=reconcile or losing
// operation=ignore, or one of the extra predicates; nothing passes while operation=ignore is set.
// Creates and deletes pass unless ignored.
func StandardFilter(extra ...predicate.Predicate) predicate.Predicate {
	return predicate.And(
		predicate.Or(append([]predicate.Predicate{
			predicate.GenerationChangedPredicate{},
			DeletionTimestampChanged(),
			GotAnnotation(constants.OperationAnnotation, constants.OperationAnnotationValueReconcile),
			LostAnnotation(constants.OperationAnnotation, constants.OperationAnnotationValueIgnore),
		}, extra...)...),
		predicate.Not(HasAnnotation(constants.OperationAnnotation, constants.OperationAnnotationValueIgnore)),
	)
}
