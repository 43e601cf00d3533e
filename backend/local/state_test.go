package local

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

func TestMetaRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    meta
	}{
		{"full", meta{
			UID: "6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a", Namespace: "ns", Name: "cl", Profile: "default.test.local",
			Version: "1.30.2", Ports: ports{APIServer: 40001, ControllerManager: 40002},
		}},
		{"pre-release, no ports yet", meta{UID: "u", Version: "1.36.0-alpha.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, writeMeta(dir, tc.m))
			fi, err := os.Stat(filepath.Join(dir, "cluster.json"))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

			got, err := readMeta(dir)
			require.NoError(t, err)
			assert.Equal(t, tc.m, got)

			// Rewriting replaces the record.
			changed := tc.m
			changed.Ports.APIServer = 45000
			require.NoError(t, writeMeta(dir, changed))
			got, err = readMeta(dir)
			require.NoError(t, err)
			assert.Equal(t, 45000, got.Ports.APIServer)
		})
	}
}

func TestMetaJSONNames(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, writeMeta(dir, meta{UID: "u1", Version: "1.30.2", Ports: ports{APIServer: 1, ControllerManager: 2}}))
	data, err := os.ReadFile(filepath.Join(dir, metaFile))
	require.NoError(t, err)
	for _, key := range []string{`"uid": "u1"`, `"version": "1.30.2"`, `"apiServer": 1`, `"controllerManager": 2`} {
		assert.Contains(t, string(data), key)
	}
	assert.NotContains(t, string(data), "dataLost", "only a cluster re-created after a loss records one")
}

// TestMetaOfAnEarlierRelease reads the record an earlier release wrote (etcd on TCP ports, no
// controller manager): the cluster is adopted with its API server's port.
func TestMetaOfAnEarlierRelease(t *testing.T) {
	dir := t.TempDir()
	old := `{"uid": "u1", "namespace": "ns", "name": "cl", "profile": "p", "version": "1.37.1",
  "ports": {"apiServer": 40001, "etcd": 40002, "etcdPeer": 40003}}`
	require.NoError(t, os.WriteFile(filepath.Join(dir, metaFile), []byte(old), 0o600))
	m, err := readMeta(dir)
	require.NoError(t, err)
	assert.Equal(t, ports{APIServer: 40001}, m.Ports)
	assert.Equal(t, "1.37.1", m.Version)
}

func TestReadMetaErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		content  string
		notExist bool // no file at all
	}{
		{name: "missing uid", content: `{"namespace":"ns","name":"cl","version":"1.30.2"}`},
		{name: "empty uid", content: `{"uid":"","version":"1.30.2"}`},
		{name: "missing version", content: `{"uid":"u1","name":"cl"}`},
		{name: "not JSON", content: `uid: u1`},
		{name: "empty file", content: ``},
		{name: "wrong type", content: `{"uid":"u1","version":"1.30.2","ports":{"apiServer":"x"}}`},
		{name: "no file", notExist: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if !tc.notExist {
				require.NoError(t, os.WriteFile(filepath.Join(dir, metaFile), []byte(tc.content), 0o600))
			}
			_, err := readMeta(dir)
			require.Error(t, err)
			assert.Equal(t, tc.notExist, errors.Is(err, os.ErrNotExist), "%v", err)
			assert.Contains(t, err.Error(), filepath.Join(dir, metaFile), "the error names the file")
		})
	}
}

func TestPortAllocatorAllocate(t *testing.T) {
	a := &portAllocator{host: "127.0.0.1", taken: map[int]bool{}}
	seen := map[int]bool{}
	for range 20 {
		p, err := a.allocate()
		require.NoError(t, err)
		assert.Greater(t, p, 0)
		assert.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
		assert.True(t, a.taken[p], "port %d is remembered", p)
	}
	assert.Len(t, a.taken, 20)

	first, err := a.allocate()
	require.NoError(t, err)
	second, err := a.allocate()
	require.NoError(t, err)
	assert.NotEqual(t, first, second)

	a.release(ports{Internal: first, ControllerManager: second}) // the endpoint's port is its front door's
	assert.False(t, a.taken[first])
	assert.False(t, a.taken[second])
	assert.Len(t, a.taken, 20)
}

// heldPort listens on a free loopback port until the test ends and returns it.
func heldPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

func TestPortAllocatorKeep(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup returns the port to keep.
		setup       func(t *testing.T, a *portAllocator) int
		wantSame    bool
		wantChanged bool
	}{
		{"free port is kept", func(t *testing.T, _ *portAllocator) int { return freePort(t) }, true, false},
		{"port held by another listener moves", func(t *testing.T, _ *portAllocator) int { return heldPort(t) }, false, true},
		{"port taken by another cluster moves", func(t *testing.T, a *portAllocator) int {
			p := freePort(t)
			a.taken[p] = true
			return p
		}, false, true},
		{"no port yet", func(*testing.T, *portAllocator) int { return 0 }, false, true},
		{"negative port", func(*testing.T, *portAllocator) int { return -1 }, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &portAllocator{host: "127.0.0.1", taken: map[int]bool{}}
			port := tc.setup(t, a)
			got, changed, err := a.keep(port)
			require.NoError(t, err)
			assert.Equal(t, tc.wantChanged, changed)
			if tc.wantSame {
				assert.Equal(t, port, got)
			} else {
				assert.NotEqual(t, port, got)
				assert.Greater(t, got, 0)
				assert.True(t, a.free(got), "the new port %d can be bound", got)
			}
			assert.True(t, a.taken[got], "the port is remembered")

			// Keeping it again (another cluster) hands out another one.
			again, changed, err := a.keep(got)
			require.NoError(t, err)
			assert.True(t, changed)
			assert.NotEqual(t, got, again)
		})
	}
}

func TestPortAllocatorFree(t *testing.T) {
	a := &portAllocator{host: "127.0.0.1", taken: map[int]bool{}}
	assert.False(t, a.free(heldPort(t)), "a held port is not free")
	assert.True(t, a.free(freePort(t)))
	assert.False(t, a.free(0))
	assert.False(t, a.free(-5))
}

func TestWriteFileAtomic(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing []byte // nil: no file before
		oldMode  os.FileMode
		data     []byte
		mode     os.FileMode
	}{
		{name: "new key file", data: []byte("secret"), mode: 0o600},
		{name: "new certificate", data: []byte("cert"), mode: 0o644},
		{name: "empty data", data: []byte{}, mode: 0o640},
		{name: "replaces and tightens", existing: []byte("old, longer content"), oldMode: 0o644, data: []byte("new"), mode: 0o600},
		{name: "replaces and loosens", existing: []byte("old"), oldMode: 0o600, data: []byte("new content"), mode: 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "file.pem")
			if tc.existing != nil {
				require.NoError(t, os.WriteFile(path, tc.existing, tc.oldMode))
				require.NoError(t, os.Chmod(path, tc.oldMode))
			}
			require.NoError(t, writeFileAtomic(path, tc.data, tc.mode))

			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.data, got)
			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, tc.mode, fi.Mode().Perm())

			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			require.Len(t, entries, 1, "no temporary file is left: %v", entries)
			assert.Equal(t, "file.pem", entries[0].Name())
		})
	}

	t.Run("folder missing", func(t *testing.T) {
		dir := t.TempDir()
		err := writeFileAtomic(filepath.Join(dir, "nope", "file"), []byte("x"), 0o600)
		require.Error(t, err)
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Empty(t, entries)
	})

	t.Run("target is a folder", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(dir, "sub")
		require.NoError(t, os.Mkdir(target, 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(target, "keep"), nil, 0o600))
		err := writeFileAtomic(target, []byte("x"), 0o600)
		require.Error(t, err, "a folder with content is not replaced")
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		require.Len(t, entries, 1, "the temporary file is removed after a failed rename: %v", entries)
		assert.Equal(t, "sub", entries[0].Name())
	})

	t.Run("many writes", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "cluster.json")
		for i := range 10 {
			require.NoError(t, writeFileAtomic(path, []byte(strconv.Itoa(i)), 0o600))
		}
		got, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, "9", string(got))
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		assert.Len(t, entries, 1)
	})
}

// TestServiceCIDRKept: a cluster keeps the service range it was created with. A record without
// one is of a cluster made before ranges were recorded (the legacy range); a lost record is
// rebuilt with the range the Cluster's status names, or the legacy one when the status has none.
func TestServiceCIDRKept(t *testing.T) {
	assert.Equal(t, LegacyServiceCIDR, meta{}.serviceCIDR(), "an old record")
	assert.Equal(t, "172.30.0.0/16", meta{ServiceCIDR: "172.30.0.0/16"}.serviceCIDR())

	b := &Backend{opts: Options{ServiceCIDR: "203.0.113.0/24"}, log: logr.Discard()}
	for _, tc := range []struct {
		name   string
		status any
		want   string
	}{
		{name: "no status: a new cluster's range", status: nil, want: "203.0.113.0/24"},
		{name: "a status with the range", status: providerStatus{Backend: Name, Version: "v1.37.1", ServiceCIDR: DefaultServiceCIDR}, want: DefaultServiceCIDR},
		{name: "a status of an older operator", status: providerStatus{Backend: Name, Version: "v1.37.1"}, want: LegacyServiceCIDR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newCluster("repair")
			if tc.status != nil {
				raw, err := json.Marshal(tc.status)
				require.NoError(t, err)
				cl.Status.ProviderStatus = &runtime.RawExtension{Raw: raw}
			}
			m, _ := b.repairMeta(t.TempDir(), cl, "1.37.1", os.ErrNotExist)
			assert.Equal(t, tc.want, m.serviceCIDR())
		})
	}
}

// TestForProfile: bound to a ProviderConfig, the backend keeps the audit logs its spec.audit asks
// for (on unless disabled), as the unbound one does for an empty spec; it serves the same
// versions, and the same clusters.
func TestForProfile(t *testing.T) {
	b, err := New(Options{Binaries: []Binaries{{Version: "1.36.3"}, {Version: "1.37.1"}}, StateDir: t.TempDir(),
		ListClusters: func(context.Context) ([]clustersv1alpha1.Cluster, error) { return nil, nil }})
	require.NoError(t, err)
	assert.True(t, defaultSettings.audit, "unbound: as an empty spec, audit on")
	for _, c := range []struct {
		name  string
		audit *providersv1alpha1.AuditPolicy
		want  bool
	}{
		{"unset", nil, true},
		{"on", &providersv1alpha1.AuditPolicy{}, true},
		{"disabled", &providersv1alpha1.AuditPolicy{Disabled: true}, false},
	} {
		pc := &providersv1alpha1.ProviderConfig{Spec: providersv1alpha1.ProviderConfigSpec{Audit: c.audit}}
		bound, ok := b.ForProfile(pc).(*Bound)
		require.True(t, ok, c.name)
		assert.Equal(t, c.want, bound.set.audit, c.name)
		assert.Same(t, b, bound.Backend, "%s: the same clusters", c.name)
		assert.Equal(t, []string{"1.37.1", "1.36.3"}, bound.Versions(), c.name)
	}
}
