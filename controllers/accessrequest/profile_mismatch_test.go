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
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
	"github.com/openmcp-local/cluster-provider/test/testenv"
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
	cl := newCluster(t, ns, "of-a", profileA)
	base := cl.DeepCopy()
	cl.Status.Phase, cl.Status.ObservedGeneration = common.PhaseReady, cl.Generation
	require.NoError(t, env.Client.Status().Patch(ctx, cl, client.MergeFrom(base)))

	ar := newRequest(t, ns, "spoofed", cl.Name, clustersv1alpha1.TokenConfig{}, func(ar *clustersv1alpha1.AccessRequest) {
		ar.Labels = map[string]string{clustersv1alpha1.ProviderLabel: testProvider, clustersv1alpha1.ProfileLabel: profileB}
		ar.Spec.ClusterRef.Namespace = ns
	})
	testenv.HandOver(t, env.Client, ar)

	r := &accessrequest.Reconciler{ProfileScope: kit.ProfileScope{Client: env.Client, ProviderName: testProvider, Profile: profileB,
		BackendName: "local", Backend: unreachableBackend{}}, Options: accessrequest.Options{}.WithDefaults()}
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
}
