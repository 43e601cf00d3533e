package kind

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/yaml"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// fakeProvider is a kind provider whose Create blocks until release is closed, and whose clusters
// are names in a list.
type fakeProvider struct {
	mu       sync.Mutex
	clusters []string
	creates  []string
	deletes  []string
	release  chan struct{}
	failWith error
}

func (f *fakeProvider) Create(name string, _ ...kindcluster.CreateOption) error {
	f.mu.Lock()
	f.creates = append(f.creates, name)
	f.mu.Unlock()
	<-f.release
	if f.failWith != nil {
		return f.failWith
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.clusters = append(f.clusters, name)
	return nil
}

func (f *fakeProvider) Delete(name, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deletes = append(f.deletes, name)
	f.clusters = slices.DeleteFunc(f.clusters, func(n string) bool { return n == name })
	return nil
}

func (f *fakeProvider) ListNodes(string) ([]nodes.Node, error) { return nil, nil }

func (f *fakeProvider) List() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.clusters), nil
}

// KubeConfig returns a kubeconfig whose server says which endpoint was asked for.
func (f *fakeProvider) KubeConfig(name string, internal bool) (string, error) {
	server := "https://127.0.0.1:40001"
	if internal {
		server = "https://" + name + "-control-plane:6443"
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: []byte("CA")}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "admin"}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	return string(data), err
}

func newTestBackend(t *testing.T, f *fakeProvider, notified chan backend.Ref) *Backend {
	t.Helper()
	b, err := New(Options{
		Provider: f,
		Create:   func(_ context.Context, name string, _ CreateOptions) error { return f.Create(name) },
		StateDir: t.TempDir(),
		NodeImage: func(_ context.Context, _ *clustersv1alpha1.Cluster, version string) (string, error) {
			if version != "1.37.1" {
				return "", backend.Errorf(backend.ReasonVersionNotSupported, "no node image for %s", version)
			}
			return "kindest/node:v1.37.1", nil
		},
		Notify: func(r backend.Ref) { notified <- r },
		Probe:  func(context.Context, *rest.Config) error { return nil },
	})
	require.NoError(t, err)
	return b
}

func testCluster(uid string) *clustersv1alpha1.Cluster {
	return &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c", UID: types.UID(uid)}, Spec: clustersv1alpha1.ClusterSpec{Profile: "p"}}
}

func TestEnsureCreatesInTheBackground(t *testing.T) {
	f := &fakeProvider{release: make(chan struct{})}
	notified := make(chan backend.Ref, 1)
	b := newTestBackend(t, f, notified)
	cl := testCluster("6cf1de0f-cdb4-40a6-98fe-d10ad1730762")
	ctx := t.Context()

	s, err := b.Ensure(ctx, cl, backend.Want{Version: "1.37.1"})
	require.NoError(t, err, "Ensure returns while kind creates")
	assert.False(t, s.Ready)
	assert.Equal(t, backend.ReasonStarting, s.Reason)
	assert.NotZero(t, s.RetryAfter)
	s, err = b.Ensure(ctx, cl, backend.Want{Version: "1.37.1"})
	require.NoError(t, err)
	assert.Equal(t, backend.ReasonStarting, s.Reason)
	gone, err := b.Delete(ctx, cl)
	require.NoError(t, err)
	assert.False(t, gone, "a cluster being created is deleted once its creation ended")

	close(f.release)
	select {
	case r := <-notified:
		assert.Equal(t, backend.RefOf(cl), r)
	case <-time.After(10 * time.Second):
		t.Fatal("no notification when the creation ended")
	}
	assert.Equal(t, []string{"cp-6cf1de0fcdb440a698fe"}, f.creates, "one creation, named after the UID")

	s, err = b.Ensure(ctx, cl, backend.Want{Version: "1.37.1"})
	require.NoError(t, err)
	assert.True(t, s.Ready, s.Message)
	assert.Equal(t, "https://127.0.0.1:40001", s.Endpoint)
	assert.Equal(t, map[string]string{
		backend.EndpointAPIServerExternal:          "https://127.0.0.1:40001",
		clustersv1alpha1.APIServerEndpointInternal: "https://cp-6cf1de0fcdb440a698fe-control-plane:6443",
	}, s.Endpoints)
	assert.Equal(t, []byte("CA"), s.CABundle)
	cfg, err := b.AdminConfig(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, "admin", cfg.BearerToken)
	authFile := filepath.Join(b.opts.StateDir, string(cl.UID), "authn", authconfig.FileName)
	data, err := os.ReadFile(authFile)
	require.NoError(t, err)
	assert.Equal(t, authconfig.Empty, string(data), "the control plane starts with an empty authentication configuration")

	gone, err = b.Delete(ctx, cl)
	require.NoError(t, err)
	assert.True(t, gone)
	assert.Equal(t, []string{"cp-6cf1de0fcdb440a698fe"}, f.deletes)
	assert.NoDirExists(t, filepath.Join(b.opts.StateDir, string(cl.UID)))
}

func TestEnsureReportsAFailedCreation(t *testing.T) {
	f := &fakeProvider{release: make(chan struct{}), failWith: errors.New("docker: no space left")}
	close(f.release)
	notified := make(chan backend.Ref, 2)
	b := newTestBackend(t, f, notified)
	cl := testCluster("u1")
	_, err := b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.NoError(t, err)
	<-notified
	_, err = b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	assert.ErrorContains(t, err, "docker: no space left", "the failure is reported once")
	_, err = b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.NoError(t, err, "then retried")
	<-notified
	assert.Len(t, f.creates, 2)
}

func TestEnsureUnservedVersion(t *testing.T) {
	f := &fakeProvider{release: make(chan struct{})}
	b := newTestBackend(t, f, make(chan backend.Ref, 1))
	_, err := b.Ensure(t.Context(), testCluster("u2"), backend.Want{Version: "1.20.0"})
	assert.True(t, backend.IsReason(err, backend.ReasonVersionNotSupported), "%v", err)
	assert.Empty(t, f.creates)
}

// TestForProfile: bound to a ProviderConfig, the backend offers its node images' versions and creates
// clusters from them, with no callback: the profile's one view of the spec.
func TestForProfile(t *testing.T) {
	f := &fakeProvider{release: make(chan struct{})}
	close(f.release)
	created := make(chan string, 1)
	b, err := New(Options{
		Provider: f,
		Create: func(_ context.Context, name string, o CreateOptions) error {
			created <- o.Image
			return f.Create(name)
		},
		StateDir: t.TempDir(),
		Probe:    func(context.Context, *rest.Config) error { return nil },
	})
	require.NoError(t, err)
	pc := &providersv1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: "kind"}, Spec: providersv1alpha1.ProviderConfigSpec{Kind: &providersv1alpha1.KindBackendConfig{
		NodeImages: map[string]string{"1.36.3": "a", "v1.37.1": "b"},
	}}}
	bound := b.ForProfile(pc)
	assert.Equal(t, []string{"1.37.1", "1.36.3"}, bound.Versions())
	assert.Empty(t, b.ForProfile(&providersv1alpha1.ProviderConfig{}).Versions())
	assert.Empty(t, b.Versions(), "unbound: nothing")

	pc.Spec.Kind.NodeImages["1.37.1"] = "changed" // the view is the one bound
	_, err = bound.Ensure(t.Context(), testCluster("1d4f0b0e-6a1c-4d9e-8f5a-0b1c2d3e4f50"), backend.Want{Version: "1.37.1"})
	require.NoError(t, err)
	select {
	case image := <-created:
		assert.Equal(t, "b", image)
	case <-time.After(10 * time.Second):
		t.Fatal("no creation")
	}
	_, err = bound.Ensure(t.Context(), testCluster("2d4f0b0e-6a1c-4d9e-8f5a-0b1c2d3e4f50"), backend.Want{Version: "1.35.0"})
	assert.True(t, backend.IsReason(err, backend.ReasonVersionNotSupported), "%v", err)
	assert.Contains(t, err.Error(), "ProviderConfig kind has no node image for Kubernetes 1.35.0")
	_, err = b.Ensure(t.Context(), testCluster("3d4f0b0e-6a1c-4d9e-8f5a-0b1c2d3e4f50"), backend.Want{Version: "1.37.1"})
	assert.ErrorContains(t, err, "bind it", "unbound, without NodeImage: says what is missing")
}

func TestClusterConfig(t *testing.T) {
	cfg := clusterConfig("/state/uid/authn")
	data, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	require.Len(t, cfg.Nodes, 1)
	assert.Equal(t, "/state/uid/authn", cfg.Nodes[0].ExtraMounts[0].HostPath)
	assert.Equal(t, authMountPath, cfg.Nodes[0].ExtraMounts[0].ContainerPath)
	for _, patch := range cfg.KubeadmConfigPatches {
		var p map[string]any
		require.NoError(t, yaml.Unmarshal([]byte(patch), &p), patch)
		assert.Equal(t, "ClusterConfiguration", p["kind"])
		assert.Contains(t, patch, authMountPath+"/"+authconfig.FileName)
	}
	assert.Contains(t, string(data), "kubeadmConfigPatches")
}

func TestClusterName(t *testing.T) {
	assert.Equal(t, "cp-6cf1de0fcdb440a698fe", ClusterName("6cf1de0f-cdb4-40a6-98fe-d10ad1730762"))
	assert.Equal(t, "cp-abc", ClusterName("ABC"))
}

// TestRealKind creates and deletes a real kind cluster; it runs only where a Docker engine
// answers.
func TestRealKind(t *testing.T) {
	if os.Getenv("KIND_NODE_IMAGE") == "" {
		t.Skip("KIND_NODE_IMAGE is not set: the real kind path runs with make e2e-kind, which sets it")
	}
	if err := exec.Command("docker", "info").Run(); err != nil {
		testenv.MissingTool(t, "a Docker engine (docker info)", err)
	}
	notified := make(chan backend.Ref, 1)
	b, err := New(Options{
		StateDir: t.TempDir(),
		NodeImage: func(context.Context, *clustersv1alpha1.Cluster, string) (string, error) {
			return os.Getenv("KIND_NODE_IMAGE"), nil
		},
		Notify: func(r backend.Ref) { notified <- r },
	})
	require.NoError(t, err)
	cl := testCluster(string(types.UID("real-" + time.Now().Format("150405"))))
	// Delete is called until the cluster is gone: it deletes in the background and reports gone
	// only once nothing is left (a single call left a node container behind under load).
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			gone, err := b.Delete(context.Background(), cl)
			if err == nil && gone {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("kind cluster of %s not deleted within 3m (last error: %v)", cl.UID, err)
				return
			}
			time.Sleep(time.Second) // polling the backend, which deletes in the background
		}
	})
	_, err = b.Ensure(t.Context(), cl, backend.Want{Version: ""})
	require.NoError(t, err)
	select {
	case <-notified:
	case <-time.After(6 * time.Minute):
		t.Fatal("kind did not finish")
	}
	s, err := b.Ensure(t.Context(), cl, backend.Want{Version: ""})
	require.NoError(t, err)
	assert.True(t, s.Ready, s.Message)
}

// TestMain lets the test binary serve as the docker shim (docker.go) when TestRealKind installs it.
func TestMain(m *testing.M) {
	if IsDockerShim() {
		os.Exit(RunDockerShim(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// TestEnsureVersionContract: a kind cluster records the version it was created with, keeps it
// when the default moves, and refuses any change (kind cannot change a node's version), running
// on as it was.
func TestEnsureVersionContract(t *testing.T) {
	f := &fakeProvider{release: make(chan struct{})}
	close(f.release)
	notified := make(chan backend.Ref, 1)
	b := newTestBackend(t, f, notified)
	cl := testCluster("0b7e2f4c-5a1d-4c1e-9d8f-2a3b4c5d6e7f")
	_, err := b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.NoError(t, err)
	select {
	case <-notified:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification when the creation ended")
	}

	s, err := b.Ensure(t.Context(), cl, backend.Want{Version: "1.38.0"}) // the default moved
	require.NoError(t, err)
	assert.Equal(t, "1.37.1", s.Runs)
	assert.Nil(t, s.VersionChange)

	s, err = b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.2", Requested: "1.37.2"})
	require.NoError(t, err)
	assert.True(t, s.Ready, "the cluster keeps serving")
	assert.Equal(t, "1.37.1", s.Runs)
	require.NotNil(t, s.VersionChange)
	assert.True(t, s.VersionChange.Refused)
	assert.Contains(t, s.VersionChange.Message, "change from 1.37.1 to 1.37.2 is refused: kind cannot change the Kubernetes version of a cluster's node")
	assert.Equal(t, []string{"cp-0b7e2f4c5a1d4c1e9d8f"}, f.creates, "created once, never again")
}
