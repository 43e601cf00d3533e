package hosted

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// keysIn reads the encryption keys of cl's control plane, and the checksum of its config.
func keysIn(t *testing.T, ns string) (encryption.State, string) {
	t.Helper()
	sec := get(t, &corev1.Secret{}, ns, SecretEncryption)
	var s encryption.State
	require.NoError(t, json.Unmarshal(sec.Data[encryption.StateFile], &s))
	cfg, err := s.Config()
	require.NoError(t, err)
	assert.Equal(t, string(cfg), string(sec.Data[encryption.ConfigFile]), "the config is made from the keys")
	return s, configSum(cfg)
}

// rolledOutSeen is rolledOutNow, then waits until the backend's cache holds the workloads as they
// are now: an Ensure right after reads them from there.
func (h *harness) rolledOutSeen(t *testing.T, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	rolledOutNow(t, cl)
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	ns := NamespaceFor(cl.UID)
	for _, obj := range []client.Object{&appsv1.StatefulSet{}, &appsv1.Deployment{}} {
		name := NameEtcd
		if _, ok := obj.(*appsv1.Deployment); ok {
			name = NameAPIServer
		}
		want := get(t, obj, ns, name).GetResourceVersion()
		require.Eventually(t, func() bool {
			return hst.cache.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj) == nil && obj.GetResourceVersion() == want
		}, 10*time.Second, 10*time.Millisecond, "the backend's cache sees %s/%s", ns, name)
	}
}

// encryptionOf is what the API server's pod template reads: its checksum annotation, whether it
// mounts the config and passes the flag.
func encryptionOf(t *testing.T, ns string) (sum string, mounted, flag bool) {
	t.Helper()
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	pod := dep.Spec.Template.Spec
	for _, v := range pod.Volumes {
		if v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(p corev1.VolumeProjection) bool {
			return p.Secret != nil && p.Secret.Name == SecretEncryption
		}) {
			mounted = true
		}
	}
	flag = slices.Contains(pod.InitContainers[0].Args, "--encryption-provider-config="+pkiMount+"/"+encryption.ConfigFile)
	return dep.Spec.Template.Annotations[AnnotationEncryption], mounted, flag
}

// encryptionCase is what the steps of TestEncryptionKeys share: the backend, the Cluster, its
// control plane's namespace and the keys it had once every Secret was rewritten with its first.
type encryptionCase struct {
	h    *harness
	cl   *clustersv1alpha1.Cluster
	ns   string
	keys encryption.State
}

// TestEncryptionKeys: a new control plane's API server encrypts Secrets with a key of its own
// from its start; one made by a release before encryption (no keys, API servers running) gets its
// key staged first (plain text writes, the key reads) and writing only once every API server reads
// with it; a rotation is staged the same way, once the last one is done; a snapshot keeps the
// keys beside it; keys that do not read, or are gone while the API servers encrypt with them,
// stop the backend and are left for a person.
func TestEncryptionKeys(t *testing.T) {
	cl := newCluster("encrypted")
	c := &encryptionCase{h: startBackend(t), cl: cl, ns: NamespaceFor(cl.UID)}
	c.newEncryptsFromStart(t)
	t.Run("an existing control plane is migrated in two rolls", c.migratedInTwoRolls)
	t.Run("rotation", c.rotation)
	t.Run("a snapshot keeps the keys beside it", c.snapshotKeepsKeys)
	t.Run("damaged keys are left as they are", c.damagedKeysLeft)
}

// newEncryptsFromStart: a new control plane's key writes from the start, its API server reads
// the config, and every Secret is rewritten with the key once, when it serves.
func (c *encryptionCase) newEncryptsFromStart(t *testing.T) {
	h, cl, ns := c.h, c.cl, c.ns
	h.ensure(t, cl)
	keys, _ := keysIn(t, ns)
	assert.False(t, keys.Staged, "no API server runs yet: the key writes from the start")
	h.etcdUp(t, cl)
	keys, sum := keysIn(t, ns)
	got, mounted, flag := encryptionOf(t, ns)
	assert.Equal(t, sum, got)
	assert.True(t, mounted && flag, "the API server reads the config: mounted %v, flag %v", mounted, flag)
	assert.False(t, keys.Done())
	h.rolledOutSeen(t, cl)
	st := h.ensure(t, cl)
	require.True(t, st.Ready)
	c.keys, _ = keysIn(t, ns)
	assert.Equal(t, int32(1), h.rewrites.Load(), "serving with the key: every Secret is rewritten with it")
	assert.True(t, c.keys.Done())
	assert.True(t, st.ProviderStatus.(providerStatus).Encryption.Rewritten)
	h.ensure(t, cl)
	assert.Equal(t, int32(1), h.rewrites.Load(), "once")
}

// migratedInTwoRolls: a control plane as a release before encryption left it (no keys, an API
// server without them) gets its key staged, then writing, then every Secret rewritten with it.
func (c *encryptionCase) migratedInTwoRolls(t *testing.T) {
	h := c.h
	old := newCluster("plain")
	h.ensure(t, old)
	h.etcdUp(t, old)
	ons := NamespaceFor(old.UID)
	// As a release before encryption left it: no keys, an API server without them.
	require.NoError(t, env.Client.Delete(t.Context(), get(t, &corev1.Secret{}, ons, SecretEncryption)))
	dep := get(t, &appsv1.Deployment{}, ons, NameAPIServer)
	delete(dep.Spec.Template.Annotations, AnnotationEncryption)
	dep.Annotations[AnnotationInputs] = "a release before encryption"
	require.NoError(t, env.Client.Update(t.Context(), dep))
	h.rolledOutSeen(t, old)

	st := h.ensure(t, old)
	staged, sum := keysIn(t, ons)
	assert.True(t, staged.Staged, "API servers run without the key: staged")
	assert.Empty(t, staged.Writer(), "plain text writes until every API server reads the key")
	assert.Equal(t, staged.Keys[0].Name, st.ProviderStatus.(providerStatus).Encryption.Staged)
	got, _, _ := encryptionOf(t, ons)
	assert.Equal(t, sum, got, "the API servers roll to read it")

	h.ensure(t, old)
	again, _ := keysIn(t, ons)
	assert.True(t, again.Staged, "the new API servers have not rolled out: still staged")
	h.rolledOutSeen(t, old)
	h.ensure(t, old)
	writing, sum := keysIn(t, ons)
	assert.False(t, writing.Staged)
	assert.Equal(t, staged.Keys[0].Name, writing.Writer(), "rolled out: the key writes")
	got, _, _ = encryptionOf(t, ons)
	assert.Equal(t, sum, got, "and the API servers roll to write with it")
	assert.False(t, writing.Done(), "every Secret is to rewrite once they did")
	before := h.rewrites.Load()
	h.ensure(t, old)
	assert.Equal(t, before, h.rewrites.Load(), "not before the API servers write with the key")

	h.rolledOutSeen(t, old)
	failed := errors.New("listing Secrets: the server is currently unable to handle the request")
	h.rewriteErr.Store(&failed)
	st = h.ensure(t, old)
	assert.Contains(t, st.ProviderStatus.(providerStatus).Encryption.Error, "rewriting the Secrets with encryption key "+writing.Writer())
	assert.LessOrEqual(t, st.RetryAfter, encryptionRetry, "tried again soon")
	assert.True(t, st.Ready, "the cluster serves meanwhile")
	h.rewriteErr.Store(nil)
	st = h.ensure(t, old)
	assert.Equal(t, before+1, h.rewrites.Load())
	assert.Empty(t, st.ProviderStatus.(providerStatus).Encryption.Error)
	done, _ := keysIn(t, ons)
	assert.True(t, done.Done())
}

// rotation: a new key is staged, then writes, then every Secret is rewritten with it; once per request.
func (c *encryptionCase) rotation(t *testing.T) {
	h, cl, ns := c.h, c.cl, c.ns
	cl.Annotations = map[string]string{backend.AnnotationRotateEncryptionKey: "2026-11-26"}
	before := h.rewrites.Load()
	h.ensure(t, cl)
	rotated, sum := keysIn(t, ns)
	require.Len(t, rotated.Keys, 2)
	assert.True(t, rotated.Staged)
	assert.Equal(t, c.keys.Keys[0].Name, rotated.Writer(), "the old key writes until every API server reads the new one")
	assert.Equal(t, c.keys.Keys[0], rotated.Keys[1], "the old key stays to read")
	got, _, _ := encryptionOf(t, ns)
	assert.Equal(t, sum, got)
	h.rolledOutSeen(t, cl)
	h.ensure(t, cl)
	rotated, _ = keysIn(t, ns)
	assert.False(t, rotated.Staged)
	assert.Equal(t, rotated.Keys[0].Name, rotated.Writer())
	assert.Equal(t, "2026-11-26", rotated.Rotation)
	assert.Equal(t, before, h.rewrites.Load())

	h.rolledOutSeen(t, cl)
	h.ensure(t, cl)
	kept, _ := keysIn(t, ns)
	assert.Equal(t, before+1, h.rewrites.Load(), "every Secret rewritten with the new key")
	assert.True(t, kept.Done())
	h.ensure(t, cl)
	kept, _ = keysIn(t, ns)
	assert.Equal(t, rotated.Keys, kept.Keys, "one rotation per request")
}

// snapshotKeepsKeys: a snapshot keeps the key in use beside it, wrapped.
func (c *encryptionCase) snapshotKeepsKeys(t *testing.T) {
	h, cl, ns := c.h, c.cl, c.ns
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	s := &Spec{Namespace: ns, Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, UID: cl.UID}}
	require.NoError(t, hst.createIfMissing(t.Context(), s.backupSpec().BackupNamespaceObject()))
	_, err = h.b.keepKeys(t.Context(), hst, s)
	require.NoError(t, err)
	now, _ := keysIn(t, ns)
	kept, err := h.b.readKept(t.Context(), hst, ns, cl.UID)
	require.NoError(t, err)
	require.True(t, kept.found)
	assert.Equal(t, []string{now.Writer()}, kept.Names(), "the key in use; the one before it no snapshot needs")
	assertNoKeyIn(t, get(t, &corev1.Secret{}, BackupNamespace, namesFor(ns).keys).Data, now.Keys)
}

// damagedKeysLeft: keys that do not read, or are gone while in use, stop the backend, left as they are.
func (c *encryptionCase) damagedKeysLeft(t *testing.T) {
	h, cl, ns := c.h, c.cl, c.ns
	sec := get(t, &corev1.Secret{}, ns, SecretEncryption)
	good := sec.Data
	sec.Data = map[string][]byte{encryption.StateFile: []byte("garbled")}
	require.NoError(t, env.Client.Update(t.Context(), sec))
	_, err := h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)
	assert.Equal(t, "garbled", string(get(t, &corev1.Secret{}, ns, SecretEncryption).Data[encryption.StateFile]))

	require.NoError(t, env.Client.Delete(t.Context(), sec))
	_, err = h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.Error(t, err, "gone while the API servers encrypt with it: no new key")
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)
	assert.Contains(t, err.Error(), BackupNamespace+"/keys-"+ns)
	err = env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: SecretEncryption}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "not made anew: %v", err)

	sec.ResourceVersion, sec.Data = "", good
	require.NoError(t, env.Client.Create(t.Context(), sec))
	h.ensure(t, cl)
}

// assertNoKeyIn checks that data (a Secret's) holds none of keys in any form.
func assertNoKeyIn(t *testing.T, data map[string][]byte, keys []encryption.Key) {
	t.Helper()
	for name, v := range data {
		for _, k := range keys {
			for _, form := range [][]byte{k.Secret, []byte(base64.StdEncoding.EncodeToString(k.Secret)), []byte(hex.EncodeToString(k.Secret))} {
				assert.False(t, bytes.Contains(v, form), "key %s is in %s", k.Name, name)
			}
		}
	}
}

// keptCase is what the steps of TestKeysKeptWrapped share: the backend, the operator's own
// namespace and the control plane's, the Cluster and one made from its first snapshot, its
// backup names, host and Spec, three keys, and that first snapshot.
type keptCase struct {
	h          *harness
	own, ns    string
	cl, copyOf *clustersv1alpha1.Cluster
	names      backupNames
	hst        *host
	s          *Spec
	k          [3]encryption.Key
	first      backend.Snapshot
}

// TestKeysKeptWrapped: the keys kept beside a control plane's snapshots are stored wrapped only,
// with a key in a Secret of the operator's own namespace; a plain copy of an earlier release is
// read and written wrapped; each snapshot records the keys it needs, and a key no snapshot needs
// and the control plane does not use is removed (none while a snapshot of an earlier release is
// listed); a restore reads the snapshot's keys; a wrapping key that does not read is refused and
// changes nothing; a deleted Cluster's keys go with its last snapshot.
func TestKeysKeptWrapped(t *testing.T) {
	c := startKept(t)
	earlier := c.leftByEarlierRelease(t)
	c.snapshotStartKeepsWrapped(t)
	c.unneededKeysGo(t, earlier)
	c.restoreReadsKeptKey(t)
	t.Run("a wrapping key that does not read is refused and changes nothing", c.garbledWrappingKeyRefused)
	t.Run("no wrapping key is made anew while copies need the old one", c.noNewWrappingKey)
	t.Run("a deleted Cluster's keys go with its last snapshot", c.deletedClusterKeysGo)
}

// startKept starts a backend and a control plane with a backup namespace, and makes three keys.
func startKept(t *testing.T) *keptCase {
	h := startBackend(t)
	c := &keptCase{h: h, own: h.b.opts.Namespace} // one for every test: BackupNamespace records the key its copies need
	h.pc.Spec.Hosted.StorageClassName = "standard"
	ctx := t.Context()
	c.cl = newCluster("kept")
	h.ensure(t, c.cl)
	c.ns = NamespaceFor(c.cl.UID)
	c.names = namesFor(c.ns)
	var err error
	c.hst, err = h.b.hostFor(ctx, nil)
	require.NoError(t, err)
	c.s = &Spec{Namespace: c.ns, Cluster: ClusterRef{Namespace: c.cl.Namespace, Name: c.cl.Name, UID: c.cl.UID}}
	require.NoError(t, c.hst.apply(ctx, c.s.BackupNamespaceObject()))
	for i := range c.k {
		c.k[i], err = encryption.NewKey(time.Now().Add(time.Duration(i) * time.Second))
		require.NoError(t, err)
	}
	return c
}

// setKeys sets the control plane's keys, as its reconciles would have.
func (c *keptCase) setKeys(t *testing.T, st encryption.State) {
	t.Helper()
	sec := get(t, &corev1.Secret{}, c.ns, SecretEncryption)
	data, err := keysData(st)
	require.NoError(t, err)
	sec.Data = data
	require.NoError(t, env.Client.Update(t.Context(), sec))
}

// keptNames are the names of the keys kept beside the Cluster's snapshots.
func (c *keptCase) keptNames(t *testing.T) []string {
	t.Helper()
	kept, err := c.h.b.readKept(t.Context(), c.hst, c.ns, c.cl.UID)
	require.NoError(t, err)
	require.True(t, kept.found)
	return kept.Names()
}

// taken is a snapshot of the Cluster called name, taken now.
func (c *keptCase) taken(name string) backend.Snapshot {
	return backend.Snapshot{Name: name, Cluster: c.cl.UID, Namespace: c.cl.Namespace, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Revision: 7, Keys: 3, Version: "1.37.1", SHA256: "ab"}
}

// leftByEarlierRelease sets the keys k1 (writing) and k0 as an earlier release left them: a snapshot
// (returned) listed without a record of the keys it needs, and the keys beside it in plain text.
func (c *keptCase) leftByEarlierRelease(t *testing.T) backend.Snapshot {
	k := c.k
	c.setKeys(t, encryption.State{Keys: []encryption.Key{k[1], k[0]}, Migrated: k[1].Name}) // k1 writes, every Secret rewritten
	earlier := c.taken("20261120T000000Z")
	require.NoError(t, updateCatalog(t.Context(), c.hst, c.s, earlier, nil))
	plain, err := json.Marshal(encryption.State{Keys: []encryption.Key{k[1], k[0]}})
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(t.Context(), &corev1.Secret{ObjectMeta: c.s.backupSpec().meta(c.names.keys, ""), Data: map[string][]byte{encryption.StateFile: plain}}))
	return earlier
}

// snapshotStartKeepsWrapped: a snapshot's start keeps the keys wrapped, with a key of the operator's namespace.
func (c *keptCase) snapshotStartKeepsWrapped(t *testing.T) {
	ctx, k := t.Context(), c.k
	_, err := c.h.b.Snapshot(ctx, c.cl, backend.KeepNewest(3))
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	kept := get(t, &corev1.Secret{}, BackupNamespace, c.names.keys)
	assert.Equal(t, []string{encryption.KeptFile}, slices.Collect(maps.Keys(kept.Data)), "the plain copy is gone")
	assertNoKeyIn(t, kept.Data, k[:])
	assert.ElementsMatch(t, []string{k[0].Name, k[1].Name}, c.keptNames(t), "read from the plain copy; the earlier snapshot may need any")
	wrapping := get(t, &corev1.Secret{}, c.own, KeyWrappingSecret)
	assert.Len(t, wrapping.Data[keyWrappingData], encryption.WrappingKeySize)
	assert.Equal(t, ManagedBy, wrapping.Labels[LabelManagedBy])
	assert.True(t, ptr.Deref(wrapping.Immutable, false), "never replaced")
	for _, where := range []string{BackupNamespace, c.ns} {
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: where, Name: KeyWrappingSecret}, &corev1.Secret{})
		assert.True(t, apierrors.IsNotFound(err), "never beside the snapshots or the control plane: %v", err)
	}
	assert.NotEmpty(t, get(t, &batchv1.Job{}, BackupNamespace, c.names.job).Annotations[AnnotationSnapshotKeys], "the Job carries what its start saw")
}

// unneededKeysGo: while the earlier snapshot is listed no key goes; once a Job removed it, a key
// no snapshot needs and the control plane does not use goes.
func (c *keptCase) unneededKeysGo(t *testing.T, earlier backend.Snapshot) {
	h, ctx, cl, k := c.h, t.Context(), c.cl, c.k
	c.first = c.taken("20261126T010000Z")
	h.endJob(t, c.names.job, batchv1.JobComplete, snapshotResultOf(t, c.first))
	_, err := h.b.Snapshot(ctx, cl, backend.KeepNewest(3))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{k[0].Name, k[1].Name}, c.keptNames(t), "the earlier snapshot is listed: nothing goes")

	// Rotated: k2 writes, every Secret rewritten with it. The next snapshot's Job removes the
	// earlier one (keep 2): k0, which no snapshot needs and the control plane does not use, goes;
	// k1 stays for the first snapshot.
	c.setKeys(t, encryption.State{Keys: []encryption.Key{k[2], k[1], k[0]}, Migrated: k[2].Name})
	forceGone(t, c.names.job)
	_, err = h.b.Snapshot(ctx, cl, backend.KeepNewest(2))
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	second := c.taken("20261126T020000Z")
	h.endJob(t, c.names.job, batchv1.JobComplete, snapshotResultOf(t, second, earlier.Name))
	_, err = h.b.Snapshot(ctx, cl, backend.KeepNewest(2))
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{k[1].Name, k[2].Name}, c.keptNames(t))
	assertNoKeyIn(t, get(t, &corev1.Secret{}, BackupNamespace, c.names.keys).Data, k[:])
}

// restoreReadsKeptKey: a new Cluster from the first snapshot reads with its key.
func (c *keptCase) restoreReadsKeptKey(t *testing.T) {
	c.first.Namespace = c.cl.Namespace
	c.copyOf = newCluster("kept-copy")
	c.copyOf.Annotations = map[string]string{backend.AnnotationRestoreFrom: c.first.Ref()}
	c.h.ensure(t, c.copyOf)
	adopted, _ := keysIn(t, NamespaceFor(c.copyOf.UID))
	assert.Contains(t, encryption.FromState(adopted).Names(), c.k[1].Name, "the snapshot's key is adopted")
}

// garbledWrappingKeyRefused: a wrapping key that does not read is refused and changes nothing;
// a restore does not go on without it.
func (c *keptCase) garbledWrappingKeyRefused(t *testing.T) {
	h, ctx, own, names := c.h, t.Context(), c.own, c.names
	good := get(t, &corev1.Secret{}, own, KeyWrappingSecret)
	require.NoError(t, env.Client.Delete(ctx, good))
	garbled := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: KeyWrappingSecret}, Data: map[string][]byte{keyWrappingData: []byte("garbled")}}
	require.NoError(t, env.Client.Create(ctx, garbled))
	before := get(t, &corev1.Secret{}, BackupNamespace, names.keys).ResourceVersion
	forceGone(t, names.job)
	_, err := h.b.Snapshot(ctx, c.cl, backend.KeepNewest(2))
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)
	assert.Contains(t, err.Error(), own+"/"+KeyWrappingSecret)
	assert.Contains(t, err.Error(), "never replaced")
	assert.Equal(t, before, get(t, &corev1.Secret{}, BackupNamespace, names.keys).ResourceVersion, "the kept keys unchanged")
	assert.Equal(t, "garbled", string(get(t, &corev1.Secret{}, own, KeyWrappingSecret).Data[keyWrappingData]), "left as it is")
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: names.job}, &batchv1.Job{})
	assert.True(t, apierrors.IsNotFound(err), "no snapshot started: %v", err)

	again := newCluster("kept-copy-2")
	again.Annotations = map[string]string{backend.AnnotationRestoreFrom: c.first.Ref()}
	_, err = h.b.Ensure(ctx, again, backend.Want{Version: "1.37.1"})
	require.Error(t, err, "a restore does not go on without the snapshot's keys")
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)

	require.NoError(t, env.Client.Delete(ctx, garbled))
	good.ResourceVersion, good.UID = "", ""
	require.NoError(t, env.Client.Create(ctx, good))
	assert.ElementsMatch(t, []string{c.k[1].Name, c.k[2].Name}, c.keptNames(t), "read again with the key put back")
}

// noNewWrappingKey: no wrapping key is made anew while copies need the old one, nothing wrapped with another.
func (c *keptCase) noNewWrappingKey(t *testing.T) {
	h, ctx, own, copyOf := c.h, t.Context(), c.own, c.copyOf
	assert.NotEmpty(t, get(t, &corev1.Namespace{}, "", BackupNamespace).Annotations[AnnotationKeyWrapping], "the copies' key is recorded")
	good := get(t, &corev1.Secret{}, own, KeyWrappingSecret)
	require.NoError(t, env.Client.Delete(ctx, good))
	// The copy's Cluster has none of its own yet: only the record keeps a new key from being made.
	_, err := h.b.Snapshot(ctx, copyOf, backend.KeepNewest(2))
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)
	assert.Contains(t, err.Error(), "is missing")
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: own, Name: KeyWrappingSecret}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "not made anew: %v", err)

	other, err := encryption.GenerateWrappingKey()
	require.NoError(t, err)
	replaced := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: KeyWrappingSecret}, Data: map[string][]byte{keyWrappingData: other}}
	require.NoError(t, env.Client.Create(ctx, replaced))
	_, err = h.b.Snapshot(ctx, copyOf, backend.KeepNewest(2))
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)
	assert.Contains(t, err.Error(), "put back the Secret with key")
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: namesFor(NamespaceFor(copyOf.UID)).keys}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "nothing wrapped with another key: %v", err)

	require.NoError(t, env.Client.Delete(ctx, replaced))
	good.ResourceVersion, good.UID = "", ""
	require.NoError(t, env.Client.Create(ctx, good))
}

// deletedClusterKeysGo: a Cluster whose namespace is gone (envtest deletes none: one whose
// namespace never was) keeps the keys its snapshots need; they go with its last snapshot.
func (c *keptCase) deletedClusterKeysGo(t *testing.T) {
	h, ctx, hst, k := c.h, t.Context(), c.hst, c.k
	ghost := newCluster("kept-ghost")
	gs := &Spec{Namespace: NamespaceFor(ghost.UID), Cluster: ClusterRef{Namespace: ghost.Namespace, Name: ghost.Name, UID: ghost.UID}}
	snap := backend.Snapshot{Name: "20261126T030000Z", Cluster: ghost.UID, Namespace: ghost.Namespace, Taken: time.Now().UTC().Truncate(time.Second), Version: "1.37.1"}
	require.NoError(t, updateCatalog(ctx, hst, gs, snap, nil))
	k2 := encryption.Kept{Keys: []encryption.Key{k[0], k[1]}, Needs: map[string][]string{snap.Name: {k[0].Name}}}
	require.NoError(t, h.b.writeKept(ctx, hst, gs, keptCopy{Kept: k2}))
	gone, err := h.b.Delete(ctx, ghost)
	require.NoError(t, err)
	require.True(t, gone)
	left, err := h.b.readKept(ctx, hst, gs.Namespace, ghost.UID)
	require.NoError(t, err)
	assert.Equal(t, []string{k[0].Name}, left.Names(), "what its snapshot needs stays")

	require.NoError(t, env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: namesFor(gs.Namespace).catalog}}))
	gone, err = h.b.Delete(ctx, ghost)
	require.NoError(t, err)
	require.True(t, gone)
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: namesFor(gs.Namespace).keys}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "gone with the last snapshot: %v", err)
}
