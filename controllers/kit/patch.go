package kit

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// LockedMergeFrom is the patch every write of this operator uses: a merge patch against base
// that the API server rejects if the object changed since base was read (optimistic locking on
// base's resourceVersion, so take base after any earlier write). A concurrent change is never
// overwritten; the conflict makes the reconcile retry on fresh data.
func LockedMergeFrom(base client.Object) client.Patch {
	return client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})
}

// PatchStatusIfChanged writes obj's status with one locked merge patch against base (so another
// controller's condition is never overwritten by a stale list), and writes nothing when the
// status did not change. status returns the status field of an object of obj's type.
func PatchStatusIfChanged[T client.Object](ctx context.Context, c client.Client, base, obj T, status func(T) any) error {
	if equality.Semantic.DeepEqual(status(base), status(obj)) {
		return nil
	}
	return c.Status().Patch(ctx, obj, LockedMergeFrom(base))
}
