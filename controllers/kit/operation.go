package kit

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

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
	base := obj.DeepCopyObject().(client.Object)
	annotations := obj.GetAnnotations()
	delete(annotations, constants.OperationAnnotation)
	obj.SetAnnotations(annotations)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("removing the %s=%s annotation: %w", constants.OperationAnnotation, constants.OperationAnnotationValueReconcile, err)
	}
	return nil
}
