package testenv

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DeleteAtCleanup deletes obj when t ends, whether it passed or failed. Objects a test leaves
// reach the next test: envtest has no namespace controller nor garbage collector to remove them,
// and the operator of every later test of the package serves every ProviderConfig on the API
// server and the Clusters of its profile. A Cluster left by a test that failed half-way was started
// by the next test's operator and took the place its own Cluster waited for (issue 39).
//
// Register it after the operator was started: cleanups run last registered first, so the Cluster
// is deleted while its operator runs. It does not wait for the object to be gone (an operator
// stopped by a subtest cannot remove its finalizer); a Cluster being deleted is never started
// again, by this operator or the next.
func (e *Env) DeleteAtCleanup(t testing.TB, obj client.Object) {
	t.Helper()
	t.Cleanup(func() {
		// t.Context() is done by now.
		if err := e.Client.Delete(context.Background(), obj); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting %T %s at the end of the test: %v", obj, client.ObjectKeyFromObject(obj), err)
		}
	})
}
