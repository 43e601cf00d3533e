package accessrequest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestRevokeLater: a deleted AccessRequest whose access cannot be revoked yet keeps its
// finalizer, says why, and is looked at again on a timer (nothing else may bring it back); once
// its Cluster is being deleted nothing is left to revoke and the finalizer goes. Before, a
// request whose profile's backend did not run in the operator lost its finalizer at once and
// left its access in the cluster, and one whose Cluster stayed unready waited for a Cluster event
// only.
func TestRevokeLater(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	const profile = "e.artest.revoke"
	cl := readyCluster(t, ns, "unreachable", profile)
	ar := handedOverRequest(t, cl, "revoke", profile, func(ar *clustersv1alpha1.AccessRequest) {
		ar.Finalizers = []string{kit.Finalizer(testProvider)} // granted before
	})
	require.NoError(t, env.Client.Delete(ctx, ar))

	// The profile's backend does not run in this operator (Backend nil), the Cluster is Ready.
	r := directReconciler(profile, nil)
	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ar)})
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, res.RequeueAfter, "looked at again on a timer")
	got := &clustersv1alpha1.AccessRequest{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(ar), got))
	assert.True(t, controllerutil.ContainsFinalizer(got, kit.Finalizer(testProvider)), "the access is not revoked: the finalizer stays")
	c := meta.FindStatusCondition(got.Status.Conditions, accessrequest.ConditionGranted)
	require.NotNil(t, c)
	assert.Equal(t, accessrequest.ReasonBackendUnavailable, c.Reason)
	assert.Contains(t, c.Message, "cannot be revoked yet")
	assert.Contains(t, c.Message, "deleting the Cluster releases the request")

	// The Cluster not Ready: the same, with the reason Revoking.
	base := cl.DeepCopy()
	cl.Status.Phase = common.PhaseProgressing
	require.NoError(t, env.Client.Status().Patch(ctx, cl, client.MergeFrom(base)))
	fake := backendtest.New(backendtest.Options{Server: clusters.Config}) // it runs no cluster of cl
	r.Backend = fake
	res, err = r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ar)})
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, res.RequeueAfter)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(ar), got))
	c = meta.FindStatusCondition(got.Status.Conditions, accessrequest.ConditionGranted)
	require.NotNil(t, c)
	assert.Equal(t, accessrequest.ReasonRevoking, c.Reason)
	assert.Contains(t, c.Message, `phase "Progressing"`)
	assert.Zero(t, fake.Count(backendtest.MethodAdminConfig, client.ObjectKeyFromObject(cl)), "the cluster is not reached while it is not Ready")

	// The Cluster being deleted: nothing is left to revoke, the finalizer goes.
	base = cl.DeepCopy()
	cl.Finalizers = []string{"test/hold"}
	require.NoError(t, env.Client.Patch(ctx, cl, client.MergeFrom(base)))
	require.NoError(t, env.Client.Delete(ctx, cl))
	t.Cleanup(func() { // the test's context is done by now
		_ = env.Client.Patch(context.Background(), cl, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
	})
	_, err = r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ar)})
	require.NoError(t, err)
	gone(t, ar)
}

// readyCluster creates Cluster ns/name of profile and marks it Ready, as its reconciler would
// (no operator runs).
func readyCluster(t *testing.T, ns, name, profile string) *clustersv1alpha1.Cluster {
	t.Helper()
	cl := newCluster(t, ns, name, profile)
	base := cl.DeepCopy()
	cl.Status.Phase, cl.Status.ObservedGeneration = common.PhaseReady, cl.Generation
	require.NoError(t, env.Client.Status().Patch(t.Context(), cl, client.MergeFrom(base)))
	return cl
}

// handedOverRequest creates a token AccessRequest for cl labelled for this provider and profile
// and sets it Pending, as the labeller leaves it; mutate adjusts it before it is created.
func handedOverRequest(t *testing.T, cl *clustersv1alpha1.Cluster, name, profile string, mutate ...func(*clustersv1alpha1.AccessRequest)) *clustersv1alpha1.AccessRequest {
	t.Helper()
	ar := newRequest(t, cl.Namespace, name, cl.Name, clustersv1alpha1.TokenConfig{}, func(ar *clustersv1alpha1.AccessRequest) {
		ar.Labels = map[string]string{clustersv1alpha1.ProviderLabel: testProvider, clustersv1alpha1.ProfileLabel: profile}
		ar.Spec.ClusterRef.Namespace = cl.Namespace
		for _, m := range mutate {
			m(ar)
		}
	})
	testenv.HandOver(t, env.Client, ar)
	return ar
}

// directReconciler is the AccessRequest reconciler of profile with backend be (nil: the profile's
// backend does not run in this operator), for a test to call Reconcile on directly.
func directReconciler(profile string, be backend.Backend) *accessrequest.Reconciler {
	return &accessrequest.Reconciler{ProfileScope: kit.ProfileScope{Client: env.Client, ProviderName: testProvider, Profile: profile,
		BackendName: "local", Backend: be}, Options: accessrequest.Options{}.WithDefaults()}
}
