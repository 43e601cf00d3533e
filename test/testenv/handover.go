package testenv

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// HandOver does what the central labeller does for a labelled AccessRequest, for tests that run a
// provider without it: it sets the request Pending for its current generation (the handshake of
// kit.ProviderResponsible), from the request's latest version.
func HandOver(t testing.TB, c client.Client, ar *clustersv1alpha1.AccessRequest) {
	t.Helper()
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(t.Context(), client.ObjectKeyFromObject(ar), ar); err != nil {
			return err
		}
		base := ar.DeepCopy()
		kit.SetPending(ar)
		return c.Status().Patch(t.Context(), ar, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	}))
}
