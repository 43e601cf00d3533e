package local

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
	"github.com/openmcp-local/cluster-provider/backend/etcdmaint"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// rawEtcd reads key's value straight from the etcd of the cluster uid (its client socket), as
// whoever gets hold of etcd's files or a snapshot would.
func rawEtcd(t *testing.T, h *harness, uid types.UID, key string) []byte {
	t.Helper()
	h.b.mu.Lock()
	in := h.b.instances[uid]
	h.b.mu.Unlock()
	require.NotNil(t, in)
	var out struct {
		KVs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	m := etcdmaint.Member{URL: "http://etcd", Client: in.etcdMaint}
	require.NoError(t, m.Post(t.Context(), "/v3/kv/range", map[string]string{"key": base64.StdEncoding.EncodeToString([]byte(key))}, &out))
	if len(out.KVs) == 0 {
		return nil
	}
	return out.KVs[0].Value
}

// putRawEtcd writes value at key straight into the cluster's etcd.
func putRawEtcd(t *testing.T, h *harness, uid types.UID, key string, value []byte) {
	t.Helper()
	h.b.mu.Lock()
	in := h.b.instances[uid]
	h.b.mu.Unlock()
	m := etcdmaint.Member{URL: "http://etcd", Client: in.etcdMaint}
	require.NoError(t, m.Post(t.Context(), "/v3/kv/put", map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte(key)), "value": base64.StdEncoding.EncodeToString(value)}, nil))
}

// encStatus is the encryption part of s's provider status.
func encStatus(s backend.State) encryption.Status {
	ps, _ := s.ProviderStatus.(providerStatus)
	if ps.Encryption == nil {
		return encryption.Status{}
	}
	return *ps.Encryption
}

// sealedMarker is the plain text of the Secrets TestEncryptionAtRest writes.
const sealedMarker = "plain-text-marker-7f3a"

// sealed is what TestEncryptionAtRest carries from one step to the next.
type sealed struct {
	opts          Options
	h             *harness
	cl            *clustersv1alpha1.Cluster // the cluster
	cp            *clustersv1alpha1.Cluster // the copy made from snap
	cs            kubernetes.Interface      // the cluster's admin
	dir           string                    // the cluster's folder
	wrapping      string                    // the wrapping key's file
	first, second string                    // the cluster's first key, and the one after the rotation
	snap, snap2   backend.Snapshot          // taken before and after the rotation
}

// TestEncryptionAtRest: a Secret written through the API server is in etcd encrypted with the
// cluster's own key (no plain text of it there), the key files are the operator's only; a Secret
// in plain text (as a release before encryption left it) is read, and rewritten encrypted by a
// rotation, which puts a new key first and rewrites every Secret with it; a new Cluster made from
// a snapshot reads the snapshot's Secrets (it adopts the keys kept beside the snapshots).
func TestEncryptionAtRest(t *testing.T) {
	e := startSealed(t)
	e.encryptedWithItsKey(t)
	e.legacySecretRead(t)
	plain, x := e.keysKeptAsEarlierRelease(t)
	e.snapshotBeforeRotation(t, plain, x)
	e.rotated(t)
	e.copyReadsSnapshot(t)
	e.keptWhatSnapshotsNeed(t)
	t.Run("a wrapping key that does not read is refused and changes nothing", e.badWrappingKeyRefused)
	e.keysGoWithLastSnapshot(t)
}

// startSealed starts a backend and a cluster, and writes a Secret holding sealedMarker into it.
func startSealed(t *testing.T) *sealed {
	stateDir := t.TempDir()
	e := &sealed{opts: Options{StateDir: stateDir, MaxClusters: 2, Logger: testenv.Logger(t), HealthInterval: time.Second}}
	e.h = startBackendOptions(t, e.opts)
	e.cl = newCluster("sealed")
	e.h.await(e.cl, "Ready", complete)
	admin, err := e.h.b.AdminConfig(t.Context(), e.cl)
	require.NoError(t, err)
	e.cs = kubernetes.NewForConfigOrDie(admin)
	_, err = e.cs.CoreV1().Secrets("default").Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sealed"},
		StringData: map[string]string{"password": sealedMarker}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return e
}

// encryptedWithItsKey checks that the Secret is in etcd encrypted with the cluster's own key, and
// that the key files are the operator's only.
func (e *sealed) encryptedWithItsKey(t *testing.T) {
	h, cl := e.h, e.cl
	s := h.await(cl, "every Secret written with the key", func(s backend.State) bool { return encStatus(s).Rewritten })
	e.first = encStatus(s).Key
	require.True(t, strings.HasPrefix(e.first, "key-"), e.first)
	raw := rawEtcd(t, h, cl.UID, "/registry/secrets/default/sealed")
	assert.True(t, strings.HasPrefix(string(raw), encryption.Prefix+e.first+":"), "encrypted with the cluster's key: %.40q", raw)
	assert.NotContains(t, string(raw), sealedMarker, "no plain text in etcd")
	assert.NotContains(t, string(raw), base64.StdEncoding.EncodeToString([]byte(sealedMarker)))
	e.dir = h.b.Dir(cl.UID)
	for _, f := range []string{encryption.StateFile, encryption.ConfigFile} {
		info, err := os.Stat(filepath.Join(e.dir, f))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "%s is the operator's only", f)
	}
}

// legacySecretRead writes a Secret in plain text, as a cluster made before encryption holds it,
// and checks that it is read through identity.
func (e *sealed) legacySecretRead(t *testing.T) {
	legacy, err := json.Marshal(&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "default", UID: types.UID("0b7e2c4a-legacy"), CreationTimestamp: metav1.Now()},
		Data:       map[string][]byte{"token": []byte("legacy-" + sealedMarker)}})
	require.NoError(t, err)
	putRawEtcd(t, e.h, e.cl.UID, "/registry/secrets/default/legacy", legacy)
	got, err := e.cs.CoreV1().Secrets("default").Get(t.Context(), "legacy", metav1.GetOptions{})
	require.NoError(t, err, "a Secret written before encryption is read")
	assert.Equal(t, "legacy-"+sealedMarker, string(got.Data["token"]))
}

// keysKeptAsEarlierRelease keeps the keys beside the snapshots as an earlier release did: in plain
// text, with a key (x) that a snapshot of that release (no record of the keys it needs) may need.
// It returns what it kept, and x.
func (e *sealed) keysKeptAsEarlierRelease(t *testing.T) (encryption.State, encryption.Key) {
	h, cl := e.h, e.cl
	running, _, err := encryption.Load(e.dir)
	require.NoError(t, err)
	x, err := encryption.NewKey(time.Now())
	require.NoError(t, err)
	plain := running
	plain.Keys = append(slices.Clone(running.Keys), x)
	require.NoError(t, os.MkdirAll(h.b.keysDir(cl.UID), 0o700))
	require.NoError(t, encryption.Save(h.b.keysDir(cl.UID), plain))
	earlier := backend.Snapshot{Name: "20200101T000000Z", Cluster: cl.UID, Namespace: cl.Namespace, Taken: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC), Version: "1.37.1"}
	record, err := json.Marshal(earlier)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(h.b.backupDir(cl.UID), earlier.Name+recordSuffix), record, 0o600))
	return plain, x
}

// snapshotBeforeRotation takes a snapshot, before the rotation: a Cluster made from it later reads
// its Secrets. The plain copy is read and written wrapped; the earlier release's snapshot keeps x.
func (e *sealed) snapshotBeforeRotation(t *testing.T, plain encryption.State, x encryption.Key) {
	h, cl := e.h, e.cl
	var err error
	e.snap, err = h.b.Snapshot(t.Context(), cl, backend.KeepNewest(3))
	require.NoError(t, err)
	assertKeptWrapped(t, h, cl.UID, plain.Keys)
	assert.ElementsMatch(t, []string{e.first, x.Name}, keptNames(t, h, cl.UID), "the plain copy's keys are kept, wrapped")
	e.wrapping = filepath.Join(e.opts.StateDir, wrappingKeyFile)
	info, err := os.Stat(e.wrapping)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the wrapping key is the operator's only")
	assert.NotContains(t, e.wrapping, filepath.Join(e.opts.StateDir, backupsDir), "never beside the snapshots")
}

// rotated asks for a rotation: a new key writes, every Secret is rewritten with it (the plain one
// too).
func (e *sealed) rotated(t *testing.T) {
	h, cl := e.h, e.cl
	first := e.first
	pids := h.b.PIDs(cl.UID)
	cl.Annotations = map[string]string{backend.AnnotationRotateEncryptionKey: "2026-11-26"}
	s := h.await(cl, "rotated and rewritten", func(s backend.State) bool {
		e := encStatus(s)
		return e.Key != first && e.Rewritten && s.Ready
	})
	e.second = encStatus(s).Key
	assert.Equal(t, 2, encStatus(s).Keys, "the old key stays, to read older snapshots")
	assert.NotEqual(t, pids[procAPIServer], h.b.PIDs(cl.UID)[procAPIServer], "the API server restarted with the new key")
	for _, name := range []string{"sealed", "legacy"} {
		raw := rawEtcd(t, h, cl.UID, "/registry/secrets/default/"+name)
		assert.True(t, strings.HasPrefix(string(raw), encryption.Prefix+e.second+":"), "%s rewritten with the new key: %.40q", name, raw)
		assert.NotContains(t, string(raw), sealedMarker)
	}
	got, err := e.cs.CoreV1().Secrets("default").Get(t.Context(), "sealed", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, sealedMarker, string(got.Data["password"]))
	again := h.await(cl, "asked again: nothing more", func(s backend.State) bool { return s.Ready })
	assert.Equal(t, e.second, encStatus(again).Key, "one rotation per request")
}

// copyReadsSnapshot makes a new Cluster from the snapshot taken before the rotation: it reads the
// snapshot's Secrets.
func (e *sealed) copyReadsSnapshot(t *testing.T) {
	h := e.h
	e.cp = newCluster("sealed-copy")
	e.cp.Annotations = map[string]string{backend.AnnotationRestoreFrom: e.snap.Ref()}
	cs2 := h.await(e.cp, "the copy is Ready and rewritten", func(s backend.State) bool { return complete(s) && s.Restored != nil && encStatus(s).Rewritten })
	assert.NotEqual(t, e.first, encStatus(cs2).Key, "the copy has a key of its own")
	cfg, err := h.b.AdminConfig(t.Context(), e.cp)
	require.NoError(t, err)
	got, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Secrets("default").Get(t.Context(), "sealed", metav1.GetOptions{})
	require.NoError(t, err, "the copy reads the snapshot's Secrets")
	assert.Equal(t, sealedMarker, string(got.Data["password"]))
	raw := rawEtcd(t, h, e.cp.UID, "/registry/secrets/default/sealed")
	assert.True(t, strings.HasPrefix(string(raw), encryption.Prefix+encStatus(cs2).Key+":"), "rewritten with the copy's key: %.40q", raw)
}

// keptWhatSnapshotsNeed takes another snapshot. Beside the snapshots stay what they need and what
// the cluster uses: the earlier release's snapshot goes (keep 2), and x with it; the first key,
// which the cluster no longer writes with, stays for the snapshot taken with it.
func (e *sealed) keptWhatSnapshotsNeed(t *testing.T) {
	h, cl := e.h, e.cl
	var err error
	e.snap2, err = h.b.Snapshot(t.Context(), cl, backend.KeepNewest(2))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{e.first, e.second}, keptNames(t, h, cl.UID))
	now, _, err := encryption.Load(e.dir)
	require.NoError(t, err)
	assertKeptWrapped(t, h, cl.UID, now.Keys)
}

// badWrappingKeyRefused garbles the wrapping key, then removes it: a snapshot is refused and
// nothing changes; the key put back, the kept keys read again.
func (e *sealed) badWrappingKeyRefused(t *testing.T) {
	h, cl, wrapping := e.h, e.cl, e.wrapping
	good, err := os.ReadFile(wrapping)
	require.NoError(t, err)
	keptFile := filepath.Join(h.b.keysDir(cl.UID), encryption.KeptFile)
	kept, err := os.ReadFile(keptFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(wrapping, []byte("garbled\n"), 0o600))
	_, err = h.b.Snapshot(t.Context(), cl, backend.KeepNewest(2))
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)
	assert.Contains(t, err.Error(), wrapping)
	assert.Contains(t, err.Error(), "never replaced")
	assert.Contains(t, err.Error(), "put it back from a backup")
	got, err := os.ReadFile(wrapping)
	require.NoError(t, err)
	assert.Equal(t, "garbled\n", string(got), "left as it is")
	got, err = os.ReadFile(keptFile)
	require.NoError(t, err)
	assert.Equal(t, kept, got, "the kept keys unchanged")
	all, err := h.b.Snapshots(t.Context(), cl)
	require.NoError(t, err)
	assert.Len(t, all, 2, "no snapshot taken")

	// Missing while copies are wrapped with it: no new one is made, which could not unwrap them.
	require.NoError(t, os.Remove(wrapping))
	_, err = h.b.Snapshot(t.Context(), cl, backend.KeepNewest(2))
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)
	assert.Contains(t, err.Error(), "is missing")
	_, err = os.Stat(wrapping)
	assert.ErrorIs(t, err, os.ErrNotExist, "no new wrapping key")
	got, err = os.ReadFile(keptFile)
	require.NoError(t, err)
	assert.Equal(t, kept, got, "the kept keys unchanged")

	require.NoError(t, os.WriteFile(wrapping, good, 0o600))
	assert.ElementsMatch(t, []string{e.first, e.second}, keptNames(t, h, cl.UID), "read again with the key put back")
}

// keysGoWithLastSnapshot deletes both Clusters: their snapshots keep what they need; once the
// last is gone (by hand), the copy goes too, at the next start.
func (e *sealed) keysGoWithLastSnapshot(t *testing.T) {
	h, cl := e.h, e.cl
	for _, c := range []*clustersv1alpha1.Cluster{e.cp, cl} {
		gone, err := h.b.Delete(t.Context(), c)
		require.NoError(t, err)
		require.True(t, gone)
	}
	assert.ElementsMatch(t, []string{e.first, e.second}, keptNames(t, h, cl.UID), "what the snapshots need stays")
	h.stop()
	for _, s := range []backend.Snapshot{e.snap, e.snap2} {
		for _, suffix := range []string{snapshotSuffix, recordSuffix} {
			require.NoError(t, os.Remove(filepath.Join(h.b.backupDir(cl.UID), s.Name+suffix)))
		}
	}
	h = startBackendOptions(t, e.opts)
	e.h = h
	require.Eventually(t, func() bool {
		h.b.mu.Lock()
		defer h.b.mu.Unlock()
		return h.b.started
	}, stopWithin, 10*time.Millisecond, "the backend started")
	_, err := os.Stat(h.b.keysDir(cl.UID))
	assert.ErrorIs(t, err, os.ErrNotExist, "the keys went with the last snapshot")
	_, err = os.Stat(e.wrapping)
	assert.NoError(t, err, "the wrapping key stays")
}

// keptNames are the names of the keys kept beside the snapshots of the cluster uid.
func keptNames(t *testing.T, h *harness, uid types.UID) []string {
	t.Helper()
	h.b.backupMu.Lock()
	defer h.b.backupMu.Unlock()
	k, found, err := h.b.readKept(uid)
	require.NoError(t, err)
	require.True(t, found)
	return k.Names()
}

// assertKeptWrapped checks that the keys folder beside the snapshots of the cluster uid holds
// only the wrapped copy, the operator's only, and no key of keys in any form.
func assertKeptWrapped(t *testing.T, h *harness, uid types.UID, keys []encryption.Key) {
	t.Helper()
	entries, err := os.ReadDir(h.b.keysDir(uid))
	require.NoError(t, err)
	require.Len(t, entries, 1, "only the wrapped copy: the plain one is gone")
	assert.Equal(t, encryption.KeptFile, entries[0].Name())
	path := filepath.Join(h.b.keysDir(uid), encryption.KeptFile)
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, k := range keys {
		for _, form := range []string{string(k.Secret), base64.StdEncoding.EncodeToString(k.Secret), hex.EncodeToString(k.Secret)} {
			assert.NotContains(t, string(data), form, "key %s is not beside the snapshots", k.Name)
		}
	}
}

// TestWrappingKeyApart: a backups folder that holds the wrapping key (a link to --state-dir) is
// refused at start, saying why.
func TestWrappingKeyApart(t *testing.T) {
	stateDir := t.TempDir()
	require.NoError(t, os.Symlink(".", filepath.Join(stateDir, backupsDir)))
	b, err := New(Options{Binaries: []Binaries{{Dir: t.TempDir(), Version: "1.37.1"}}, StateDir: stateDir,
		ListClusters: func(context.Context) ([]clustersv1alpha1.Cluster, error) { return nil, nil }})
	require.NoError(t, err)
	err = b.Start(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds "+filepath.Join(stateDir, wrappingKeyFile))
	assert.Contains(t, err.Error(), "make "+filepath.Join(stateDir, backupsDir)+" a folder of its own")
}
