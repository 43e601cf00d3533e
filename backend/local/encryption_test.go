package local

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

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

// TestEncryptionAtRest: a Secret written through the API server is in etcd encrypted with the
// cluster's own key (no plain text of it there), the key files are the operator's only; a Secret
// in plain text (as a release before encryption left it) is read, and rewritten encrypted by a
// rotation, which puts a new key first and rewrites every Secret with it; a new Cluster made from
// a snapshot reads the snapshot's Secrets (it adopts the keys kept beside the snapshots).
func TestEncryptionAtRest(t *testing.T) {
	h := startBackendOptions(t, Options{StateDir: t.TempDir(), MaxClusters: 2, Logger: testenv.Logger(t), HealthInterval: time.Second})
	cl := newCluster("sealed")
	h.await(cl, "Ready", complete)
	admin, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	cs := kubernetes.NewForConfigOrDie(admin)
	const marker = "plain-text-marker-7f3a"
	_, err = cs.CoreV1().Secrets("default").Create(t.Context(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sealed"},
		StringData: map[string]string{"password": marker}}, metav1.CreateOptions{})
	require.NoError(t, err)
	s := h.await(cl, "every Secret written with the key", func(s backend.State) bool { return encStatus(s).Rewritten })
	first := encStatus(s).Key
	require.True(t, strings.HasPrefix(first, "key-"), first)
	raw := rawEtcd(t, h, cl.UID, "/registry/secrets/default/sealed")
	assert.True(t, strings.HasPrefix(string(raw), encryption.Prefix+first+":"), "encrypted with the cluster's key: %.40q", raw)
	assert.NotContains(t, string(raw), marker, "no plain text in etcd")
	assert.NotContains(t, string(raw), base64.StdEncoding.EncodeToString([]byte(marker)))
	dir := h.b.Dir(cl.UID)
	for _, f := range []string{encryption.StateFile, encryption.ConfigFile} {
		info, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "%s is the operator's only", f)
	}

	// A Secret in plain text, as a cluster made before encryption holds it: read through identity.
	legacy, err := json.Marshal(&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "legacy", Namespace: "default", UID: types.UID("0b7e2c4a-legacy"), CreationTimestamp: metav1.Now()},
		Data:       map[string][]byte{"token": []byte("legacy-" + marker)}})
	require.NoError(t, err)
	putRawEtcd(t, h, cl.UID, "/registry/secrets/default/legacy", legacy)
	got, err := cs.CoreV1().Secrets("default").Get(t.Context(), "legacy", metav1.GetOptions{})
	require.NoError(t, err, "a Secret written before encryption is read")
	assert.Equal(t, "legacy-"+marker, string(got.Data["token"]))

	// A snapshot, before the rotation: a Cluster made from it later reads its Secrets.
	snap, err := h.b.Snapshot(t.Context(), cl, 3)
	require.NoError(t, err)

	// Rotation: a new key writes, every Secret is rewritten with it (the plain one too).
	pids := h.b.PIDs(cl.UID)
	cl.Annotations = map[string]string{backend.AnnotationRotateEncryptionKey: "2026-11-26"}
	s = h.await(cl, "rotated and rewritten", func(s backend.State) bool {
		e := encStatus(s)
		return e.Key != first && e.Rewritten && s.Ready
	})
	second := encStatus(s).Key
	assert.Equal(t, 2, encStatus(s).Keys, "the old key stays, to read older snapshots")
	assert.NotEqual(t, pids[procAPIServer], h.b.PIDs(cl.UID)[procAPIServer], "the API server restarted with the new key")
	for _, name := range []string{"sealed", "legacy"} {
		raw := rawEtcd(t, h, cl.UID, "/registry/secrets/default/"+name)
		assert.True(t, strings.HasPrefix(string(raw), encryption.Prefix+second+":"), "%s rewritten with the new key: %.40q", name, raw)
		assert.NotContains(t, string(raw), marker)
	}
	got, err = cs.CoreV1().Secrets("default").Get(t.Context(), "sealed", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, marker, string(got.Data["password"]))
	again := h.await(cl, "asked again: nothing more", func(s backend.State) bool { return s.Ready })
	assert.Equal(t, second, encStatus(again).Key, "one rotation per request")

	// A new Cluster from the snapshot taken before the rotation: it reads the snapshot's Secrets.
	cp := newCluster("sealed-copy")
	cp.Annotations = map[string]string{backend.AnnotationRestoreFrom: snap.Ref()}
	cs2 := h.await(cp, "the copy is Ready and rewritten", func(s backend.State) bool { return complete(s) && s.Restored != nil && encStatus(s).Rewritten })
	assert.NotEqual(t, first, encStatus(cs2).Key, "the copy has a key of its own")
	cfg, err := h.b.AdminConfig(t.Context(), cp)
	require.NoError(t, err)
	got, err = kubernetes.NewForConfigOrDie(cfg).CoreV1().Secrets("default").Get(t.Context(), "sealed", metav1.GetOptions{})
	require.NoError(t, err, "the copy reads the snapshot's Secrets")
	assert.Equal(t, marker, string(got.Data["password"]))
	raw = rawEtcd(t, h, cp.UID, "/registry/secrets/default/sealed")
	assert.True(t, strings.HasPrefix(string(raw), encryption.Prefix+encStatus(cs2).Key+":"), "rewritten with the copy's key: %.40q", raw)
}
