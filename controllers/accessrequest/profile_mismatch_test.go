package accessrequest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
)

// TestProfileMismatch (issue 25, item 5): users may set an AccessRequest's provider and profile
// labels themselves, and the labeller leaves a request that has both. A request labelled with
// profile B for a Cluster of profile A must not be answered under B's rules (B's allowedIssuers,
// B's view of the Cluster's trusted issuers): it is Denied ProfileMismatch, and nothing is made
// for it. Before, B's reconciler went on to grant it.
func TestProfileMismatch(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	const profileA, profileB = "e.artest.a", "e.artest.b"
	cl := readyCluster(t, ns, "of-a", profileA)
	ar := handedOverRequest(t, cl, "spoofed", profileB)

	fake := backendtest.New(backendtest.Options{Server: clusters.Config})
	r := directReconciler(profileB, fake)
	_, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ar)})
	require.NoError(t, err)
	got := &clustersv1alpha1.AccessRequest{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(ar), got))
	assert.Equal(t, common.PhaseDenied, got.Status.Phase)
	c := meta.FindStatusCondition(got.Status.Conditions, accessrequest.ConditionGranted)
	require.NotNil(t, c)
	assert.Equal(t, accessrequest.ReasonProfileMismatch, c.Reason)
	assert.Contains(t, c.Message, "belongs to profile "+profileA)
	assert.Empty(t, got.Finalizers, "nothing was made for it")
	for _, m := range []string{backendtest.MethodAdminConfig, backendtest.MethodSetJWTAuthenticators} {
		assert.Zero(t, fake.Count(m, client.ObjectKeyFromObject(cl)), "%s: the cluster is not reached", m)
	}
}
