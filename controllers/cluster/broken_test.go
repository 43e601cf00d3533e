package cluster_test

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/test/operator"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// stateRetry is the local backend's StateRetry in these tests: how soon a damaged or full cluster
// folder is tried again.
const stateRetry = 2 * time.Second

// TestBrokenStateWithLocalBackend damages the folders of four of five local clusters while the operator is down,
// as a bad disk or a careless hand would, and starts it again:
//   - a truncated CA key: the cluster stays stopped, Provisioned=False reason StateDamaged names the
//     file and what to do, a Warning Event says so, no file changes; once the key is restored the
//     cluster starts by itself;
//   - a garbled record (cluster.json, its ports): rebuilt from the Cluster's status, so the
//     cluster comes back on the same endpoint with its data; the damaged file is kept beside it and
//     a Warning Event StateRepaired says so;
//   - a record removed by hand: rebuilt the same way;
//   - a missing etcd data folder: the cluster starts EMPTY and says so (DataLost), as when its
//     whole folder is lost;
//   - the fifth cluster comes back as it was.
//
// It tests the local backend's handling of its folders through the reconciler (TestBackendReports
// covers the reconciler's side with a fake backend).
func TestBrokenStateWithLocalBackend(t *testing.T) {
	stateDir := t.TempDir()
	ns := env.Namespace(t)
	pc := newProviderConfig(t)
	profileName := profile.Name(testEnvironment, testProvider, pc.Name)
	names := []string{"intact", "badca", "badmeta", "nometa", "noetcd"}
	cls := map[string]*clustersv1alpha1.Cluster{}
	for _, name := range names {
		newCluster(t, ns, name, profileName, "") // made here: they outlive the subtest's operator
	}
	t.Run("five clusters run", func(t *testing.T) {
		op := startOperator(t, stateDir, 10) // stops when the subtest ends
		for _, name := range names {
			cls[name] = waitCluster(t, client.ObjectKey{Namespace: ns, Name: name}, name+" is Ready", isReady)
		}
		for _, name := range []string{"intact", "badmeta", "nometa"} {
			_, err := adminClient(t, op, cls[name]).CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Data: map[string]string{"k": name},
			}, metav1.CreateOptions{})
			require.NoError(t, err)
		}
	})
	require.Len(t, cls, len(names), "every cluster ran")
	dir := func(name string) string { return filepath.Join(stateDir, string(cls[name].UID)) }

	caKey := filepath.Join(dir("badca"), "pki", "ca.key")
	goodKey, err := os.ReadFile(caKey)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(caKey, goodKey[:len(goodKey)/2], 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir("badmeta"), "cluster.json"), []byte(`{"uid": "x", "ports": {"apiServer": "oops`), 0o600))
	require.NoError(t, os.Remove(filepath.Join(dir("nometa"), "cluster.json")))
	require.NoError(t, os.RemoveAll(filepath.Join(dir("noetcd"), "etcd")))
	badCAFiles := folderListing(t, dir("badca"))

	op := operator.Start(t, env, operator.Options{ProviderName: testProvider, Environment: testEnvironment, StateDir: stateDir, MaxClusters: 10, StateRetry: stateRetry})

	t.Run("untouched clusters come back as they were", func(t *testing.T) {
		for _, name := range []string{"intact", "badmeta", "nometa"} {
			got := waitCluster(t, client.ObjectKeyFromObject(cls[name]), name+" is Ready", isReady)
			assert.Equal(t, cls[name].Status.APIServer, got.Status.APIServer, "%s keeps its endpoint", name)
			assert.EventuallyWithT(t, func(c *assert.CollectT) {
				cm, err := adminClient(t, op, got).CoreV1().ConfigMaps("default").Get(t.Context(), "mine", metav1.GetOptions{})
				require.NoError(c, err)
				assert.Equal(c, name, cm.Data["k"])
			}, readyWithin, poll, "%s keeps its data", name)
		}
	})

	t.Run("a garbled record is rebuilt and kept aside", func(t *testing.T) {
		e := env.AwaitEvent(t, cls["badmeta"], cluster.ReasonStateRepaired)
		assert.Equal(t, corev1.EventTypeWarning, e.Type)
		assert.Contains(t, e.Note, filepath.Join(dir("badmeta"), "cluster.json"))
		assert.Contains(t, e.Note, "rebuilt from the Cluster's status")
		kept, err := filepath.Glob(filepath.Join(dir("badmeta"), "cluster.json.damaged-*"))
		require.NoError(t, err)
		require.Len(t, kept, 1, "the damaged record is kept")
		data, err := os.ReadFile(kept[0])
		require.NoError(t, err)
		assert.Contains(t, string(data), "oops")

		e = env.AwaitEvent(t, cls["nometa"], cluster.ReasonStateRepaired)
		assert.Contains(t, e.Note, filepath.Join(dir("nometa"), "cluster.json")+" was missing")
	})

	t.Run("a missing etcd folder is reported as lost data", func(t *testing.T) {
		got := waitCluster(t, client.ObjectKeyFromObject(cls["noetcd"]), "noetcd is Ready with DataLost", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			isReady(c, cl)
			hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionTrue, cluster.ReasonDataLost)
		})
		assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message,
			"etcd data folder "+filepath.Join(dir("noetcd"), "etcd")+" was gone")
		assert.Equal(t, corev1.EventTypeWarning, env.AwaitEvent(t, cls["noetcd"], cluster.ReasonDataLost).Type)
	})

	t.Run("a damaged CA key stops the cluster until it is restored", func(t *testing.T) {
		got := waitCluster(t, client.ObjectKeyFromObject(cls["badca"]), "badca says StateDamaged", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionFalse, backend.ReasonStateDamaged)
		})
		msg := meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message
		for _, want := range []string{caKey, "restore it from a backup of --state-dir", "starts by itself"} {
			assert.Contains(t, msg, want)
		}
		e := env.AwaitEvent(t, cls["badca"], backend.ReasonStateDamaged)
		assert.Equal(t, corev1.EventTypeWarning, e.Type)
		assert.Empty(t, op.Local.PIDs(cls["badca"].UID), "no process runs for it")
		assert.Equal(t, badCAFiles, folderListing(t, dir("badca")), "nothing in its folder changed")

		require.NoError(t, os.WriteFile(caKey, goodKey, 0o600))
		again := waitCluster(t, client.ObjectKeyFromObject(cls["badca"]), "badca is Ready once its key is back", isReady)
		assert.Equal(t, cls["badca"].Status.APIServer, again.Status.APIServer)
	})

	for _, name := range names {
		require.NoError(t, env.Client.Delete(t.Context(), cls[name]))
	}
	for _, name := range names {
		gone(t, cls[name])
	}
}

// TestStateDirFullWithLocalBackend runs the operator on a state dir with no space left (a small tmpfs, filled):
// a new Cluster gets Provisioned=False reason StateDirFull with what to do and a Warning Event,
// and starts by itself once space is freed. It needs root to mount the tmpfs.
func TestStateDirFullWithLocalBackend(t *testing.T) {
	stateDir := t.TempDir()
	// etcd preallocates 64 MiB of write-ahead log: room for one cluster once the filler is gone.
	if err := syscall.Mount("tmpfs", stateDir, "tmpfs", 0, "size=256m,mode=0700"); err != nil {
		testenv.MissingTool(t, "root (to mount a tmpfs for a full state dir)", err)
	}
	t.Cleanup(func() { assert.NoError(t, syscall.Unmount(stateDir, syscall.MNT_DETACH)) })
	filler := filepath.Join(stateDir, "filler")
	fill(t, filler)

	op := operator.Start(t, env, operator.Options{ProviderName: testProvider, Environment: testEnvironment, StateDir: stateDir, StateRetry: stateRetry})
	ns := env.Namespace(t)
	pc := newProviderConfig(t)
	cl := newCluster(t, ns, "full", profile.Name(testEnvironment, testProvider, pc.Name), "")
	got := waitCluster(t, client.ObjectKeyFromObject(cl), "StateDirFull", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionFalse, backend.ReasonStateDirFull)
	})
	msg := meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message
	for _, want := range []string{"--state-dir " + stateDir + " is full", "no space left on device", "Free space"} {
		assert.Contains(t, msg, want)
	}
	assert.Equal(t, corev1.EventTypeWarning, env.AwaitEvent(t, cl, backend.ReasonStateDirFull).Type)
	assert.Empty(t, op.Local.PIDs(cl.UID), "no process runs for it")

	require.NoError(t, os.Remove(filler))
	waitCluster(t, client.ObjectKeyFromObject(cl), "Ready once space is freed", isReady)
	require.NoError(t, env.Client.Delete(t.Context(), cl))
	gone(t, cl)
}

// fill writes path until the file system has no space left.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			require.ErrorIs(t, err, syscall.ENOSPC)
			return
		}
	}
}

// folderListing maps every file under dir but etcd's data and the logs to its mode and contents.
func folderListing(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() && (rel == "etcd" || rel == "logs") {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%s %s", info.Mode(), data)
		return nil
	}))
	return out
}

// TestCapacityFrees: with a backend that runs one cluster, a second Cluster waits with reason
// CapacityExhausted and starts by itself, untouched, once the first is deleted (the backend's
// notification; backend/local's TestCapacity checks that the local backend sends it).
func TestCapacityFrees(t *testing.T) {
	startFake(t, backendtest.Options{MaxClusters: 1})
	ns := env.Namespace(t)
	profileName := profile.Name(testEnvironment, testProvider, newProviderConfig(t).Name)
	first := newCluster(t, ns, "first", profileName, "")
	waitCluster(t, client.ObjectKeyFromObject(first), "first is Ready", isReady)
	second := newCluster(t, ns, "second", profileName, "")
	got := waitCluster(t, client.ObjectKeyFromObject(second), "second waits for capacity", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		hasCondition(c, cl, cluster.ConditionProvisioned, metav1.ConditionFalse, backend.ReasonCapacityExhausted)
	})
	assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned).Message, "starts by itself")
	generation := got.Generation

	require.NoError(t, env.Client.Delete(t.Context(), first))
	got = waitCluster(t, client.ObjectKeyFromObject(second), "second starts once first is gone", isReady)
	assert.Equal(t, generation, got.Generation, "nobody touched second's spec")
	require.NoError(t, env.Client.Delete(t.Context(), second))
	gone(t, second)
}

// TestLeftovers: a test that ends without deleting what it made (it failed half-way)
// leaves nothing the next test's operator starts. Issue 39: TestBackupSchedule failed on a write
// conflict and left its Cluster; every later operator of the package served its ProviderConfig,
// started that Cluster, and it took the one place TestCapacityFrees and TestClusterLifecycle
// waited for (reproduced: TestBackupSchedule made to fail there, then TestCapacityFrees red at the
// same line as in the issue). Without DeleteAtCleanup the leftover here outlives its test, and
// the next operator serves it: it runs, or waits for the place, whichever of it and "fresh" its
// reconciler comes to first. The two operators share one fake backend of one place, as two runs
// of an operator share the clusters of their backend: the second finishes the leftover's deletion
// with the snapshot before it (spec.backup.snapshotBeforeDelete, on by default) of the cluster the
// first made. (With a fake of its own, the second operator had no such cluster: the snapshot was
// refused and the deletion waited, a failure under load, when the first operator had not finished
// the deletion before it stopped.)
func TestLeftovers(t *testing.T) {
	var (
		left *clustersv1alpha1.Cluster
		fake *backendtest.Fake
	)
	require.True(t, t.Run("left", func(t *testing.T) {
		fake = startFake(t, backendtest.Options{MaxClusters: 1})
		left = newCluster(t, env.Namespace(t), "left", profile.Name(testEnvironment, testProvider, newProviderConfig(t).Name), "")
		waitCluster(t, client.ObjectKeyFromObject(left), "the leftover is Ready", isReady)
	}))
	// Deleted when its test ended: gone already if that test's operator finished it before it
	// stopped, else being deleted.
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(left), left); err == nil {
		assert.NotNil(t, left.DeletionTimestamp, "the leftover is being deleted once its test ended")
	} else {
		require.True(t, apierrors.IsNotFound(err), "%v", err)
	}

	operator.Start(t, env, operator.Options{ProviderName: testProvider, Environment: testEnvironment, Backend: fake})
	fresh := newCluster(t, env.Namespace(t), "fresh", profile.Name(testEnvironment, testProvider, newProviderConfig(t).Name), "")
	waitCluster(t, client.ObjectKeyFromObject(fresh), "the next test's Cluster gets the place", isReady)
	gone(t, left) // its deletion is finished by the next operator
}
