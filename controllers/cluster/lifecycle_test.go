package cluster_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestClusterLifecycle takes Clusters through their life with a fake backend that runs at most
// one cluster: Ready with status, labels and Events, what the backend was asked; a cluster that
// starts and is notified Ready; the parts of its control plane; an unserved version; a refused
// version change; capacity; a ProviderConfig spec change keeps the cluster; a foreign finalizer
// holds the deletion; a slow deletion; the name reused gets a fresh cluster.
// TestClusterWithLocalBackend runs the same life with the real local backend.
func TestClusterLifecycle(t *testing.T) {
	fake := startFake(t, backendtest.Options{MaxClusters: 1})
	ctx := t.Context()
	ns := env.Namespace(t)

	foreign := foreignCluster(t, ns)

	pc := newProviderConfig(t) // no versions: every served one
	profileName := profile.Name(testEnvironment, testProvider, pc.Name)
	key := client.ObjectKey{Namespace: ns, Name: "c1"}
	fake.Set(key, func(c *backendtest.Cluster) { c.Ready = false }) // it starts
	cl := newCluster(t, ns, "c1", profileName, "")

	t.Run("a starting cluster is Provisioned, not Ready; the backend's notification makes it Ready", func(t *testing.T) {
		waitCluster(t, key, "Starting", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			assert.Equal(c, common.PhaseProgressing, cl.Status.Phase)
			hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionTrue, cluster.ReasonProvisioned)
			hasCondition(c, cl, cluster.ConditionAPIServerReady, metav1.ConditionFalse, backend.ReasonStarting)
		})
		fake.Set(key, func(c *backendtest.Cluster) { c.Ready = true })
		cl = waitCluster(t, key, "Cluster c1 is Ready", isReady)
	})

	// Status, labels, annotation, Events, and what the backend was asked.
	hasCondition(t, cl, cluster.ConditionProvisioned, metav1.ConditionTrue, cluster.ReasonProvisioned)
	assert.Equal(t, env.Config.Host, cl.Status.APIServer)
	assert.Equal(t, []clustersv1alpha1.Endpoint{{Name: backend.EndpointAPIServerExternal, URL: cl.Status.APIServer}}, cl.Status.Endpoints)
	assert.Equal(t, "1.37.1", cl.Labels[clustersv1alpha1.K8sVersionLabel])
	assert.Equal(t, testProvider, cl.Labels[clustersv1alpha1.ProviderLabel])
	assert.Equal(t, "local v1.37.1 (fake)", cl.Annotations[clustersv1alpha1.ProviderInfoAnnotation])
	require.NotNil(t, cl.Status.ProviderStatus)
	assert.Contains(t, string(cl.Status.ProviderStatus.Raw), `"backend":"local"`)
	assert.Contains(t, cl.Finalizers, kit.Finalizer(testProvider))
	assert.Nil(t, meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionControllerManagerReady), "a part the backend does not report")
	env.AwaitEvent(t, cl, cluster.ReasonProvisioned)
	env.AwaitEvent(t, cl, cluster.ReasonReady)
	ensured := fake.Calls(backendtest.MethodEnsure, key)
	require.NotEmpty(t, ensured)
	assert.Equal(t, backend.Want{Version: "1.37.1"}, ensured[0].Want, "the profile's only version")
	bound := fake.ProviderConfigs()
	// The fake is shared with the other tests' ProviderConfigs, reconciled meanwhile.
	assert.True(t, slices.ContainsFunc(bound, func(b *providersv1alpha1.ProviderConfig) bool { return b.Name == pc.Name }),
		"the profile builder binds the backend to the ProviderConfig")
	made, _ := fake.Get(key)
	assert.Equal(t, cl.UID, made.UID)

	t.Run("the parts of the control plane: conditions, phase and Events", func(t *testing.T) {
		fake.Set(key, func(c *backendtest.Cluster) {
			c.Parts = []backend.Part{
				{Type: backend.PartControllerManager, Reason: backend.ReasonRestarting, Message: "kube-controller-manager exited (fake); restarting it."},
				{Type: backend.PartEtcd, Reason: backend.ReasonEtcdNoSpace, Message: "etcd's database is at its quota (fake)."},
				{Type: backend.PartEndpoint, Reason: backend.ReasonSingleNodeEndpoint, Message: "The endpoint is one node's address (fake)."},
			}
		})
		waitCluster(t, key, "parts not Ready", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionControllerManagerReady, metav1.ConditionFalse, backend.ReasonRestarting)
			hasCondition(c, cl, cluster.ConditionEtcdHealthy, metav1.ConditionFalse, backend.ReasonEtcdNoSpace)
			hasCondition(c, cl, cluster.ConditionEndpointResilient, metav1.ConditionFalse, backend.ReasonSingleNodeEndpoint)
			hasCondition(c, cl, cluster.ConditionAPIServerReady, metav1.ConditionTrue, backend.ReasonRunning)
			assert.Equal(c, common.PhaseProgressing, cl.Status.Phase, "not Ready without its controller manager")
		})
		assert.Contains(t, env.AwaitEvent(t, cl, cluster.ReasonProcessRestarted).Note, "kube-controller-manager exited")
		assert.Equal(t, corev1.EventTypeWarning, env.AwaitEvent(t, cl, backend.ReasonEtcdNoSpace).Type)
		assert.Equal(t, corev1.EventTypeWarning, env.AwaitEvent(t, cl, backend.ReasonSingleNodeEndpoint).Type)

		fake.Set(key, func(c *backendtest.Cluster) {
			c.Parts = []backend.Part{
				{Type: backend.PartControllerManager, Ready: true, Reason: backend.ReasonRunning, Message: "kube-controller-manager runs (fake)."},
				{Type: backend.PartEtcd, Ready: true, Reason: backend.ReasonRunning, Message: "etcd takes writes (fake)."},
			}
		})
		waitCluster(t, key, "Ready again", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			isReady(c, cl)
			hasCondition(c, cl, cluster.ConditionControllerManagerReady, metav1.ConditionTrue, backend.ReasonRunning)
			hasCondition(c, cl, cluster.ConditionEtcdHealthy, metav1.ConditionTrue, backend.ReasonRunning)
			assert.Nil(c, meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionEndpointResilient), "no longer reported")
		})
		assert.Equal(t, corev1.EventTypeNormal, env.AwaitEvent(t, cl, cluster.ReasonEtcdHealthy).Type)
	})

	t.Run("unserved version", func(t *testing.T) {
		old := newCluster(t, ns, "old", profileName, "1.20.0")
		got := waitCluster(t, client.ObjectKeyFromObject(old), "VersionNotSupported", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionFalse, backend.ReasonVersionNotSupported)
		})
		assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message, "offered are: 1.37.1")
		assert.False(t, fake.Running(got.UID), "nothing is made")
		calls := fake.Calls(backendtest.MethodEnsure, client.ObjectKeyFromObject(old))
		require.NotEmpty(t, calls)
		assert.Error(t, calls[0].Want.NotOffered, "the backend is told the version is not offered")
		require.NoError(t, env.Client.Delete(ctx, old))
		gone(t, old)
	})

	t.Run("a version change is refused: the cluster keeps serving, a condition and an Event say why", func(t *testing.T) {
		refuseDowngrade(t, cl)
		now, _ := fake.Get(key)
		assert.Equal(t, "1.37.1", now.Runs, "the cluster runs what it ran")
		assert.Equal(t, cl.UID, now.UID, "the same cluster")

		backToCurrent(t, cl)
	})

	t.Run("capacity", func(t *testing.T) {
		c2 := newCluster(t, ns, "c2", profileName, "")
		got := waitCluster(t, client.ObjectKeyFromObject(c2), "CapacityExhausted", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionFalse, backend.ReasonCapacityExhausted)
		})
		assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message, "Options.MaxClusters",
			"the backend's message, as it said it")
		env.AwaitEvent(t, c2, backend.ReasonCapacityExhausted)
		require.NoError(t, env.Client.Delete(ctx, c2))
		gone(t, c2)
	})

	t.Run("ProviderConfig spec change keeps the cluster running", func(t *testing.T) {
		addUnservedVersion(t, pc, profileName)
		waitCluster(t, key, "still Ready", isReady)
		assert.Zero(t, fake.Count(backendtest.MethodDelete, key), "the cluster is not deleted")
		assert.True(t, fake.Running(cl.UID))
	})

	t.Run("a foreign finalizer holds the deletion, then the backend deletes the cluster", func(t *testing.T) {
		fake.Set(key, func(c *backendtest.Cluster) { c.DeletePending = 1 }) // the backend needs two calls
		cur := holdDeletion(t, cl)
		assert.Zero(t, fake.Count(backendtest.MethodDelete, key), "the cluster runs while the deletion waits")
		assert.True(t, fake.Running(cl.UID))

		testenv.Update(ctx, t, env.Client, cur, func(cur *clustersv1alpha1.Cluster) { controllerutil.RemoveFinalizer(cur, foreignFinalizer) })
		gone(t, cl)
		assert.False(t, fake.Running(cl.UID))
		assert.GreaterOrEqual(t, fake.Count(backendtest.MethodDelete, key), 2, "called again until the backend said gone")
		env.AwaitEvent(t, cl, cluster.ReasonDeleted)
	})

	t.Run("the name reused gets a fresh cluster", func(t *testing.T) {
		again := newCluster(t, ns, "c1", profileName, "")
		again = waitCluster(t, key, "the new c1 is Ready", isReady)
		assert.NotEqual(t, cl.UID, again.UID)
		now, ok := fake.Get(key)
		require.True(t, ok)
		assert.Equal(t, again.UID, now.UID, "a cluster of its own")
		require.NoError(t, env.Client.Delete(ctx, again))
		gone(t, again)
	})

	untouched(t, foreign)
	assert.Zero(t, fake.Count(backendtest.MethodEnsure, client.ObjectKeyFromObject(foreign)), "nor a cluster")
}

// TestClusterUpgrade: a version change the contract allows is reported as it goes (Upgrading,
// with a Normal Event), the labels saying what runs until the API server reports the new version,
// then Upgraded.
func TestClusterUpgrade(t *testing.T) {
	fake := startFake(t, backendtest.Options{Versions: []string{"1.37.1", "1.36.3"}})
	ctx := t.Context()
	ns := env.Namespace(t)
	profileName := profile.Name(testEnvironment, testProvider, newProviderConfig(t, "1.37.1", "1.36.3").Name)
	cl := newCluster(t, ns, "up", profileName, "1.36.3")
	key := client.ObjectKeyFromObject(cl)
	got := waitCluster(t, key, "Ready at 1.36.3", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		isReady(c, cl)
		assert.Equal(c, "1.36.3", cl.Labels[clustersv1alpha1.K8sVersionLabel])
	})

	fake.Set(key, func(c *backendtest.Cluster) { c.HoldUpgrade = true })
	testenv.Update(ctx, t, env.Client, got, func(cur *clustersv1alpha1.Cluster) { cur.Spec.Kubernetes.Version = "1.37.1" })
	got = waitCluster(t, key, "Upgrading", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		assert.Equal(c, cl.Generation, cl.Status.ObservedGeneration)
		hasCondition(c, cl, cluster.ConditionVersionUpToDate, metav1.ConditionFalse, backend.ReasonUpgrading)
	})
	assert.Equal(t, "1.36.3", got.Labels[clustersv1alpha1.K8sVersionLabel], "the API server still reports 1.36.3")
	assert.Equal(t, corev1.EventTypeNormal, env.AwaitEvent(t, cl, backend.ReasonUpgrading).Type)
	last := fake.Calls(backendtest.MethodEnsure, key)
	assert.Equal(t, "1.37.1", last[len(last)-1].Want.Requested)

	fake.Set(key, func(c *backendtest.Cluster) { c.Version = c.Runs }) // the API servers moved
	waitCluster(t, key, "Upgraded", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		isReady(c, cl)
		hasCondition(c, cl, cluster.ConditionVersionUpToDate, metav1.ConditionTrue, cluster.ReasonVersionCurrent)
		assert.Equal(c, "1.37.1", cl.Labels[clustersv1alpha1.K8sVersionLabel])
	})
	env.AwaitEvent(t, cl, cluster.ReasonUpgraded)

	fake.Set(key, func(c *backendtest.Cluster) {
		c.RefuseVersionChange = "The fake backend cannot move this cluster; create a new Cluster."
	})
	testenv.Update(ctx, t, env.Client, cl.DeepCopy(), func(cur *clustersv1alpha1.Cluster) { cur.Spec.Kubernetes.Version = "1.36.3" })
	got = waitCluster(t, key, "a downgrade refused by the contract", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		assert.Equal(c, cl.Generation, cl.Status.ObservedGeneration)
		hasCondition(c, cl, cluster.ConditionVersionUpToDate, metav1.ConditionFalse, backend.ReasonVersionChangeRefused)
	})
	assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionVersionUpToDate).Message, "downgrade from 1.37.1 to 1.36.3 is refused",
		"backend.Resolve's refusal comes before the backend's own")
}

// TestBackendReports: what a backend reports beyond Ready reaches the Cluster: an error with a
// reason (the user must act; retried after its RetryAfter), an error without one (retried), a
// repair (a Warning Event), data lost (condition and Warning Event, for the cluster's life).
func TestBackendReports(t *testing.T) {
	fake := startFake(t, backendtest.Options{})
	ns := env.Namespace(t)
	profileName := profile.Name(testEnvironment, testProvider, newProviderConfig(t).Name)

	t.Run("an error with a reason: condition and Warning Event; it starts by itself once fixed", func(t *testing.T) {
		key := client.ObjectKey{Namespace: ns, Name: "damaged"}
		fake.Set(key, func(c *backendtest.Cluster) {
			c.EnsureError = &backend.Error{Reason: backend.ReasonStateDamaged, Err: errors.New("pki/ca.key of the fake cluster is damaged; restore it"), RetryAfter: stateRetry}
		})
		cl := newCluster(t, ns, key.Name, profileName, "")
		got := waitCluster(t, key, "StateDamaged", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionFalse, backend.ReasonStateDamaged)
		})
		assert.Equal(t, "pki/ca.key of the fake cluster is damaged; restore it", meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message)
		assert.Equal(t, corev1.EventTypeWarning, env.AwaitEvent(t, cl, backend.ReasonStateDamaged).Type)
		assert.False(t, fake.Running(cl.UID))
		before := fake.Count(backendtest.MethodEnsure, key)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Greater(c, fake.Count(backendtest.MethodEnsure, key), before, "tried again after RetryAfter, with no event")
		}, readyWithin, poll)

		fake.Set(key, func(c *backendtest.Cluster) { c.EnsureError = nil })
		waitCluster(t, key, "Ready once fixed", isReady)
	})

	t.Run("an error without a reason: ProvisioningFailed, retried", func(t *testing.T) {
		key := client.ObjectKey{Namespace: ns, Name: "flaky"}
		fake.Set(key, func(c *backendtest.Cluster) { c.EnsureError = errors.New("the fake backend's disk hiccuped") })
		newCluster(t, ns, key.Name, profileName, "")
		got := waitCluster(t, key, "ProvisioningFailed", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionFalse, cluster.ReasonProvisioningFailed)
		})
		assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message, "the fake backend's disk hiccuped")
		fake.Set(key, func(c *backendtest.Cluster) { c.EnsureError = nil })
		waitCluster(t, key, "Ready on a retry", isReady)
	})

	t.Run("a repair is a Warning Event; lost data a condition and a Warning Event", func(t *testing.T) {
		key := client.ObjectKey{Namespace: ns, Name: "lossy"}
		cl := newCluster(t, ns, key.Name, profileName, "")
		waitCluster(t, key, "Ready", isReady)
		fake.Set(key, func(c *backendtest.Cluster) {
			c.Warnings = []backend.Warning{{Reason: backend.ReasonStateRepaired, Message: "The fake record was garbled; it was rebuilt from the Cluster's status."}}
			c.Parts = []backend.Part{{Type: backend.PartProvisioned, Ready: true, Reason: backend.ReasonDataLost,
				Message: "The fake cluster's data was gone: it was created anew, EMPTY."}}
		})
		e := env.AwaitEvent(t, cl, cluster.ReasonStateRepaired)
		assert.Equal(t, corev1.EventTypeWarning, e.Type)
		assert.Equal(t, "The fake record was garbled; it was rebuilt from the Cluster's status.", e.Note)
		got := waitCluster(t, key, "DataLost", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			isReady(c, cl)
			hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionTrue, cluster.ReasonDataLost)
		})
		assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message, "EMPTY")
		assert.Equal(t, corev1.EventTypeWarning, env.AwaitEvent(t, cl, cluster.ReasonDataLost).Type)
	})
}
