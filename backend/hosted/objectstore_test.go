package hosted

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
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

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/objectstore"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestSnapshotObjectStore: with spec.backup.objectStore, the snapshot Job of a hosted control
// plane carries the store's flags and mounts the store's credentials, copied from the Secret of
// the operator's namespace into the Job's own Secret in BackupNamespace (owned by the Job); a
// NetworkPolicy lets the Cluster's snapshot Jobs out to the store's port; and Snapshots lists
// the snapshots in the store (a real S3 server, SeaweedFS) with those of the claim's ConfigMap.
func TestSnapshotObjectStore(t *testing.T) {
	srv, bucket := testenv.S3(t)
	h := startBackend(t)
	ctx := t.Context()
	raw := make([]byte, objectstore.KeySize)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	encKey := base64.StdEncoding.EncodeToString(raw)
	creds := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: h.b.opts.Namespace, Name: "s3-creds"}, Data: map[string][]byte{
		providersv1alpha1.ObjectStoreAccessKeyID: []byte(srv.AccessKeyID), providersv1alpha1.ObjectStoreSecretAccessKey: []byte(srv.SecretAccessKey),
		providersv1alpha1.ObjectStoreEncryptionKey: []byte(encKey)}}
	require.NoError(t, env.Client.Create(ctx, creds))
	t.Cleanup(func() { _ = env.Client.Delete(ctx, creds) })
	h.pc.Spec.Hosted.StorageClassName = "standard"
	store := &providersv1alpha1.BackupObjectStore{Endpoint: "http://" + srv.Endpoint, Bucket: bucket, Prefix: "hosted", Insecure: true, PathStyle: true,
		CredentialsSecretRef: providersv1alpha1.ObjectStoreSecretRef{Name: creds.Name}}
	h.pc.Spec.Backup = &providersv1alpha1.BackupPolicy{ObjectStore: store}
	cl := newCluster("snap-store")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	names := namesFor(ns)
	bound := h.b.ForProfile(h.pc).(*Bound)

	_, err = bound.Snapshot(ctx, cl, backend.KeepNewest(3))
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	job := get(t, &batchv1.Job{}, BackupNamespace, names.job)
	ctr := job.Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"--store-endpoint=http://" + srv.Endpoint, "--store-bucket=" + bucket, "--store-prefix=hosted", "--store-insecure",
		"--store-path-style", "--store-credentials=" + storeMount, "--namespace=" + cl.Namespace, "--keys-file=" + storeMount + "/" + storeKeysFile} {
		assert.Contains(t, ctr.Args, arg)
	}
	assert.Contains(t, ctr.VolumeMounts, corev1.VolumeMount{Name: "store", MountPath: storeMount, ReadOnly: true})
	vol := job.Spec.Template.Spec.Volumes[slices.IndexFunc(job.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "store" })]
	require.NotNil(t, vol.Secret)
	assert.Equal(t, names.job, vol.Secret.SecretName, "the Job's own Secret")
	pki := job.Spec.Template.Spec.Volumes[slices.IndexFunc(job.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == "pki" })]
	assert.Len(t, pki.Secret.Items, 3, "the certificate's folder shows the certificate only")

	sec := get(t, &corev1.Secret{}, BackupNamespace, names.job)
	for k, v := range creds.Data {
		assert.Equal(t, v, sec.Data[k], "%s copied into the Job's Secret", k)
	}
	require.Len(t, sec.OwnerReferences, 1)
	assert.Equal(t, job.UID, sec.OwnerReferences[0].UID, "the copy goes with its Job")
	assert.NotContains(t, job.Spec.Template.Spec.Containers[0].Args, encKey, "no credential in the Job's spec")

	np := get(t, &networkingv1.NetworkPolicy{}, BackupNamespace, storePolicyName(ns))
	assert.True(t, selects(t, &np.Spec.PodSelector, job.Spec.Template.Labels), "the store's NetworkPolicy applies to the snapshot Job's pod")
	require.Len(t, np.Spec.Egress, 1)
	assert.Equal(t, int32(must(t, srv.Endpoint)), np.Spec.Egress[0].Ports[0].Port.IntVal, "out to the store's port")
	assert.Empty(t, np.Spec.Egress[0].To, "to anywhere: a policy cannot name a host")

	// One snapshot in the store only (as a Job that uploaded it, its claim since lost), one on
	// the claim (the Job harvested): Snapshots lists both.
	cat, err := h.b.catalog(ctx, store)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "db")
	content := []byte("a snapshot's bytes")
	require.NoError(t, os.WriteFile(file, content, 0o600))
	sum := sha256.Sum256(content)
	inStore := backend.Snapshot{Name: "20261126T010000Z", Cluster: cl.UID, Namespace: cl.Namespace, Taken: time.Now().Add(-time.Hour).UTC().Truncate(time.Second),
		Size: int64(len(content)), Version: "1.37.1", SHA256: hex.EncodeToString(sum[:])}
	require.NoError(t, cat.Upload(ctx, inStore, file, nil))
	onClaim := backend.Snapshot{Name: "20261126T020000Z", Cluster: cl.UID, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Version: "1.37.1", SHA256: "ab"}
	h.endJob(t, names.job, batchv1.JobComplete, snapshotResultOf(t, onClaim))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := bound.Snapshot(ctx, cl, backend.KeepNewest(3))
		if assert.NoError(c, err) {
			assert.Equal(c, onClaim.Name, got.Name)
		}
	}, 10*time.Second, 50*time.Millisecond)
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
}

// must is the port of host:port.
func must(t *testing.T, hostport string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}
