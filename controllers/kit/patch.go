package kit

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// PatchStatusIfChanged writes obj's status with one merge patch against base, guarded by
// optimistic locking (so another controller's condition is never overwritten by a stale list),
// and writes nothing when the status did not change. status returns the status field of an
// object of obj's type.
func PatchStatusIfChanged[T client.Object](ctx context.Context, c client.Client, base, obj T, status func(T) any) error {
	if equality.Semantic.DeepEqual(status(base), status(obj)) {
		return nil
	}
	return c.Status().Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
}
