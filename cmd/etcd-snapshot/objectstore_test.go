package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/backend/objectstore"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopS3()
	os.Exit(code)
}

// credentialsDir writes the object store's credentials as the mounted Secret has them, with a
// fresh encryption key, and returns the folder and the key.
func credentialsDir(t *testing.T, srv *testenv.S3Server) (string, string) {
	raw := make([]byte, objectstore.KeySize)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	key := base64.StdEncoding.EncodeToString(raw)
	dir := t.TempDir()
	for name, v := range map[string]string{"accessKeyID": srv.AccessKeyID, "secretAccessKey": srv.SecretAccessKey, "encryptionKey": key} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(v+"\n"), 0o600))
	}
	return dir, key
}

func readResult(t *testing.T, file string) Result {
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var r Result
	require.NoError(t, json.Unmarshal(data, &r), "%s", data)
	return r
}

// storeEnv starts what a save to the object store needs: one etcd member (its client URL is
// returned), the envtest assets' etcdctl and etcdutl as the tools, and a new bucket of the
// package's S3 server.
func storeEnv(t *testing.T) (assets, endpoint string, srv *testenv.S3Server, bucket string) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		testenv.MissingTool(t, "the envtest assets (etcd, etcdctl, etcdutl: make envtest)", err)
	}
	srv, bucket = testenv.S3(t)
	t.Setenv("ETCD_TOOLS", assets)
	return assets, etcd(t, assets), srv, bucket
}

// writeKeys writes the encryption keys a save uploads with its snapshot, and returns the file and
// what it holds.
func writeKeys(t *testing.T) (string, []byte) {
	file := filepath.Join(t.TempDir(), "keys.json")
	keys := []byte(`{"keys":[{"name":"k1"}]}`)
	require.NoError(t, os.WriteFile(file, keys, 0o600))
	return file, keys
}

// objectKeys lists the keys of every object in bucket.
func objectKeys(t *testing.T, srv *testenv.S3Server, bucket string) []string {
	var out []string
	for o := range srv.Client().ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, o.Err)
		out = append(out, o.Key)
	}
	return out
}

// TestSaveServeObjectStore: with the object store's flags, save uploads the snapshot it took to a
// real S3 server (SeaweedFS), encrypted (the object is not the snapshot's plaintext), with its
// record (listed by the store's catalog, in the Cluster's namespace) and its encryption keys, and
// prunes the store with the retention; serve of a snapshot its folder lacks (a lost claim) fetches
// it from the store, checks it and serves it, and restore makes an etcd data folder of it. With
// another encryption key, serve refuses the snapshot.
func TestSaveServeObjectStore(t *testing.T) {
	assets, endpoint, srv, bucket := storeEnv(t)
	ctx := context.Background()
	const marker = "a value only the snapshot holds 7f3a9c"
	out, err := exec.Command(filepath.Join(assets, "etcdctl"), "--endpoints="+endpoint, "put", "/registry/marker", marker).CombinedOutput()
	require.NoError(t, err, "%s", out)

	creds, _ := credentialsDir(t, srv)
	storeArgs := []string{"--store-endpoint=http://" + srv.Endpoint, "--store-bucket=" + bucket, "--store-prefix=team/prod",
		"--store-insecure", "--store-path-style", "--store-credentials=" + creds, "--namespace=project-a"}
	keysFile, keys := writeKeys(t)
	const uid = "4c1d2e3f-9f1d-4e55-8a3b-1c2d3e4f5a6b"
	dir := t.TempDir()
	var results []Result
	for range 2 {
		file := filepath.Join(t.TempDir(), "result")
		args := append([]string{"--dir=" + dir, "--cluster=" + uid, "--version=1.37.1", "--keep=1", "--result=" + file, "--keys-file=" + keysFile}, storeArgs...)
		require.NoError(t, save(ctx, append(args, "--", "--endpoints="+endpoint)))
		r := readResult(t, file)
		require.NotNil(t, r.Snapshot)
		assert.True(t, r.Uploaded)
		results = append(results, r)
	}
	snap := *results[1].Snapshot
	assert.Equal(t, []string{results[0].Snapshot.Name}, results[1].RemovedFromStore, "--keep 1 prunes the store too")

	// The store holds the newest only, encrypted, under <prefix>/<namespace>/<uid>/.
	base := "team/prod/project-a/" + uid + "/" + snap.Name
	assert.ElementsMatch(t, []string{base + ".db.enc", base + ".keys.enc", base + ".json"}, objectKeys(t, srv, bucket))
	obj, err := srv.Client().GetObject(ctx, bucket, base+".db.enc", minio.GetObjectOptions{})
	require.NoError(t, err)
	sealed, err := io.ReadAll(obj)
	require.NoError(t, err)
	plain, err := os.ReadFile(store(dir).File(snap.Cluster, snap.Name))
	require.NoError(t, err)
	require.Contains(t, string(plain), marker, "the snapshot's plaintext holds the value")
	assert.NotContains(t, string(sealed), marker, "the object is encrypted")
	assert.True(t, bytes.HasPrefix(sealed, []byte("age-encryption.org/")), "sealed with age")

	var sf storeFlags
	sf = storeFlags{endpoint: "http://" + srv.Endpoint, bucket: bucket, prefix: "team/prod", insecure: true, pathStyle: true, credentials: creds, namespace: "project-a"}
	cat, err := sf.catalog()
	require.NoError(t, err)
	listed, err := cat.List(ctx, "project-a", types.UID(uid))
	require.NoError(t, err)
	require.Len(t, listed, 1)
	assert.Equal(t, snap.Name, listed[0].Name)
	assert.Equal(t, snap.SHA256, listed[0].SHA256)
	assert.Equal(t, "project-a", listed[0].Namespace)
	gotKeys, err := cat.Download(ctx, listed[0], filepath.Join(t.TempDir(), "copy"))
	require.NoError(t, err)
	assert.JSONEq(t, string(keys), string(gotKeys), "the keys went with the snapshot")

	// serve on an empty folder (the claim lost) fetches the snapshot from the store.
	ca, err := certs.NewCA("test")
	require.NoError(t, err)
	cert, key, err := ca.Issue(certs.Leaf{CommonName: "serve", Hosts: []string{"127.0.0.1"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err)
	tlsDir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(tlsDir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	certFile, keyFile, caFile, tokenFile := write("tls.crt", cert), write("tls.key", key), write("ca.crt", ca.CertPEM), write("token", []byte("s3cret"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	empty := t.TempDir()
	serveResult := filepath.Join(tlsDir, "serve-result")
	serveArgs := append([]string{"--dir=" + empty, "--cluster=" + uid, "--name=" + snap.Name, "--listen=" + addr,
		"--token-file=" + tokenFile, "--tls-cert=" + certFile, "--tls-key=" + keyFile, "--timeout=2m", "--result=" + serveResult}, storeArgs...)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, serveArgs) }()
	data := filepath.Join(t.TempDir(), "restored")
	require.NoError(t, restore(ctx, []string{"--url=https://" + addr + "/snapshot", "--token-file=" + tokenFile, "--ca=" + caFile,
		"--sha256=" + snap.SHA256, "--data-dir=" + data, "--name=default", "--initial-cluster=default=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380"}))
	require.NoError(t, <-served)
	r := readResult(t, serveResult)
	assert.True(t, r.FromStore, "serve says it fetched the snapshot from the store")
	require.NotNil(t, r.Snapshot)
	assert.Equal(t, snap.SHA256, r.Snapshot.SHA256)
	_, err = os.Stat(filepath.Join(data, "member"))
	assert.NoError(t, err, "restore made an etcd data folder")

	// Another encryption key: serve refuses the snapshot, and the credentials are not in its result.
	other, otherKey := credentialsDir(t, srv)
	wrong := append(append([]string{}, serveArgs[:len(serveArgs)-len(storeArgs)]...), storeArgs...)
	wrong = append(wrong, "--store-credentials="+other)
	wrong[0] = "--dir=" + t.TempDir()
	err = serve(ctx, wrong)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not decrypt")
	r = readResult(t, serveResult)
	assert.True(t, r.Refused)
	raw, err := os.ReadFile(serveResult)
	require.NoError(t, err)
	assert.False(t, strings.Contains(string(raw), otherKey) || strings.Contains(string(raw), srv.SecretAccessKey), "no credential in the result")
}

// TestSaveUploadsLate: a save whose object store does not answer fails after taking its snapshot,
// which stays on the folder; the next save, the store answering, uploads its own and the one the
// store lacks (newest first), each with its record and keys, and says so in its result: the late
// one decrypts to the SHA-256 recorded when it was taken.
func TestSaveUploadsLate(t *testing.T) {
	assets, endpoint, srv, bucket := storeEnv(t)
	ctx := context.Background()
	out, err := exec.Command(filepath.Join(assets, "etcdctl"), "--endpoints="+endpoint, "put", "/registry/a", "b").CombinedOutput()
	require.NoError(t, err, "%s", out) // an etcd never written to has revision 0, which save refuses
	creds, _ := credentialsDir(t, srv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String() // nothing listens there once closed
	require.NoError(t, l.Close())
	keysFile, keys := writeKeys(t)
	const uid = "7d2e4f60-1a2b-4c3d-9e8f-0a1b2c3d4e5f"
	dir := t.TempDir()
	saveTo := func(storeEndpoint string) (Result, error) {
		file := filepath.Join(t.TempDir(), "result")
		err := save(ctx, []string{"--dir=" + dir, "--cluster=" + uid, "--version=1.37.1", "--keep=3", "--result=" + file, "--keys-file=" + keysFile,
			"--store-endpoint=http://" + storeEndpoint, "--store-bucket=" + bucket, "--store-insecure", "--store-path-style",
			"--store-credentials=" + creds, "--namespace=project-a", "--", "--endpoints=" + endpoint})
		return readResult(t, file), err
	}

	first, err := saveTo(closed)
	require.Error(t, err, "the store does not answer")
	assert.Contains(t, err.Error(), "kept on the claim, but not uploaded")
	require.NotNil(t, first.Snapshot)
	assert.False(t, first.Uploaded)
	kept, err := store(dir).List(types.UID(uid))
	require.NoError(t, err)
	require.Len(t, kept, 1, "the snapshot stays on the folder")
	assert.FileExists(t, store(dir).File(types.UID(uid), first.Snapshot.Name))

	second, err := saveTo(srv.Endpoint)
	require.NoError(t, err)
	require.NotNil(t, second.Snapshot)
	assert.True(t, second.Uploaded)
	assert.Equal(t, []string{first.Snapshot.Name}, second.UploadedLate, "the snapshot the store lacked went late")
	assert.Empty(t, second.RemovedFromStore)

	var want []string
	for _, name := range []string{first.Snapshot.Name, second.Snapshot.Name} {
		base := "project-a/" + uid + "/" + name
		want = append(want, base+".db.enc", base+".keys.enc", base+".json")
	}
	assert.ElementsMatch(t, want, objectKeys(t, srv, bucket))

	sf := storeFlags{endpoint: "http://" + srv.Endpoint, bucket: bucket, insecure: true, pathStyle: true, credentials: creds, namespace: "project-a"}
	cat, err := sf.catalog()
	require.NoError(t, err)
	listed, err := cat.List(ctx, "project-a", types.UID(uid))
	require.NoError(t, err)
	require.Len(t, listed, 2)
	late := listed[1]
	assert.Equal(t, first.Snapshot.Name, late.Name)
	assert.Equal(t, first.Snapshot.SHA256, late.SHA256, "recorded as taken")
	assert.Equal(t, "project-a", late.Namespace)
	copied := filepath.Join(t.TempDir(), "late.db")
	gotKeys, err := cat.Download(ctx, late, copied) // checks the SHA-256 of what it decrypts to
	require.NoError(t, err)
	assert.JSONEq(t, string(keys), string(gotKeys), "the keys went with the late one too")
	sum, _, err := snapshots.SHA256(copied)
	require.NoError(t, err)
	assert.Equal(t, first.Snapshot.SHA256, sum)
}
