package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/backend/etcdmaint"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// etcd starts a real etcd (the envtest assets' binary) in a temporary folder and returns its
// client URL; it stops with the test.
func etcd(t *testing.T, assets string) string {
	return testenv.Etcd(t, assets, 1)[0].ClientURL
}

// TestSaveServeRestore: save takes checked snapshots onto a folder and keeps the newest --keep,
// reporting them as the backend reads them; serve hands one out over TLS to a client with the
// token only; restore fetches it, checks its checksum and makes an etcd data folder from it that
// a new etcd serves the data from; a damaged snapshot is refused by serve.
func TestSaveServeRestore(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		testenv.MissingTool(t, "the envtest assets (etcd, etcdctl, etcdutl: make envtest)", err)
	}
	t.Setenv("ETCD_TOOLS", assets)
	ctx := context.Background()
	endpoint := etcd(t, assets)
	etcdctl := func(args ...string) string {
		out, err := exec.Command(filepath.Join(assets, "etcdctl"), append([]string{"--endpoints=" + endpoint}, args...)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		return strings.TrimSpace(string(out))
	}
	etcdctl("put", "/registry/kept", "before the snapshot")

	dir := t.TempDir()
	const uid = "0b7e2c4a-9f1d-4e55-8a3b-1c2d3e4f5a6b"
	var results []Result
	for range 3 {
		file := filepath.Join(t.TempDir(), "result")
		require.NoError(t, save(ctx, []string{"--dir=" + dir, "--cluster=" + uid, "--version=1.37.1", "--keep=2", "--result=" + file, "--", "--endpoints=" + endpoint}))
		data, err := os.ReadFile(file)
		require.NoError(t, err)
		var r Result
		require.NoError(t, json.Unmarshal(data, &r), "%s", data)
		require.NotNil(t, r.Snapshot)
		results = append(results, r)
	}
	snap := results[2].Snapshot
	assert.Equal(t, uid, string(snap.Cluster))
	assert.Equal(t, "1.37.1", snap.Version)
	assert.Positive(t, snap.Size)
	assert.Positive(t, snap.Revision)
	assert.Len(t, snap.SHA256, 64)
	assert.Equal(t, []string{results[0].Snapshot.Name}, results[2].Removed, "the oldest beyond --keep 2 removed")
	all, err := store(dir).List(snap.Cluster)
	require.NoError(t, err)
	require.Len(t, all, 2)
	assert.Equal(t, snap.Name, all[0].Name)
	info, err := os.Stat(store(dir).File(snap.Cluster, snap.Name))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "a snapshot holds every Secret")

	// serve and restore, over TLS with a token.
	ca, err := certs.NewCA("test")
	require.NoError(t, err)
	cert, key, err := ca.Issue(certs.Leaf{CommonName: "serve", Hosts: []string{"127.0.0.1"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err)
	tls := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(tls, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	certFile, keyFile, caFile, tokenFile := write("tls.crt", cert), write("tls.key", key), write("ca.crt", ca.CertPEM), write("token", []byte("s3cret\n"))
	wrongToken := write("wrong", []byte("guess"))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	served := make(chan error, 1)
	serveResult := filepath.Join(tls, "serve-result")
	go func() {
		served <- serve(ctx, []string{"--dir=" + dir, "--cluster=" + uid, "--name=" + snap.Name, "--listen=" + addr,
			"--token-file=" + tokenFile, "--tls-cert=" + certFile, "--tls-key=" + keyFile, "--timeout=2m", "--result=" + serveResult})
	}()
	restoreArgs := func(token, dataDir string) []string {
		return []string{"--url=https://" + addr + "/snapshot", "--token-file=" + token, "--ca=" + caFile, "--sha256=" + snap.SHA256,
			"--data-dir=" + dataDir, "--name=default", "--initial-cluster=default=http://127.0.0.1:2380", "--initial-advertise-peer-urls=http://127.0.0.1:2380"}
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = restore(rctx, restoreArgs(wrongToken, filepath.Join(t.TempDir(), "refused")))
	cancel()
	require.Error(t, err, "a wrong token gets nothing")
	assert.Contains(t, err.Error(), "401")
	data := filepath.Join(t.TempDir(), "restored")
	require.NoError(t, restore(ctx, restoreArgs(tokenFile, data)))
	require.NoError(t, <-served, "serve ends once it served the snapshot")
	require.NoError(t, restore(ctx, restoreArgs(tokenFile, data)), "restored already: nothing to do, no serve needed")

	// A new etcd on the restored folder serves the data written before the snapshot.
	etcdctl("put", "/registry/kept", "after the snapshot")
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", port())
	cmd := exec.Command(filepath.Join(assets, "etcd"), "--data-dir="+data, "--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls=http://127.0.0.1:"+fmt.Sprint(port()), "--log-level=error")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := exec.Command(filepath.Join(assets, "etcdctl"), "--endpoints="+client, "get", "/registry/kept", "--print-value-only").CombinedOutput()
		assert.NoError(ct, err, "%s", out)
		assert.Equal(ct, "before the snapshot", strings.TrimSpace(string(out)))
	}, 30*time.Second, 100*time.Millisecond, "the restored etcd serves the snapshot's data")

	// A damaged snapshot: serve refuses it, and says so.
	f := store(dir).File(snap.Cluster, snap.Name)
	raw, err := os.ReadFile(f)
	require.NoError(t, err)
	raw[len(raw)/2] ^= 0xff
	require.NoError(t, os.WriteFile(f, raw, 0o600))
	err = serve(ctx, []string{"--dir=" + dir, "--cluster=" + uid, "--name=" + snap.Name, "--listen=" + addr,
		"--token-file=" + tokenFile, "--tls-cert=" + certFile, "--tls-key=" + keyFile, "--result=" + serveResult})
	require.Error(t, err)
	out, rerr := os.ReadFile(serveResult)
	require.NoError(t, rerr)
	var r Result
	require.NoError(t, json.Unmarshal(out, &r))
	assert.True(t, r.Refused)
	assert.Contains(t, r.Error, "is damaged")
}

// TestMaintain: maintain reports, in the file the backend reads, each member's database and that
// etcd takes writes; a member that does not answer is named.
func TestMaintain(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		testenv.MissingTool(t, "the envtest assets (etcd: make envtest)", err)
	}
	endpoint := etcd(t, assets)
	result := filepath.Join(t.TempDir(), "result")
	require.NoError(t, maintain(t.Context(), []string{"--member=etcd-0=" + endpoint, "--member=etcd-1=http://127.0.0.1:1",
		"--quota=1073741824", "--defrag", "--result=" + result}))
	data, err := os.ReadFile(result)
	require.NoError(t, err)
	var r etcdmaint.Report
	require.NoError(t, json.Unmarshal(data, &r))
	require.Len(t, r.Members, 2)
	assert.Equal(t, "etcd-0", r.Members[0].Name)
	assert.Positive(t, r.Members[0].DBSize)
	assert.NotEmpty(t, r.Members[1].Error)
	assert.False(t, r.NoSpace)
	assert.Equal(t, int64(1<<30), r.Quota)
	assert.Contains(t, r.Message, "etcd takes writes")
	assert.Contains(t, r.Message, "member etcd-1 does not answer")
	assert.Empty(t, r.Defragmented, "not with a member down")

	require.Error(t, maintain(t.Context(), []string{"--quota=1", "--result=" + result}), "no member")
}

// TestMaintainTLS: maintain reaches an etcd that serves TLS with client certificates (as the
// hosted etcd does) through the client certificate, the CA and the member's DNS name.
func TestMaintainTLS(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		testenv.MissingTool(t, "the envtest assets (etcd: make envtest)", err)
	}
	dir := t.TempDir()
	ca, err := certs.NewCA("etcd-ca")
	require.NoError(t, err)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o600))
		return p
	}
	srvCert, srvKey, err := ca.Issue(certs.Leaf{CommonName: "etcd", Hosts: []string{"localhost", "127.0.0.1"},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	cliCert, cliKey, err := ca.Issue(certs.Leaf{CommonName: "etcd-snapshot", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	caFile := write("ca.crt", ca.CertPEM)
	port := testenv.FreePort(t)
	client := fmt.Sprintf("https://localhost:%d", port)
	peer := fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
	cmd := exec.Command(filepath.Join(assets, "etcd"), "--data-dir="+filepath.Join(dir, "data"),
		"--listen-client-urls=https://127.0.0.1:"+fmt.Sprint(port), "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=default="+peer,
		"--cert-file="+write("server.crt", srvCert), "--key-file="+write("server.key", srvKey),
		"--trusted-ca-file="+caFile, "--client-cert-auth=true", "--log-level=error")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	result := filepath.Join(dir, "result")
	args := []string{"--member=etcd-0=" + client, "--quota=1073741824", "--result=" + result,
		"--cacert=" + caFile, "--cert=" + write("tls.crt", cliCert), "--key=" + write("tls.key", cliKey)}
	var r etcdmaint.Report
	require.Eventually(t, func() bool {
		require.NoError(t, maintain(t.Context(), args))
		data, err := os.ReadFile(result)
		require.NoError(t, err)
		r = etcdmaint.Report{}
		require.NoError(t, json.Unmarshal(data, &r))
		return !r.Unreachable
	}, 30*time.Second, 200*time.Millisecond, "maintain reaches etcd over TLS: %+v", &r)
	assert.Positive(t, r.Members[0].DBSize)
	assert.Contains(t, r.Message, "etcd takes writes")
}

// TestSaveFromTheQuorum: with --member, save takes the snapshot from a member that is healthy (in
// the quorum), names it in its result, and drops an --endpoints of the connection flags (etcdctl
// snapshots one endpoint); with no member healthy it takes none, removes none, and says why,
// naming each member.
func TestSaveFromTheQuorum(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		testenv.MissingTool(t, "the envtest assets (etcd, etcdctl, etcdutl: make envtest)", err)
	}
	t.Setenv("ETCD_TOOLS", assets)
	endpoint := etcd(t, assets)
	out, err := exec.Command(filepath.Join(assets, "etcdctl"), "--endpoints="+endpoint, "put", "/registry/kept", "data").CombinedOutput()
	require.NoError(t, err, "%s", out)
	dir := t.TempDir()
	const uid = "5d1c0a9e-3b7f-4c2d-9e8a-7f6b5c4d3e2f"
	run := func(args ...string) (Result, error) {
		file := filepath.Join(t.TempDir(), "result")
		err := save(t.Context(), append([]string{"--dir=" + dir, "--cluster=" + uid, "--version=1.37.1", "--keep=1", "--result=" + file}, args...))
		data, rerr := os.ReadFile(file)
		require.NoError(t, rerr)
		var r Result
		require.NoError(t, json.Unmarshal(data, &r), "%s", data)
		return r, err
	}
	r, err := run("--member=etcd-0=http://127.0.0.1:1", "--member=etcd-1="+endpoint, "--", "--endpoints=http://127.0.0.1:1")
	require.NoError(t, err, "%+v", r)
	assert.Equal(t, "etcd-1", r.Member, "the member that is healthy")
	require.NotNil(t, r.Snapshot)
	first := r.Snapshot.Name

	r, err = run("--member=etcd-0=http://127.0.0.1:1", "--member=etcd-2=http://127.0.0.1:2")
	require.Error(t, err)
	assert.Nil(t, r.Snapshot)
	assert.Empty(t, r.Removed, "nothing pruned without a new snapshot")
	assert.Contains(t, r.Error, "no etcd member is in the quorum")
	assert.Contains(t, r.Error, "etcd-0 (")
	assert.Contains(t, r.Error, "etcd-2 (")
	all, err := store(dir).List(uid)
	require.NoError(t, err)
	require.Len(t, all, 1)
	assert.Equal(t, first, all[0].Name, "the snapshot taken before is kept")
}
