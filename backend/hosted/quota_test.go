package hosted

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// TestMaxClusters: spec.hosted.maxClusters caps the control planes of one profile in one
// namespace. The places go to the oldest Clusters whatever the order of the reconciles; another
// namespace and another profile have their own; the count survives a restart of the operator; a
// control plane being deleted holds its place until it is gone, and then the Cluster waiting is
// notified and gets one; a lowered cap stops no control plane and refuses new ones.
func TestMaxClusters(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.MaxClusters = ptr.To[int32](2)
	teamA, teamB := env.Namespace(t), env.Namespace(t)
	const profile = "default.local.hosted"
	// Created in this order: c1 is the oldest (creationTimestamp, then the name within a second).
	c1, c2, c3 := createCluster(t, teamA, "c1", profile), createCluster(t, teamA, "c2", profile), createCluster(t, teamA, "c3", profile)
	refusal := "namespace " + teamA + " has 2 Clusters of profile " + profile + " with a control plane or ahead of this one in line (c1, c2), " +
		"and spec.hosted.maxClusters of ProviderConfig hosted allows 2: this Cluster gets its control plane by itself once a place frees. " +
		"Delete a Cluster of profile " + profile + " in namespace " + teamA + ", or ask the platform administrator to raise spec.hosted.maxClusters of ProviderConfig hosted"

	// The youngest is reconciled first, before anything runs: it is refused all the same.
	refused(t, h, c3, refusal)
	h.ensure(t, c1)
	h.ensure(t, c2)
	refused(t, h, c3, refusal)
	// Another namespace, and another profile in the same namespace, count apart.
	h.ensure(t, createCluster(t, teamB, "b1", profile))
	h.ensure(t, createCluster(t, teamA, "other", "default.local.other"))

	// The operator restarts (a new backend, nothing remembered; the Clusters' statuses are not
	// written by this test): the control planes are counted from the host cluster.
	h2 := startBackend(t)
	h2.pc = h.pc
	refused(t, h2, c3, refusal)

	// c1 is deleted (its finalizer holds it while the backend deletes its control plane, begun
	// before the restart): its control plane holds its place until its namespace is gone.
	require.NoError(t, env.Client.Delete(t.Context(), c1))
	require.NoError(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(c1), c1))
	gone, err := h.b.Delete(t.Context(), c1)
	require.NoError(t, err)
	require.False(t, gone)
	refused(t, h2, c3, refusal)
	finishNamespaceDeletion(t, NamespaceFor(c1.UID))
	require.Eventually(t, func() bool {
		gone, err := h2.b.Delete(t.Context(), c1)
		require.NoError(t, err)
		return gone
	}, 10*time.Second, 50*time.Millisecond, "c1's control plane is gone")
	awaitNotified(t, h2, c3)
	h2.ensure(t, c3)
	get(t, &appsv1.StatefulSet{}, NamespaceFor(c3.UID), NameEtcd)

	// The cap lowered to 1: the two control planes keep running, as they are; a new Cluster waits.
	h2.pc.Spec.Hosted.MaxClusters = ptr.To[int32](1)
	for _, cl := range []*clustersv1alpha1.Cluster{c2, c3} {
		sts := get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd)
		h2.ensure(t, cl)
		assert.Equal(t, sts.ResourceVersion, get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd).ResourceVersion, cl.Name)
		assert.Nil(t, get(t, &corev1.Namespace{}, "", NamespaceFor(cl.UID)).DeletionTimestamp, cl.Name)
	}
	refused(t, h2, createCluster(t, teamA, "c4", profile),
		"namespace "+teamA+" has 2 Clusters of profile "+profile+" with a control plane or ahead of this one in line (c2, c3), and spec.hosted.maxClusters of ProviderConfig hosted allows 1:")
}

// createCluster creates a Cluster of profile in namespace ns, held by a finalizer as the operator's
// would hold it, and returns it as the API server stored it.
func createCluster(t *testing.T, ns, name, profile string) *clustersv1alpha1.Cluster {
	t.Helper()
	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{"test.openmcp.cloud/hold"}},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyShared},
	}
	require.NoError(t, env.Client.Create(t.Context(), cl))
	t.Cleanup(func() {
		// t.Context() is done by now.
		cur := &clustersv1alpha1.Cluster{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(cl), cur); err == nil && len(cur.Finalizers) > 0 {
			cur.Finalizers = nil
			assert.NoError(t, client.IgnoreNotFound(env.Client.Update(context.Background(), cur)))
		}
	})
	return cl
}

// refused checks that Ensure refuses cl for its namespace's quota with a message that holds want,
// and makes nothing of it.
func refused(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster, want string) {
	t.Helper()
	_, err := h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonQuotaExceeded), "%v", err)
	assert.Equal(t, retryQuota, backend.RetryAfter(err), "looked at again even if no notification comes")
	assert.Contains(t, err.Error(), want)
	err = env.Client.Get(t.Context(), client.ObjectKey{Name: NamespaceFor(cl.UID)}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "no control plane is made for a refused Cluster: %v", err)
}

// finishNamespaceDeletion does what the namespace controller and the garbage collector, which
// envtest does not run, do last: they remove the finalizers of namespace ns, which is being
// deleted (the namespace controller's, and the foreground deletion's), so that it goes.
func finishNamespaceDeletion(t *testing.T, ns string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	n := get(t, &corev1.Namespace{}, "", ns)
	require.NotNil(t, n.DeletionTimestamp)
	n.Spec.Finalizers = nil
	n, err = cs.CoreV1().Namespaces().Finalize(t.Context(), n, metav1.UpdateOptions{})
	require.NoError(t, err)
	n.Finalizers = nil
	_, err = cs.CoreV1().Namespaces().Update(t.Context(), n, metav1.UpdateOptions{})
	if !apierrors.IsNotFound(err) {
		require.NoError(t, err)
	}
}

// awaitNotified waits until h's Notify has named cl.
func awaitNotified(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	want := backend.RefOf(cl)
	require.Eventually(t, func() bool {
		for {
			select {
			case r := <-h.notified:
				if r == want {
					return true
				}
			default:
				return false
			}
		}
	}, 10*time.Second, 20*time.Millisecond, "%s is notified", want)
}

// TestMaxClustersAtOnce: Clusters reconciled at the same moment (the Cluster reconciler's workers)
// get the places of their line, no more: the oldest two of four.
func TestMaxClustersAtOnce(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.MaxClusters = ptr.To[int32](2)
	ns := env.Namespace(t)
	var cls []*clustersv1alpha1.Cluster
	for _, name := range []string{"c1", "c2", "c3", "c4"} {
		cls = append(cls, createCluster(t, ns, name, "default.local.hosted"))
	}
	errs := make([]error, len(cls))
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Go(func() { _, errs[i] = h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"}) })
	}
	wg.Wait()
	for i, cl := range cls {
		err := env.Client.Get(t.Context(), client.ObjectKey{Name: NamespaceFor(cl.UID)}, &corev1.Namespace{})
		if i < 2 {
			assert.NoError(t, errs[i], cl.Name)
			assert.NoError(t, err, "%s has a control plane", cl.Name)
		} else {
			assert.True(t, backend.IsReason(errs[i], backend.ReasonQuotaExceeded), "%s: %v", cl.Name, errs[i])
			assert.True(t, apierrors.IsNotFound(err), "%s has no control plane: %v", cl.Name, err)
		}
	}
}
