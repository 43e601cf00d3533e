package hosted

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
	"github.com/openmcp-local/cluster-provider/backend/objectstore"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// storeCase is a backend whose ProviderConfig (storage class "standard") keeps snapshots in a new
// bucket of the package's S3 server (SeaweedFS), with the credentials Secret in the operator's
// namespace.
type storeCase struct {
	h      *harness
	srv    *testenv.S3Server
	bucket string
	store  *providersv1alpha1.BackupObjectStore
	creds  *corev1.Secret
}

func startWithStore(t *testing.T) *storeCase {
	srv, bucket := testenv.S3(t)
	h := startBackend(t)
	raw := make([]byte, objectstore.KeySize)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.b.opts.Namespace, Name: "s3-creds-" + bucket}, Data: map[string][]byte{
		providersv1alpha1.ObjectStoreAccessKeyID: []byte(srv.AccessKeyID), providersv1alpha1.ObjectStoreSecretAccessKey: []byte(srv.SecretAccessKey),
		providersv1alpha1.ObjectStoreEncryptionKey: []byte(base64.StdEncoding.EncodeToString(raw))}}
	require.NoError(t, env.Client.Create(t.Context(), creds))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), creds) })
	h.pc.Spec.Hosted.StorageClassName = "standard"
	store := &providersv1alpha1.BackupObjectStore{Endpoint: "http://" + srv.Endpoint, Bucket: bucket, Prefix: "hosted", Insecure: true, PathStyle: true,
		CredentialsSecretRef: providersv1alpha1.ObjectStoreSecretRef{Name: creds.Name}}
	h.pc.Spec.Backup = &providersv1alpha1.BackupPolicy{ObjectStore: store}
	return &storeCase{h: h, srv: srv, bucket: bucket, store: store, creds: creds}
}

// uploaded is a snapshot of cl put into the store as a snapshot Job would, taken ago, with the
// encryption keys keys (nil: none).
func (c *storeCase) uploaded(t *testing.T, cl *clustersv1alpha1.Cluster, name string, ago time.Duration, keys []byte) backend.Snapshot {
	cat, err := c.h.b.catalog(t.Context(), c.store)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "db")
	content := []byte("a snapshot's bytes " + name)
	require.NoError(t, os.WriteFile(file, content, 0o600))
	sum := sha256.Sum256(content)
	s := backend.Snapshot{Name: name, Cluster: cl.UID, Namespace: cl.Namespace, Taken: time.Now().Add(-ago).UTC().Truncate(time.Second),
		Size: int64(len(content)), Version: "1.37.1", SHA256: hex.EncodeToString(sum[:])}
	require.NoError(t, cat.Upload(t.Context(), s, file, keys))
	return s
}

// TestSnapshotObjectStore: with spec.backup.objectStore, the snapshot Job of a hosted control
// plane carries the store's flags and mounts the store's credentials, copied from the Secret of
// the operator's namespace into the Job's own Secret in BackupNamespace (owned by the Job); a
// NetworkPolicy lets the Cluster's snapshot Jobs out to the store's port; and Snapshots lists
// the snapshots in the store with those of the claim's ConfigMap.
func TestSnapshotObjectStore(t *testing.T) {
	c := startWithStore(t)
	h, srv, bucket, ctx := c.h, c.srv, c.bucket, t.Context()
	cl := newCluster("snap-store")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	names := namesFor(ns)
	bound := h.b.ForProfile(h.pc).(*Bound)

	_, err := bound.Snapshot(ctx, cl, backend.KeepNewest(3))
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	job := get(t, &batchv1.Job{}, BackupNamespace, names.job)
	ctr := job.Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"--store-endpoint=http://" + srv.Endpoint, "--store-bucket=" + bucket, "--store-prefix=hosted", "--store-insecure",
		"--store-path-style", "--store-credentials=" + storeMount, "--namespace=" + cl.Namespace, "--keys-file=" + storeMount + "/" + storeKeysFile} {
		assert.Contains(t, ctr.Args, arg)
	}
	assert.Contains(t, ctr.VolumeMounts, corev1.VolumeMount{Name: "store", MountPath: storeMount, ReadOnly: true})
	vols := job.Spec.Template.Spec.Volumes
	vol := vols[slices.IndexFunc(vols, func(v corev1.Volume) bool { return v.Name == "store" })]
	require.NotNil(t, vol.Secret)
	assert.Equal(t, names.job, vol.Secret.SecretName, "the Job's own Secret")
	pki := vols[slices.IndexFunc(vols, func(v corev1.Volume) bool { return v.Name == "pki" })]
	assert.Len(t, pki.Secret.Items, 3, "the certificate's folder shows the certificate only")

	sec := get(t, &corev1.Secret{}, BackupNamespace, names.job)
	for k, v := range c.creds.Data {
		assert.Equal(t, v, sec.Data[k], "%s copied into the Job's Secret", k)
		assert.NotContains(t, ctr.Args, string(v), "no credential in the Job's spec")
	}
	require.Len(t, sec.OwnerReferences, 1)
	assert.Equal(t, job.UID, sec.OwnerReferences[0].UID, "the copy goes with its Job")

	np := get(t, &networkingv1.NetworkPolicy{}, BackupNamespace, storePolicyName(ns))
	assert.True(t, selects(t, &np.Spec.PodSelector, job.Spec.Template.Labels), "the store's NetworkPolicy applies to the snapshot Job's pod")
	require.Len(t, np.Spec.Egress, 1)
	assert.Equal(t, int32(portOf(t, srv.Endpoint)), np.Spec.Egress[0].Ports[0].Port.IntVal, "out to the store's port")
	assert.Empty(t, np.Spec.Egress[0].To, "to anywhere: a policy cannot name a host")

	// One snapshot in the store only (as a Job that uploaded it, its claim since lost), one on
	// the claim (the Job harvested): Snapshots lists both.
	inStore := c.uploaded(t, cl, "20261126T010000Z", time.Hour, nil)
	onClaim := backend.Snapshot{Name: "20261126T020000Z", Cluster: cl.UID, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Version: "1.37.1", SHA256: "ab"}
	h.endJob(t, names.job, batchv1.JobComplete, snapshotResultOf(t, onClaim))
	got, err := bound.Snapshot(ctx, cl, backend.KeepNewest(3))
	require.NoError(t, err)
	assert.Equal(t, onClaim.Name, got.Name)
	list, err := bound.Snapshots(ctx, cl)
	require.NoError(t, err)
	var listed []string
	for _, s := range list {
		listed = append(listed, s.Name)
	}
	assert.Equal(t, []string{onClaim.Name, inStore.Name}, listed, "the claim's and the store's, newest first")
	plain, err := h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Len(t, plain, 1, "without the store, the claim's only")

	// A Job that took its snapshot and then failed to upload it: listed (it is on the claim), and
	// BackedUp says the store failed.
	forceGone(t, names.job)
	_, err = bound.Snapshot(ctx, cl, backend.KeepNewest(3))
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	third := backend.Snapshot{Name: "20261126T030000Z", Cluster: cl.UID, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Version: "1.37.1", SHA256: "cd"}
	res, err := json.Marshal(snapshotResult{Snapshot: &third, Error: "snapshot 20261126T030000Z was taken and kept on the claim, but not uploaded to the object store: the store refused the credentials"})
	require.NoError(t, err)
	h.endJob(t, names.job, batchv1.JobFailed, string(res))
	got, err = bound.Snapshot(ctx, cl, backend.KeepNewest(3))
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonBackupUnavailable), "%v", err)
	assert.Contains(t, err.Error(), "refused the credentials")
	assert.Equal(t, third.Name, got.Name)
	plain, err = h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, third.Name, plain[0].Name, "on the claim, so listed")
}

// TestRestoreFromObjectStore: a snapshot only in the store (the claim lost with its node) is
// found by the bound backend's CheckRestore (not without the store), and its restore starts a
// serve that fetches it from the store onto an emptyDir, with the store's flags, the credentials
// copied into its own Secret beside the token, and the store's NetworkPolicy; once the claim is
// there and lists it, the claim serves it.
func TestRestoreFromObjectStore(t *testing.T) {
	c := startWithStore(t)
	h, srv, ctx := c.h, c.srv, t.Context()
	cl := newCluster("restore-store")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	bound := h.b.ForProfile(h.pc).(*Bound)
	// The keys its Secrets were written with, uploaded with it; keys-hcp-… has none (lost).
	old, err := encryption.New(time.Now().Add(-time.Hour))
	require.NoError(t, err)
	keys, err := json.Marshal(encryption.FromState(old))
	require.NoError(t, err)
	snap := c.uploaded(t, cl, "20261126T010000Z", time.Hour, keys)

	_, err = h.b.CheckRestore(ctx, cl, snap.Name)
	require.Error(t, err, "without the store, the claim's list lacks it")
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	got, err := bound.CheckRestore(ctx, cl, snap.Name)
	require.NoError(t, err)
	assert.Equal(t, snap.SHA256, got.SHA256)

	require.NoError(t, bound.Restore(ctx, cl, snap.Name))
	rec := record(t, cl)
	require.NotNil(t, rec.Restore)
	assert.True(t, rec.Restore.FromStore)
	h.ensure(t, cl)
	job := get(t, &batchv1.Job{}, BackupNamespace, serveName(ns))
	ctr := job.Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"--name=" + snap.Name, "--store-endpoint=http://" + srv.Endpoint, "--namespace=" + cl.Namespace, "--store-credentials=" + storeMount} {
		assert.Contains(t, ctr.Args, arg)
	}
	vols := job.Spec.Template.Spec.Volumes
	snapVol := vols[slices.IndexFunc(vols, func(v corev1.Volume) bool { return v.Name == "snapshots" })]
	assert.NotNil(t, snapVol.EmptyDir, "fetched onto an emptyDir, not the claim")
	assert.Nil(t, snapVol.PersistentVolumeClaim)
	sec := get(t, &corev1.Secret{}, BackupNamespace, serveName(ns))
	assert.Len(t, sec.Data["token"], 64)
	assert.Equal(t, []byte(srv.SecretAccessKey), sec.Data[providersv1alpha1.ObjectStoreSecretAccessKey])
	np := get(t, &networkingv1.NetworkPolicy{}, BackupNamespace, storePolicyName(ns))
	assert.True(t, selects(t, &np.Spec.PodSelector, job.Spec.Template.Labels), "the serve reaches the store")
	st, found, err := readKeys(ctx, env.Client, ns, SecretEncryption)
	require.NoError(t, err)
	require.True(t, found)
	assert.True(t, slices.ContainsFunc(st.Keys, func(k encryption.Key) bool { return k.Name == old.Keys[0].Name }), "the API servers read the restored Secrets with the keys fetched from the store")

	// Listed on the claim but no claim (lost and deleted): from the store; the claim there: from it.
	hst, err := h.b.hostFor(ctx, nil)
	require.NoError(t, err)
	s := &Spec{Namespace: ns, Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, UID: cl.UID}, StorageClassName: "standard"}
	require.NoError(t, updateCatalog(ctx, hst, s, snap, nil))
	_, fromStore, err := h.b.findSnapshot(ctx, hst, cl.UID, snap.Name, cl, c.store)
	require.NoError(t, err)
	assert.True(t, fromStore, "listed, but no claim: from the store")
	require.NoError(t, hst.createIfMissing(ctx, s.backupSpec().SnapshotClaim(ns)))
	_, fromStore, err = h.b.findSnapshot(ctx, hst, cl.UID, snap.Name, cl, c.store)
	require.NoError(t, err)
	assert.False(t, fromStore, "on the claim: from the claim")
}

// portOf is the port of host:port.
func portOf(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}

// TestStorePort: the store's NetworkPolicy opens the endpoint's port, else the scheme's.
func TestStorePort(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		insecure bool
		want     int32
	}{
		{"s3.eu-central-1.amazonaws.com", false, 443},
		{"minio.example.com:9000", false, 9000},
		{"https://minio.example.com:9443", false, 9443},
		{"https://minio.example.com", false, 443},
		{"http://127.0.0.1:8333", true, 8333},
		{"http://seaweed.example.com", true, 80},
		{"10.0.0.5:7480", false, 7480},
		{"[2001:db8::1]:9000", false, 9000},
	} {
		t.Run(tc.endpoint, func(t *testing.T) {
			assert.Equal(t, tc.want, storePort(&providersv1alpha1.BackupObjectStore{Endpoint: tc.endpoint, Insecure: tc.insecure}))
		})
	}
}
