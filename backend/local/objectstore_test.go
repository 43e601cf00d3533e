package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/objectstore"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// bboltMagic is the magic number of a bbolt (etcd) database, in its first meta page at offset 16.
const bboltMagic = 0xED0CDAED

// s3Secrets is the operator's namespace's Secrets as ReadSecret reads them; a test changes them.
type s3Secrets struct {
	mu   sync.Mutex
	data map[string]map[string][]byte
}

func (s *s3Secrets) read(_ context.Context, name string) (map[string][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d, ok := s.data[name]
	if !ok {
		return nil, os.ErrNotExist
	}
	return d, nil
}

func (s *s3Secrets) set(name, key string, value []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.data[name][key] = value
}

func randomKey(t *testing.T) []byte {
	t.Helper()
	raw := make([]byte, objectstore.KeySize)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	return []byte(base64.StdEncoding.EncodeToString(raw))
}

// TestObjectStoreBackups keeps a local Cluster's snapshots in a real S3 server (SeaweedFS): the
// snapshot is uploaded encrypted (no etcd database in the object; decrypted, it is the
// snapshot recorded), the store lists it after the state folder's snapshots are lost, a wrong
// key is refused and fetches nothing, the restore in place from the store brings back the data
// and the Secrets (their encryption keys came with it), a Cluster of another namespace cannot be
// made from it, and one of the same namespace can.
func TestObjectStoreBackups(t *testing.T) {
	fx := startObjectStore(t)
	t.Run("a wrong key is refused", func(t *testing.T) { fx.wrongKeyRefused(t) })
	fx.restoreInPlace(t)
	t.Run("a Cluster of another namespace cannot be made from it", func(t *testing.T) { fx.otherNamespaceRefused(t) })
	t.Run("a Cluster of the same namespace is made from it", func(t *testing.T) { fx.sameNamespaceMade(t) })
}

// objectStoreFixture is what the steps of TestObjectStoreBackups share: the backend of a
// ProviderConfig keeping snapshots in S3, its state folder and Secrets, the Cluster, its
// client, its state when made, and its snapshot.
type objectStoreFixture struct {
	h        *harness
	be       backend.Backend
	bk       backend.Backups
	want     backend.Want
	stateDir string
	secrets  *s3Secrets
	cl       *clustersv1alpha1.Cluster
	cs       kubernetes.Interface
	made     backend.State
	snap     backend.Snapshot
}

// startObjectStore makes a Cluster, snapshots it into the store (checked encrypted), writes
// after the snapshot, and loses the state folder's snapshots: the store lists the snapshot.
func startObjectStore(t *testing.T) *objectStoreFixture {
	t.Helper()
	srv, bucket := testenv.S3(t)
	secrets := &s3Secrets{data: map[string]map[string][]byte{"s3": {
		providersv1alpha1.ObjectStoreAccessKeyID:     []byte(srv.AccessKeyID),
		providersv1alpha1.ObjectStoreSecretAccessKey: []byte(srv.SecretAccessKey),
		providersv1alpha1.ObjectStoreEncryptionKey:   randomKey(t),
	}}}
	stateDir := t.TempDir()
	h := startBackendOptions(t, Options{StateDir: stateDir, MaxClusters: 2, ReadSecret: secrets.read, SecretNamespace: "operator"})
	pc := &providersv1alpha1.ProviderConfig{Spec: providersv1alpha1.ProviderConfigSpec{Backend: Name, Backup: &providersv1alpha1.BackupPolicy{
		ObjectStore: &providersv1alpha1.BackupObjectStore{Endpoint: "http://" + srv.Endpoint, Bucket: bucket, Prefix: "cp/test",
			Insecure: true, PathStyle: true, CredentialsSecretRef: providersv1alpha1.ObjectStoreSecretRef{Name: "s3"}},
	}}}
	be := h.b.ForProfile(pc)
	bk := be.(backend.Backups)
	want := backend.Want{Version: "1.37.1"}
	cl := newCluster("stored")
	made := h.awaitOn(be, cl, want, "Ready", complete)
	ran(t, cl, made)
	admin, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	cs := kubernetes.NewForConfigOrDie(admin)
	writeKept(t, cs, "before")

	snap, err := bk.Snapshot(t.Context(), cl, backend.KeepNewest(5))
	require.NoError(t, err)
	snap.Taken = snap.Taken.Round(0) // as a record reads: no monotonic clock
	assertStoredEncrypted(t, srv.Client(), bucket, "cp/test/ns/"+string(cl.UID)+"/"+snap.Name, snap, stateDir, secrets)
	writeKept(t, cs, "after")

	// The state folder's snapshots and kept keys are lost: the store is the catalog.
	require.NoError(t, os.RemoveAll(filepath.Join(stateDir, backupsDir, string(cl.UID))))
	listed, err := bk.Snapshots(t.Context(), cl)
	require.NoError(t, err)
	require.Len(t, listed, 1)
	assert.Equal(t, snap, listed[0])
	return &objectStoreFixture{h: h, be: be, bk: bk, want: want, stateDir: stateDir, secrets: secrets,
		cl: cl, cs: cs, made: made, snap: snap}
}

// wrongKeyRefused: a restore with a wrong encryption key is refused and fetches nothing.
func (fx *objectStoreFixture) wrongKeyRefused(t *testing.T) {
	secrets, cl := fx.secrets, fx.cl
	right := secrets.data["s3"][providersv1alpha1.ObjectStoreEncryptionKey]
	secrets.set("s3", providersv1alpha1.ObjectStoreEncryptionKey, randomKey(t))
	err := fx.bk.Restore(t.Context(), cl, fx.snap.Name)
	secrets.set("s3", providersv1alpha1.ObjectStoreEncryptionKey, right)
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	assert.Contains(t, err.Error(), "does not decrypt with key encryptionKey of Secret s3")
	assert.NoDirExists(t, filepath.Join(fx.stateDir, backupsDir, string(cl.UID)), "nothing was fetched")
}

// restoreInPlace: the restore in place from the store brings back the data and the Secrets.
func (fx *objectStoreFixture) restoreInPlace(t *testing.T) {
	t.Helper()
	cs := fx.cs
	require.NoError(t, fx.bk.Restore(t.Context(), fx.cl, fx.snap.Name))
	back := fx.h.awaitOn(fx.be, fx.cl, fx.want, "Ready on the snapshot's data", func(s backend.State) bool { return complete(s) && s.Restored != nil })
	require.Empty(t, back.Restored.Failed)
	assert.Equal(t, fx.made.Endpoint, back.Endpoint)
	assert.True(t, configMapExists(t, cs, "before"))
	assert.False(t, configMapExists(t, cs, "after"), "written after the snapshot")
	sec, err := cs.CoreV1().Secrets("kept").Get(t.Context(), "before", metav1.GetOptions{})
	require.NoError(t, err, "the Secret reads: its encryption key came with the snapshot")
	assert.Equal(t, "before", string(sec.Data["v"]))
}

// fromStore asks for a new Cluster of namespace restored from the snapshot, the state folder
// holding none of it.
func (fx *objectStoreFixture) fromStore(t *testing.T, namespace string) (*clustersv1alpha1.Cluster, error) {
	require.NoError(t, os.RemoveAll(filepath.Join(fx.stateDir, backupsDir, string(fx.cl.UID))))
	c := newCluster("from-" + namespace)
	c.Namespace = namespace
	c.Annotations = map[string]string{backend.AnnotationRestoreFrom: fx.snap.Ref()}
	_, err := fx.be.Ensure(t.Context(), c, fx.want)
	return c, err
}

// otherNamespaceRefused: a Cluster of another namespace cannot be made from the snapshot.
func (fx *objectStoreFixture) otherNamespaceRefused(t *testing.T) {
	foreign, err := fx.fromStore(t, "team-b")
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	assert.Contains(t, err.Error(), "there is no snapshot", "as if it did not exist")
	assert.NoDirExists(t, fx.h.b.Dir(foreign.UID))
}

// sameNamespaceMade: a Cluster of the same namespace is made from the snapshot, with its data.
func (fx *objectStoreFixture) sameNamespaceMade(t *testing.T) {
	c, err := fx.fromStore(t, fx.cl.Namespace)
	require.NoError(t, err)
	s := fx.h.awaitOn(fx.be, c, fx.want, "Ready on the snapshot's data", complete)
	ac, err := fx.h.b.AdminConfig(t.Context(), c)
	require.NoError(t, err)
	ccs := kubernetes.NewForConfigOrDie(ac)
	assert.True(t, configMapExists(t, ccs, "before"))
	assert.NotEqual(t, fx.made.Endpoint, s.Endpoint)
}

// writeKept writes a ConfigMap and a Secret named name into namespace kept (made first).
func writeKept(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	ctx := t.Context()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	_, err = cs.CoreV1().ConfigMaps("kept").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().Secrets("kept").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string][]byte{"v": []byte(name)}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// assertStoredEncrypted checks snapshot snap in the bucket under base: its record is snap, its
// object holds no etcd database (the state folder's plaintext has bbolt's magic where the object
// has none), and decrypted with the Secret's key it has the SHA-256 recorded.
func assertStoredEncrypted(t *testing.T, c *minio.Client, bucket, base string, snap backend.Snapshot, stateDir string, secrets *s3Secrets) {
	t.Helper()
	read := func(key string) []byte {
		o, err := c.GetObject(t.Context(), bucket, key, minio.GetObjectOptions{})
		require.NoError(t, err)
		defer o.Close()
		data, err := io.ReadAll(o)
		require.NoError(t, err, key)
		return data
	}
	var rec backend.Snapshot
	require.NoError(t, json.Unmarshal(read(base+".json"), &rec))
	assert.Equal(t, snap, rec)
	sealed := read(base + ".db.enc")
	plain, err := os.ReadFile(filepath.Join(stateDir, backupsDir, string(snap.Cluster), snap.Name+snapshotSuffix))
	require.NoError(t, err)
	require.Equal(t, uint32(bboltMagic), binary.LittleEndian.Uint32(plain[16:20]), "the plaintext is an etcd database")
	assert.NotEqual(t, uint32(bboltMagic), binary.LittleEndian.Uint32(sealed[16:20]), "the object is not")
	assert.False(t, bytes.Contains(sealed, plain[:4096]), "no page of the database shows")
	key, err := objectstore.ParseKey(string(secrets.data["s3"][providersv1alpha1.ObjectStoreEncryptionKey]))
	require.NoError(t, err)
	r, err := objectstore.Open(bytes.NewReader(sealed), key)
	require.NoError(t, err)
	h := sha256.New()
	_, err = io.Copy(h, r)
	require.NoError(t, err)
	assert.Equal(t, snap.SHA256, hex.EncodeToString(h.Sum(nil)), "decrypted, it is the snapshot recorded")
	read(base + ".keys.enc") // its Secrets' keys went with it
}
