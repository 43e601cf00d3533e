package cluster_test

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/providerconfig"
	"github.com/openmcp-local/cluster-provider/test/operator"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// Deadlines: a local cluster starts in seconds, slower under -race with other packages running.
const (
	readyWithin = 2 * time.Minute
	poll        = 50 * time.Millisecond
)

const foreignFinalizer = "example.com/keep"

func newProviderConfig(t testing.TB, versions ...string) *providersv1alpha1.ProviderConfig {
	t.Helper()
	pc := &providersv1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pc-"},
		Spec:       providersv1alpha1.ProviderConfigSpec{Backend: providersv1alpha1.BackendLocal},
	}
	for _, v := range versions {
		pc.Spec.SupportedVersions = append(pc.Spec.SupportedVersions, clustersv1alpha1.SupportedK8sVersion{Version: v})
	}
	require.NoError(t, env.Client.Create(t.Context(), pc))
	env.DeleteAtCleanup(t, pc)
	return pc
}

func newCluster(t *testing.T, ns, name, profileName, version string) *clustersv1alpha1.Cluster {
	t.Helper()
	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clustersv1alpha1.ClusterSpec{
			Profile: profileName, Tenancy: clustersv1alpha1.TenancyExclusive,
			Kubernetes: clustersv1alpha1.K8sConfiguration{Version: version},
		},
	}
	require.NoError(t, env.Client.Create(t.Context(), cl))
	env.DeleteAtCleanup(t, cl)
	return cl
}

// waitCluster waits until the Cluster's status satisfies check and returns it.
func waitCluster(t *testing.T, key client.ObjectKey, what string, check func(c *assert.CollectT, cl *clustersv1alpha1.Cluster)) *clustersv1alpha1.Cluster {
	t.Helper()
	got := &clustersv1alpha1.Cluster{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, env.Client.Get(context.Background(), key, got))
		check(c, got)
	}, readyWithin, poll, what)
	return got
}

func hasCondition(c assert.TestingT, cl *clustersv1alpha1.Cluster, condType string, status metav1.ConditionStatus, reason string) {
	cond := meta.FindStatusCondition(cl.Status.Conditions, condType)
	if assert.NotNil(c, cond, "condition %s", condType) {
		assert.Equal(c, status, cond.Status, "condition %s: %s", condType, cond.Message)
		assert.Equal(c, reason, cond.Reason, "condition %s: %s", condType, cond.Message)
	}
}

func isReady(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
	assert.Equal(c, common.PhaseReady, cl.Status.Phase)
	assert.Equal(c, cl.Generation, cl.Status.ObservedGeneration)
	hasCondition(c, cl, cluster.ConditionAPIServerReady, metav1.ConditionTrue, backend.ReasonRunning)
}

func gone(t testing.TB, obj client.Object) {
	t.Helper()
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	}, readyWithin, poll, "%s still exists", obj.GetName())
}

// adminClient reaches the Cluster's cluster as the operator does.
func adminClient(t *testing.T, op *operator.Operator, cl *clustersv1alpha1.Cluster) kubernetes.Interface {
	t.Helper()
	cfg, err := op.Local.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	return kubernetes.NewForConfigOrDie(cfg)
}

// foreignCluster creates, in ns, a Cluster of another provider's profile, which no test's
// operator may touch (untouched).
func foreignCluster(t *testing.T, ns string) *clustersv1alpha1.Cluster {
	t.Helper()
	other := &clustersv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Name: "default.someone-else." + ns},
		Spec: clustersv1alpha1.ClusterProfileSpec{
			ProviderRef: common.LocalObjectReference{Name: "someone-else"}, ProviderConfigRef: common.LocalObjectReference{Name: "x"},
		},
	}
	require.NoError(t, env.Client.Create(t.Context(), other))
	return newCluster(t, ns, "foreign", other.Name, "")
}

// untouched checks that foreign got no finalizer and no status.
func untouched(t *testing.T, foreign *clustersv1alpha1.Cluster) {
	t.Helper()
	require.NoError(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(foreign), foreign))
	assert.Empty(t, foreign.Finalizers, "another provider's Cluster gets no finalizer")
	assert.Empty(t, foreign.Status.Conditions, "nor a status")
}

// refuseDowngrade asks the Ready cl, of a profile offering only 1.37.1, for 1.36.3 and checks the
// refusal: the cluster keeps serving, a condition and an Event say why.
func refuseDowngrade(t *testing.T, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	ctx := t.Context()
	testenv.Update(ctx, t, env.Client, cl.DeepCopy(), func(cur *clustersv1alpha1.Cluster) {
		cur.Spec.Kubernetes.Version = "1.36.3" // a downgrade, and not offered by this profile
	})
	got := waitCluster(t, client.ObjectKeyFromObject(cl), "VersionChangeRefused", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		assert.Equal(c, cl.Generation, cl.Status.ObservedGeneration)
		hasCondition(c, cl, cluster.ConditionVersionUpToDate, metav1.ConditionFalse, backend.ReasonVersionChangeRefused)
	})
	assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionVersionUpToDate).Message,
		"spec.kubernetes.version 1.36.3 is not offered by this profile; offered are: 1.37.1")
	assert.Equal(t, common.PhaseReady, got.Status.Phase, "the cluster serves: Ready, its requests granted")
	assert.Equal(t, "1.37.1", got.Labels[clustersv1alpha1.K8sVersionLabel], "the label says what runs")
	hasCondition(t, got, cluster.ConditionProvisioned, metav1.ConditionTrue, cluster.ReasonProvisioned)
	assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message, "Kubernetes 1.37.1")
	e := env.AwaitEvent(t, cl, backend.ReasonVersionChangeRefused)
	assert.Contains(t, e.Note, "the cluster keeps running 1.37.1")
}

// backToCurrent asks cl for no version again: it is up to date.
func backToCurrent(t *testing.T, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	ctx := t.Context()
	testenv.Update(ctx, t, env.Client, cl.DeepCopy(), func(cur *clustersv1alpha1.Cluster) { cur.Spec.Kubernetes.Version = "" })
	waitCluster(t, client.ObjectKeyFromObject(cl), "VersionUpToDate again", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		assert.Equal(c, cl.Generation, cl.Status.ObservedGeneration)
		hasCondition(c, cl, cluster.ConditionVersionUpToDate, metav1.ConditionTrue, cluster.ReasonVersionCurrent)
	})
}

// addUnservedVersion adds a version no backend serves to pc: the ProviderConfig says so and its
// profile leaves it out.
func addUnservedVersion(t *testing.T, pc *providersv1alpha1.ProviderConfig, profileName string) {
	t.Helper()
	ctx := t.Context()
	testenv.Update(ctx, t, env.Client, pc.DeepCopy(), func(cur *providersv1alpha1.ProviderConfig) {
		cur.Spec.SupportedVersions = []clustersv1alpha1.SupportedK8sVersion{{Version: "1.37.1"}, {Version: "1.30.0"}}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &providersv1alpha1.ProviderConfig{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(pc), got))
		cond := meta.FindStatusCondition(got.Status.Conditions, providerconfig.ConditionVersionsServed)
		if assert.NotNil(c, cond) && assert.Equal(c, got.Generation, got.Status.ObservedGeneration) {
			assert.Equal(c, providerconfig.ReasonVersionsNotServed, cond.Reason)
			assert.Contains(c, cond.Message, "1.30.0")
			assert.Contains(c, cond.Message, "--local-binaries")
		}
		cp := &clustersv1alpha1.ClusterProfile{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKey{Name: profileName}, cp))
		assert.Equal(c, []clustersv1alpha1.SupportedK8sVersion{{Version: "1.37.1"}}, cp.Spec.SupportedVersions)
	}, readyWithin, poll, "the unserved version is reported and left out of the profile")
}

// holdDeletion deletes cl with a foreign finalizer on it and waits until the Cluster says the
// deletion waits for it; it returns the Cluster to remove the finalizer from.
func holdDeletion(t *testing.T, cl *clustersv1alpha1.Cluster) *clustersv1alpha1.Cluster {
	t.Helper()
	ctx := t.Context()
	cur := cl.DeepCopy()
	testenv.Update(ctx, t, env.Client, cur, func(cur *clustersv1alpha1.Cluster) { controllerutil.AddFinalizer(cur, foreignFinalizer) })
	require.NoError(t, env.Client.Delete(ctx, cur))
	waitCluster(t, client.ObjectKeyFromObject(cl), "WaitingForFinalizers", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		assert.Equal(c, common.PhaseTerminating, cl.Status.Phase)
		hasCondition(c, cl, cluster.ConditionDeleted, metav1.ConditionFalse, cluster.ReasonWaitingForFinalizers)
	})
	return cur
}

func processGone(pid int) bool { return errors.Is(syscall.Kill(pid, syscall.Signal(0)), syscall.ESRCH) }

// TestClusterWithLocalBackend is the Cluster reconciler's integration test with the real local
// backend (TestClusterLifecycle covers the reconciler with a fake one): a Cluster of a local
// ProviderConfig through its life against envtest, two control-plane starts in all: Ready, its
// endpoint serving the version chosen, the operator admin there; a crashed controller manager
// reported and restarted; a refused version change and a ProviderConfig spec change keep the
// same processes; a foreign finalizer holds the deletion, which then stops every process, removes
// the folder and closes the port; the name reused gets a fresh cluster without the old data.
func TestClusterWithLocalBackend(t *testing.T) {
	op := startOperator(t, t.TempDir(), 1)
	ctx := t.Context()
	ns := env.Namespace(t)

	foreign := foreignCluster(t, ns)

	pc := newProviderConfig(t) // no versions: every served one
	profileName := profile.Name(testEnvironment, testProvider, pc.Name)
	cl := newCluster(t, ns, "c1", profileName, "")
	cl = waitCluster(t, client.ObjectKeyFromObject(cl), "Cluster c1 is Ready", isReady)

	// Status, labels, annotation.
	hasCondition(t, cl, cluster.ConditionProvisioned, metav1.ConditionTrue, cluster.ReasonProvisioned)
	require.NotEmpty(t, cl.Status.APIServer)
	assert.Equal(t, []clustersv1alpha1.Endpoint{{Name: backend.EndpointAPIServerExternal, URL: cl.Status.APIServer}}, cl.Status.Endpoints)
	assert.Equal(t, "1.37.1", cl.Labels[clustersv1alpha1.K8sVersionLabel])
	assert.Equal(t, testProvider, cl.Labels[clustersv1alpha1.ProviderLabel])
	assert.Regexp(t, `^local v1\.37\.1 :\d+$`, cl.Annotations[clustersv1alpha1.ProviderInfoAnnotation])
	require.NotNil(t, cl.Status.ProviderStatus)
	assert.Contains(t, string(cl.Status.ProviderStatus.Raw), `"backend":"local"`)
	assert.Contains(t, cl.Finalizers, kit.Finalizer(testProvider))
	env.AwaitEvent(t, cl, cluster.ReasonProvisioned)
	env.AwaitEvent(t, cl, cluster.ReasonReady)

	// The endpoint answers /version with the chosen version, and the operator is admin there.
	version, err := adminClient(t, op, cl).Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, "v1.37.1", version.GitVersion)
	_, err = adminClient(t, op, cl).CoreV1().ConfigMaps("default").Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "from-c1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	hasCondition(t, cl, cluster.ConditionControllerManagerReady, metav1.ConditionTrue, backend.ReasonRunning)
	pids := op.Local.PIDs(cl.UID)
	require.Len(t, pids, 3, "etcd, kube-apiserver, kube-controller-manager")

	t.Run("the controller manager crashes: the condition says so, the cluster comes back", func(t *testing.T) {
		require.NoError(t, syscall.Kill(pids["kube-controller-manager"], syscall.SIGKILL))
		waitCluster(t, client.ObjectKeyFromObject(cl), "ControllerManagerReady False", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionControllerManagerReady, metav1.ConditionFalse, backend.ReasonRestarting)
			hasCondition(c, cl, cluster.ConditionAPIServerReady, metav1.ConditionTrue, backend.ReasonRunning)
			assert.Equal(c, common.PhaseProgressing, cl.Status.Phase, "not Ready without its controller manager")
		})
		e := env.AwaitEvent(t, cl, cluster.ReasonProcessRestarted)
		assert.Contains(t, e.Note, "kube-controller-manager exited")
		waitCluster(t, client.ObjectKeyFromObject(cl), "Ready again", isReady)
		pids = op.Local.PIDs(cl.UID)
		require.Len(t, pids, 3)
	})

	t.Run("a version change is refused: the cluster keeps serving, a condition and an Event say why", func(t *testing.T) {
		refuseDowngrade(t, cl)
		assert.Equal(t, pids, op.Local.PIDs(cl.UID), "the same processes run")

		backToCurrent(t, cl)
	})

	t.Run("ProviderConfig spec change keeps the cluster running", func(t *testing.T) {
		addUnservedVersion(t, pc, profileName)
		assert.Equal(t, pids, op.Local.PIDs(cl.UID), "the same processes run")
		waitCluster(t, client.ObjectKeyFromObject(cl), "still Ready", isReady)
	})

	t.Run("a foreign finalizer holds the deletion", func(t *testing.T) {
		cur := holdDeletion(t, cl)
		assert.Equal(t, pids, op.Local.PIDs(cl.UID), "the cluster runs while the deletion waits")

		testenv.Update(ctx, t, env.Client, cur, func(cur *clustersv1alpha1.Cluster) { controllerutil.RemoveFinalizer(cur, foreignFinalizer) })
		gone(t, cl)
		for name, pid := range pids {
			assert.True(t, processGone(pid), "%s (pid %d) stopped", name, pid)
		}
		assert.NoDirExists(t, op.Local.Dir(cl.UID))
		_, err := http.Get(cl.Status.APIServer) //nolint:noctx // a refused connection is the point
		assert.Error(t, err, "the port is closed")
		// Emitted after the finalizer's removal, which let the Cluster go.
		env.AwaitEvent(t, cl, cluster.ReasonDeleted)
	})

	t.Run("the name reused gets a fresh cluster", func(t *testing.T) {
		again := newCluster(t, ns, "c1", profileName, "")
		again = waitCluster(t, client.ObjectKeyFromObject(again), "the new c1 is Ready", isReady)
		assert.NotEqual(t, cl.UID, again.UID)
		_, err := adminClient(t, op, again).CoreV1().ConfigMaps("default").Get(ctx, "from-c1", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "no data of the old cluster: %v", err)
		require.NoError(t, env.Client.Delete(ctx, again))
		gone(t, again)
	})

	untouched(t, foreign)
}
