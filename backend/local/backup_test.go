package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// ran gives cl the provider status a cluster that ran writes, as the Cluster reconciler does.
func ran(t *testing.T, cl *clustersv1alpha1.Cluster, s backend.State) {
	t.Helper()
	raw, err := json.Marshal(s.ProviderStatus)
	require.NoError(t, err)
	cl.Status.ProviderStatus = &runtime.RawExtension{Raw: raw}
}

func configMapExists(t *testing.T, cs kubernetes.Interface, name string) bool {
	t.Helper()
	_, err := cs.CoreV1().ConfigMaps("kept").Get(t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// drill is what TestBackupRestoreDrill carries from one step to the next.
type drill struct {
	stateDir string
	h        *harness
	cl       *clustersv1alpha1.Cluster
	made     backend.State        // the state of the cluster when it was first Ready
	cs       kubernetes.Interface // the cluster's admin
	user     kubernetes.Interface // a user with a token issued before the snapshot
	snap     backend.Snapshot
	bdir     string         // the cluster's snapshots folder
	pids     map[string]int // the processes of the cluster started empty
}

// TestBackupRestoreDrill is the restore drill of a local cluster: data is written and a user is
// issued a token, a snapshot is taken (checked, 0600, outside the cluster's folder), more data is
// written, and then etcd's data folder is destroyed while the operator is down. The cluster comes
// back EMPTY (DataLost); bad restores are refused and change nothing; the restore brings back the
// data written before the snapshot (not the later), on the same endpoint, the token issued
// before works again, and a watch from a resourceVersion handed out before the restore ends in
// 410 Gone (the restore bumps etcd's revision and marks it compacted). A new Cluster made from
// the snapshot starts with its data; a bad reference makes nothing. Keeping the newest snapshots removes the older.
func TestBackupRestoreDrill(t *testing.T) {
	d := startDrill(t)
	d.snapshotTaken(t)
	d.dataLostWhileDown(t)
	t.Run("bad restores are refused and change nothing", d.badRestoresRefused)
	d.restored(t)
	t.Run("a new Cluster made from the snapshot", d.newClusterFromSnapshot)

	t.Run("the newest snapshots are kept", func(t *testing.T) {
		second, err := d.h.b.Snapshot(t.Context(), d.cl, backend.KeepNewest(1))
		require.NoError(t, err)
		listed, err := d.h.b.Snapshots(t.Context(), d.cl)
		require.NoError(t, err)
		require.Len(t, listed, 1)
		assert.Equal(t, second.Name, listed[0].Name)
		assert.NoFileExists(t, filepath.Join(d.bdir, d.snap.Name+snapshotSuffix))
	})

	gone, err := d.h.b.Delete(t.Context(), d.cl)
	require.NoError(t, err)
	require.True(t, gone)
	assert.NoDirExists(t, d.h.b.Dir(d.cl.UID))
	assert.DirExists(t, d.bdir, "a Cluster's snapshots outlive it")
}

// startDrill starts a backend and a cluster, writes data into it and issues a user a token.
func startDrill(t *testing.T) *drill {
	d := &drill{stateDir: t.TempDir()}
	d.h = startBackend(t, d.stateDir, 2)
	d.cl = newCluster("drill")
	d.made = d.h.await(d.cl, "Ready", complete)
	ran(t, d.cl, d.made)
	admin, err := d.h.b.AdminConfig(t.Context(), d.cl)
	require.NoError(t, err)
	d.cs = kubernetes.NewForConfigOrDie(admin)
	_, err = d.cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, name := range []string{"before-1", "before-2"} {
		_, err = d.cs.CoreV1().ConfigMaps("kept").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	d.user = kubernetes.NewForConfigOrDie(issuedConfig(t, admin))
	return d
}

// snapshotTaken takes a snapshot and checks it: its record, its files 0600 outside the cluster's
// folder, and the list of snapshots.
func (d *drill) snapshotTaken(t *testing.T) {
	h, cl := d.h, d.cl
	var err error
	d.snap, err = h.b.Snapshot(t.Context(), cl, backend.KeepNewest(5))
	require.NoError(t, err)
	snap := d.snap
	assert.Equal(t, cl.UID, snap.Cluster)
	assert.Equal(t, cl.Namespace, snap.Namespace, "a snapshot belongs to its Cluster's namespace")
	assert.Positive(t, snap.Revision)
	assert.Positive(t, snap.Keys)
	assert.Positive(t, snap.Size)
	assert.Equal(t, "1.37.1", snap.Version)
	d.bdir = filepath.Join(d.stateDir, backupsDir, string(cl.UID))
	bdir := d.bdir
	for path, mode := range map[string]os.FileMode{
		bdir: 0o700 | os.ModeDir, filepath.Join(bdir, snap.Name+snapshotSuffix): 0o600, filepath.Join(bdir, snap.Name+recordSuffix): 0o600,
	} {
		fi, err := os.Stat(path)
		require.NoError(t, err)
		assert.Equal(t, mode, fi.Mode(), "only the operator reads a snapshot: %s", path)
	}
	listed, err := h.b.Snapshots(t.Context(), cl)
	require.NoError(t, err)
	require.Len(t, listed, 1)
	assert.Equal(t, snap.Name, listed[0].Name)
	assert.WithinDuration(t, snap.Taken, listed[0].Taken, 0)
}

// dataLostWhileDown writes more data, then loses etcd's data folder while the operator is down:
// the cluster comes back empty.
func (d *drill) dataLostWhileDown(t *testing.T) {
	cl := d.cl
	_, err := d.cs.CoreV1().ConfigMaps("kept").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// etcd's data folder is lost while the operator is down: the cluster comes back empty.
	d.h.stop()
	require.NoError(t, os.RemoveAll(filepath.Join(d.h.b.Dir(cl.UID), etcdDataDir)))
	d.h = startBackend(t, d.stateDir, 2, cl)
	h := d.h
	lost := h.await(cl, "Ready again, empty", complete)
	assert.NotEmpty(t, dataLost(lost))
	assert.Equal(t, d.made.Endpoint, lost.Endpoint)
	admin, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	d.cs = kubernetes.NewForConfigOrDie(admin)
	assert.False(t, configMapExists(t, d.cs, "before-1"), "the data is gone")
	_, err = d.user.CoreV1().ConfigMaps("kept").List(t.Context(), metav1.ListOptions{})
	require.True(t, apierrors.IsUnauthorized(err), "its ServiceAccount is gone with the data: %v", err)
	d.pids = h.b.PIDs(cl.UID)
}

// badRestoresRefused asks for restores of a missing snapshot, a damaged one and a bad name: each is
// refused and changes nothing; a copy of the snapshot among another Cluster's is still of this one.
func (d *drill) badRestoresRefused(t *testing.T) {
	h, cl, snap, bdir := d.h, d.cl, d.snap, d.bdir
	other := newCluster("other")
	// A snapshot of this Cluster copied among the other's is still of this Cluster.
	odir := filepath.Join(d.stateDir, backupsDir, string(other.UID))
	require.NoError(t, os.MkdirAll(odir, 0o700))
	for _, suffix := range []string{snapshotSuffix, recordSuffix} {
		data, err := os.ReadFile(filepath.Join(bdir, snap.Name+suffix))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(odir, snap.Name+suffix), data, 0o600))
	}
	// A damaged copy: one byte differs in the middle of the file.
	damaged := "20000101T000000Z"
	data, err := os.ReadFile(filepath.Join(bdir, snap.Name+snapshotSuffix))
	require.NoError(t, err)
	data[len(data)/2] ^= 0xff
	require.NoError(t, os.WriteFile(filepath.Join(bdir, damaged+snapshotSuffix), data, 0o600))
	rec := snap
	rec.Name = damaged
	recData, err := json.Marshal(rec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(bdir, damaged+recordSuffix), recData, 0o600))
	t.Cleanup(func() {
		os.Remove(filepath.Join(bdir, damaged+snapshotSuffix))
		os.Remove(filepath.Join(bdir, damaged+recordSuffix))
	})

	for _, tc := range []struct {
		name, snapshot, says string
		in                   *clustersv1alpha1.Cluster
	}{
		{name: "missing", in: cl, snapshot: "20990101T000000Z", says: `there is no snapshot "20990101T000000Z" of the Cluster with UID ` + string(cl.UID) + " (its snapshots: " + snap.Name + ", " + damaged + ")"},
		{name: "damaged", in: cl, snapshot: damaged, says: "is damaged: the SHA-256 of"},
		{name: "not a name", in: cl, snapshot: "../x", says: "is not a snapshot name"},
	} {
		err := h.b.Restore(t.Context(), tc.in, tc.snapshot)
		require.Error(t, err, tc.name)
		assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%s: %v", tc.name, err)
		assert.Contains(t, err.Error(), tc.says, tc.name)
	}
	// The other Cluster's own list holds the copy; checked against the other Cluster, it is
	// not its own.
	s, err := h.b.store(h.b.opts.Binaries[0]).Check(t.Context(), other.UID, snap.Name)
	require.NoError(t, err, "the copy itself is intact")
	assert.Equal(t, cl.UID, s.Cluster, "the copy says whose it is")

	s2, err := h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.NoError(t, err)
	assert.True(t, s2.Ready)
	assert.Nil(t, s2.Restored)
	assert.Equal(t, d.pids, h.b.PIDs(cl.UID), "nothing restarted")
}

// restored restores the snapshot: the cluster comes back on the snapshot's data, on the same
// endpoint and CA, the token issued before the snapshot works again, and a watch from a
// resourceVersion handed out before the restore ends in 410 Gone.
func (d *drill) restored(t *testing.T) {
	h, cl, cs, made := d.h, d.cl, d.cs, d.made
	seen := testenv.SeenBeforeRestore(t, cs, d.snap.Revision)
	require.NoError(t, h.b.Restore(t.Context(), cl, d.snap.Name))
	restoring, err := h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.NoError(t, err)
	assert.Equal(t, backend.ReasonRestoring, restoring.Reason)
	assert.False(t, restoring.Ready)
	back := h.await(cl, "Ready on the snapshot's data", func(s backend.State) bool { return complete(s) && s.Restored != nil })
	assert.Equal(t, made.Endpoint, back.Endpoint, "the same endpoint")
	assert.Equal(t, made.CABundle, back.CABundle, "the same CA")
	assert.Empty(t, dataLost(back), "the data is back")
	assert.Empty(t, back.Restored.Failed)
	assert.Equal(t, d.snap.Name, back.Restored.Snapshot.Name)
	assert.DirExists(t, back.Restored.MovedAside, "the data it replaced is kept")
	assert.True(t, configMapExists(t, cs, "before-1"))
	assert.True(t, configMapExists(t, cs, "before-2"))
	assert.False(t, configMapExists(t, cs, "after"), "written after the snapshot")
	t.Run("a watch from before the restore ends in 410 Gone", func(t *testing.T) { testenv.WatchFromBeforeRestoreGone(t, cs, seen) })
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := d.user.CoreV1().ConfigMaps("kept").List(t.Context(), metav1.ListOptions{})
		assert.NoError(c, err, "the token issued before the snapshot works again")
	}, readyWithin, 100*time.Millisecond)
}

// newClusterFromSnapshot checks that a bad reference and another namespace's Cluster make nothing,
// and that a new Cluster made from the snapshot starts with its data.
func (d *drill) newClusterFromSnapshot(t *testing.T) {
	h, cl, snap := d.h, d.cl, d.snap
	bad := newCluster("bad-ref")
	bad.Annotations = map[string]string{backend.AnnotationRestoreFrom: string(cl.UID) + "/19990101T000000Z"}
	_, err := h.b.Ensure(t.Context(), bad, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	assert.NoDirExists(t, h.b.Dir(bad.UID), "nothing is made")

	// Another namespace's Cluster: the snapshot is not found, and no name of it is listed.
	foreign := newCluster("foreign")
	foreign.Namespace = "team-b"
	foreign.Annotations = map[string]string{backend.AnnotationRestoreFrom: snap.Ref()}
	_, err = h.b.Ensure(t.Context(), foreign, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	assert.Contains(t, err.Error(), "(it has none for a Cluster of namespace team-b)")
	assert.NoDirExists(t, h.b.Dir(foreign.UID), "nothing is made")

	cp := newCluster("copy")
	cp.Annotations = map[string]string{backend.AnnotationRestoreFrom: snap.Ref()}
	s := h.await(cp, "the copy is Ready", func(s backend.State) bool { return complete(s) && s.Restored != nil })
	assert.NotEqual(t, d.made.Endpoint, s.Endpoint)
	cfg, err := h.b.AdminConfig(t.Context(), cp)
	require.NoError(t, err)
	cps := kubernetes.NewForConfigOrDie(cfg)
	assert.True(t, configMapExists(t, cps, "before-1"))
	assert.False(t, configMapExists(t, cps, "after"))
	gone, err := h.b.Delete(t.Context(), cp)
	require.NoError(t, err)
	require.True(t, gone)
}

// TestFinishRestore: a restore interrupted by the operator's end is finished or undone before the
// cluster starts, never leaving it on half-written data.
func TestFinishRestore(t *testing.T) {
	snap := &backend.Snapshot{Name: "20260101T000000Z", Cluster: "uid"}
	for _, tc := range []struct {
		name                  string
		restoring             bool
		data, staging, part   bool
		pending, restored     bool
		wantData, wantStaging bool
	}{
		{name: "no restore: leftovers go", data: true, staging: true, part: true, wantData: true},
		{name: "restored, data not moved yet: undone", restoring: true, data: true, staging: true, wantData: true},
		{name: "data moved aside: the restored data takes its place", restoring: true, staging: true, restored: true, wantData: true},
		{name: "only a partial restore, no data: to do again", restoring: true, part: true, pending: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mk := func(on bool, name string) {
				if on {
					require.NoError(t, os.MkdirAll(filepath.Join(dir, name, "member"), 0o700))
				}
			}
			mk(tc.data, etcdDataDir)
			mk(tc.staging, etcdRestoring)
			mk(tc.part, etcdRestoring+".part")
			m := meta{}
			if tc.restoring {
				m.Restoring = snap
			}
			assert.Equal(t, tc.pending, finishRestore(dir, &m))
			assert.Equal(t, tc.wantData, exists(filepath.Join(dir, etcdDataDir)))
			assert.False(t, exists(filepath.Join(dir, etcdRestoring+".part")))
			assert.Equal(t, tc.wantStaging, exists(filepath.Join(dir, etcdRestoring)))
			assert.Equal(t, tc.restored, m.Restored != nil)
			assert.Equal(t, tc.pending, m.Restoring != nil, "kept only while the restore is to be done")
		})
	}
}

// TestVersionFits: a snapshot goes into a cluster of its minor or the next, never an earlier one.
func TestVersionFits(t *testing.T) {
	for _, tc := range []struct {
		snap, running string
		ok            bool
	}{
		{"1.37.1", "1.37.1", true},
		{"1.37.2", "1.37.1", true},
		{"1.36.3", "1.37.1", true},
		{"1.35.0", "1.37.1", false},
		{"1.38.0", "1.37.1", false},
		{"", "1.37.1", true},
	} {
		err := versionFits(backend.Snapshot{Name: "s", Version: tc.snap}, tc.running)
		assert.Equal(t, tc.ok, err == nil, "%s into %s: %v", tc.snap, tc.running, err)
	}
}

// benchObjects is how many ConfigMaps BenchmarkBackup writes before the first snapshot.
const benchObjects = 10000

// BenchmarkBackup fills a local cluster with benchObjects ConfigMaps (256 bytes of data each) and
// then, per iteration, takes a snapshot (snapshot-s: etcdctl snapshot save, the SHA-256 and the
// etcdutl check; snapshot-MB its size) and restores it in place (restore-ready-s: from the call to
// the cluster complete again on the snapshot's data). The last ConfigMap is read back after each
// restore.
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkBackup -benchtime 3x -timeout 30m ./backend/local/
func BenchmarkBackup(b *testing.B) {
	h := startBenchBackend(b, 1, nil)
	ctx := b.Context()
	cl := newCluster("backup")
	_, _, err := h.awaitReady(ctx, cl)
	require.NoError(b, err)
	admin, err := h.b.AdminConfig(ctx, cl)
	require.NoError(b, err)
	cs := kubernetes.NewForConfigOrDie(admin)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}, metav1.CreateOptions{})
	require.NoError(b, err)
	payload := strings.Repeat("x", 256)
	errs := make([]error, benchObjects)
	testenv.Parallel(8, benchObjects, func(i int) {
		_, errs[i] = cs.CoreV1().ConfigMaps("bench").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"v": payload}}, metav1.CreateOptions{})
	})
	require.NoError(b, errors.Join(errs...))
	var snapS, restoreS, sizes []float64
	var keys int64
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		s, err := h.b.Snapshot(ctx, cl, backend.KeepNewest(2))
		require.NoError(b, err)
		snapS = append(snapS, time.Since(start).Seconds())
		sizes = append(sizes, float64(s.Size)/1e6)
		keys = s.Keys
		start = time.Now()
		require.NoError(b, h.b.Restore(ctx, cl, s.Name))
		_, _, err = h.awaitReady(ctx, cl)
		require.NoError(b, err)
		restoreS = append(restoreS, time.Since(start).Seconds())
		_, err = cs.CoreV1().ConfigMaps("bench").Get(ctx, fmt.Sprintf("cm-%d", benchObjects-1), metav1.GetOptions{})
		require.NoError(b, err, "the data is back")
	}
	b.StopTimer()
	b.ReportMetric(mean(snapS), "snapshot-s")
	b.ReportMetric(mean(sizes), "snapshot-MB")
	b.ReportMetric(mean(restoreS), "restore-ready-s")
	b.ReportMetric(float64(keys), "keys")
}
