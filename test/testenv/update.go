package testenv

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Update applies mutate to the latest version of obj (read by its namespace and name) and writes
// it with an update. A controller that writes the object in between makes the update conflict;
// then it is read and mutated again (retry.RetryOnConflict), so mutate must be a pure change of
// the object it is given. obj ends as written. ctx is the caller's: t.Context() is done in a
// t.Cleanup.
func Update[T client.Object](ctx context.Context, t testing.TB, c client.Client, obj T, mutate func(T), opts ...client.UpdateOption) {
	t.Helper()
	require.NoError(t, retryUpdate(ctx, c, obj, mutate, func(obj T) error { return c.Update(ctx, obj, opts...) }),
		"updating %T %s", obj, client.ObjectKeyFromObject(obj))
}

// UpdateStatus is Update of the status subresource.
func UpdateStatus[T client.Object](ctx context.Context, t testing.TB, c client.Client, obj T, mutate func(T), opts ...client.SubResourceUpdateOption) {
	t.Helper()
	require.NoError(t, retryUpdate(ctx, c, obj, mutate, func(obj T) error { return c.Status().Update(ctx, obj, opts...) }),
		"updating the status of %T %s", obj, client.ObjectKeyFromObject(obj))
}

// conflictBackoff is retry.DefaultRetry stretched: its five tries in 50 ms can all lose to a
// controller that writes the object several times in a row on a loaded machine.
var conflictBackoff = wait.Backoff{Steps: 10, Duration: 10 * time.Millisecond, Factor: 2, Jitter: 0.1, Cap: time.Second}

func retryUpdate[T client.Object](ctx context.Context, c client.Client, obj T, mutate func(T), write func(T) error) error {
	key := client.ObjectKeyFromObject(obj)
	return retry.RetryOnConflict(conflictBackoff, func() error {
		// Read into a zeroed object: decoding into a used one keeps map entries (labels,
		// annotations, data) the latest version no longer has. The key stays, for a cleanup
		// that deletes obj even when the read failed.
		gvk := obj.GetObjectKind().GroupVersionKind()
		reflect.ValueOf(obj).Elem().SetZero()
		obj.GetObjectKind().SetGroupVersionKind(gvk)
		obj.SetNamespace(key.Namespace)
		obj.SetName(key.Name)
		if err := c.Get(ctx, key, obj); err != nil {
			return err
		}
		mutate(obj)
		return write(obj)
	})
}
