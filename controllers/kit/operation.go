package kit

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/openmcp-local/cluster-provider/api/constants"
)

// Operation is what the openmcp.cloud/operation annotation asks of a controller.
type Operation int

const (
	// OperationNone: no annotation (or an unknown value); reconcile as usual.
	OperationNone Operation = iota
	// OperationIgnore: do not reconcile.
	OperationIgnore
	// OperationReconcile: reconcile fully, skipping no step, then remove the annotation.
	OperationReconcile
)

// OperationOf reads the operation annotation of obj.
func OperationOf(obj client.Object) Operation {
	switch obj.GetAnnotations()[constants.OperationAnnotation] {
	case constants.OperationAnnotationValueIgnore:
		return OperationIgnore
	case constants.OperationAnnotationValueReconcile:
		return OperationReconcile
	default:
		return OperationNone
	}
}

// RemoveReconcileAnnotation removes the reconcile operation annotation from obj with a merge
// patch that fails if obj changed meanwhile (so a newer annotation is never lost). obj is updated
// in place.
func RemoveReconcileAnnotation(ctx context.Context, c client.Client, obj client.Object) error {
	if OperationOf(obj) != OperationReconcile {
		return nil
	}
	return RemoveAnnotation(ctx, c, obj, constants.OperationAnnotation)
}

// RemoveAnnotation removes the annotation key from obj with a merge patch that fails if obj
// changed meanwhile (so a newer value is never lost): for a request made by annotating obj, once
// it is carried out. obj is updated in place.
func RemoveAnnotation(ctx context.Context, c client.Client, obj client.Object, key string) error {
	annotations := obj.GetAnnotations()
	if _, ok := annotations[key]; !ok {
		return nil
	}
	base := obj.DeepCopyObject().(client.Object)
	delete(annotations, key)
	obj.SetAnnotations(annotations)
	if err := c.Patch(ctx, obj, LockedMergeFrom(base)); err != nil {
		return fmt.Errorf("removing the annotation %s: %w", key, err)
	}
	return nil
}

// HandleOperation applies the operation annotation at the start of a reconcile: stop is true
// when obj is to be ignored; a reconcile annotation is removed (the caller then reconciles fully,
// skipping no step).
func HandleOperation(ctx context.Context, c client.Client, obj client.Object) (stop bool, err error) {
	switch OperationOf(obj) {
	case OperationIgnore:
		log.FromContext(ctx).V(1).Info("Ignoring the object: it has the ignore operation annotation", "object", klog.KObj(obj))
		return true, nil
	case OperationReconcile:
		return false, RemoveReconcileAnnotation(ctx, c, obj)
	default:
		return false, nil
	}
}
