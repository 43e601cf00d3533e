package hosted

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// TestEncryptionKeys: a new control plane's API server encrypts Secrets with a key of its own
// from its start; one made by a release before encryption (no keys, API servers running) gets its
// key staged first (plain text writes, the key reads) and writing only once every API server reads
// with it; a rotation is staged the same way, once the last one is done; a snapshot keeps the
// keys beside it; keys that do not read, or are gone while the API servers encrypt with them,
// stop the backend and are left for a person.
func TestEncryptionKeys(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("encrypted")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
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
	keys, _ = keysIn(t, ns)
	assert.Equal(t, int32(1), h.rewrites.Load(), "serving with the key: every Secret is rewritten with it")
	assert.True(t, keys.Done())
	assert.True(t, st.ProviderStatus.(providerStatus).Encryption.Rewritten)
	h.ensure(t, cl)
	assert.Equal(t, int32(1), h.rewrites.Load(), "once")

	t.Run("an existing control plane is migrated in two rolls", func(t *testing.T) {
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
	})

	t.Run("rotation", func(t *testing.T) {
		cl.Annotations = map[string]string{backend.AnnotationRotateEncryptionKey: "2026-11-26"}
		before := h.rewrites.Load()
		h.ensure(t, cl)
		rotated, sum := keysIn(t, ns)
		require.Len(t, rotated.Keys, 2)
		assert.True(t, rotated.Staged)
		assert.Equal(t, keys.Keys[0].Name, rotated.Writer(), "the old key writes until every API server reads the new one")
		assert.Equal(t, keys.Keys[0], rotated.Keys[1], "the old key stays to read")
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
	})

	t.Run("a snapshot keeps the keys beside it", func(t *testing.T) {
		hst, err := h.b.hostFor(t.Context(), nil)
		require.NoError(t, err)
		s := &Spec{Namespace: ns, Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, UID: cl.UID}}
		require.NoError(t, hst.createIfMissing(t.Context(), s.backupSpec().BackupNamespaceObject()))
		require.NoError(t, keepKeys(t.Context(), hst, s))
		now, _ := keysIn(t, ns)
		kept, found, err := readKeys(t.Context(), env.Client, BackupNamespace, namesFor(ns).keys)
		require.NoError(t, err)
		require.True(t, found)
		assert.Equal(t, now.Keys, kept.Keys)
	})

	t.Run("damaged keys are left as they are", func(t *testing.T) {
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
	})
}
