package e2e

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// Deadlines of the steps; generous, because the binary may run under the race detector.
const (
	readyTimeout   = 60 * time.Second
	convergeWithin = 30 * time.Second
	stopWithin     = 30 * time.Second
	poll           = 100 * time.Millisecond
)

// TestOperator runs `cluster-provider init` twice and `cluster-provider run` (with leader
// election), publishes the ClusterProfile of the sample ProviderConfig, and stops on SIGTERM with
// exit code 0, releasing its lease. init runs as a user with deploy/rbac's init ClusterRole only,
// run as one with the generated ClusterRole (deploy/rbac/role.yaml) and the leader election Role
// only, so a missing RBAC rule fails it.
func TestOperator(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	ctx := t.Context()

	// init applies the CRDs, with deploy/rbac's init ClusterRole only; a second run changes nothing.
	initKubeconfig := writeKubeconfig(t, initUser(t))
	var versions []map[string]string
	for range 2 {
		out, err := exec.CommandContext(ctx, bin, "init", "--kubeconfig", initKubeconfig).CombinedOutput()
		require.NoError(t, err, "cluster-provider init:\n%s", out)
		assert.Contains(t, string(out), "customresourcedefinition.apiextensions.k8s.io/providerconfigs.providers.clusters.openmcp.cloud established")
		versions = append(versions, crdVersions(t))
	}
	assert.Len(t, versions[1], 5, "every CRD is installed")
	assert.Equal(t, versions[0], versions[1], "a second init leaves the CRDs as they are")

	probes := "127.0.0.1:" + freePort(t)
	op := start(t, bin, "run", "--provider-name", "e2e", "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", probes,
		"--leader-elect", "--leader-election-namespace", "default",
		"--local-binaries", assetsDir(t), "--state-dir", t.TempDir())
	require.Eventually(t, func() bool { return op.exited() || httpOK("http://"+probes+"/readyz") },
		readyTimeout, poll, "/readyz never answered 200")
	require.False(t, op.exited(), "cluster-provider exited before it was ready")
	assert.True(t, httpOK("http://"+probes+"/healthz"), "/healthz answers 200")

	pc := sampleProviderConfig(t)
	pc.GenerateName, pc.Name = pc.Name+"-", "" // -count=N reuses the API server
	require.NoError(t, env.Client.Create(ctx, pc))
	profileName := "default.e2e." + pc.Name
	want := clustersv1alpha1.ClusterProfileSpec{
		ProviderRef:       common.LocalObjectReference{Name: "e2e"},
		ProviderConfigRef: common.LocalObjectReference{Name: pc.Name},
		SupportedVersions: pc.Spec.SupportedVersions,
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cp := &clustersv1alpha1.ClusterProfile{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKey{Name: profileName}, cp))
		assert.Equal(c, want, cp.Spec)
	}, convergeWithin, poll, "ClusterProfile %s with the sample's spec", profileName)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &providersv1alpha1.ProviderConfig{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(pc), got))
		assert.Equal(c, profileName, got.Status.Profile)
		assert.Equal(c, common.PhaseReady, got.Status.Phase)
		assert.Equal(c, got.Generation, got.Status.ObservedGeneration)
		for _, cond := range got.Status.Conditions {
			assert.Equal(c, metav1.ConditionTrue, cond.Status, "condition %s: %s", cond.Type, cond.Message)
		}
	}, convergeWithin, poll, "ProviderConfig %s is Ready", pc.Name)

	require.NoError(t, op.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-op.done:
	case <-time.After(stopWithin):
		t.Fatalf("cluster-provider did not stop within %s of SIGTERM", stopWithin)
	}
	require.NoError(t, op.err, "cluster-provider exits 0 on SIGTERM")
	assert.Contains(t, op.output.String(), "The operator stopped")
	assert.NotContains(t, op.output.String(), "forbidden", "the generated ClusterRole lacks a permission")
	assert.Empty(t, leaseHolder(t, "e2e"), "the leader election lease is released on SIGTERM")
}

// process is a started cluster-provider.
type process struct {
	cmd    *exec.Cmd
	output *syncBuffer // stdout and stderr
	done   chan struct{}
	err    error // Wait's result, set before done is closed
}

// start starts bin with args. Its output is logged if the test fails; it is killed at the end of
// the test if it still runs.
func start(t *testing.T, bin string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), output: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("cluster-provider %v (exit: %v) output:\n%s", args, p.err, p.output.String())
		}
	})
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// buildBinary builds cmd/cluster-provider into a temporary folder, with -race if the tests run
// with it, after consulting the module's sources (testenv.ConsultSources).
func buildBinary(t *testing.T) string {
	t.Helper()
	// The binary's code is not imported by this package: without this, Go's test cache would
	// answer "(cached)" after a change of it.
	testenv.ConsultSources()
	bin := filepath.Join(t.TempDir(), "cluster-provider")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/openmcp-local/cluster-provider/cmd/cluster-provider")
	out, err := exec.CommandContext(t.Context(), "go", args...).CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	return bin
}

// writeKubeconfig writes a kubeconfig for cfg (envtest's administrator) and returns its path.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken,
	}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// operatorUser returns the config of a user bound to what deploy/rbac grants the operator and
// nothing else: the generated ClusterRole, and the leader election Role in namespace default (the
// tests' --leader-election-namespace).
func operatorUser(t *testing.T) *rest.Config {
	t.Helper()
	user := "cluster-provider-e2e-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	bindClusterRole(t, "role.yaml", user)
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "rbac", "leader_election_role.yaml"))
	require.NoError(t, err)
	role := &rbacv1.Role{}
	require.NoError(t, yaml.UnmarshalStrict(data, role))
	role.Name, role.Namespace = user, "default"
	require.NoError(t, env.Client.Create(t.Context(), role))
	require.NoError(t, env.Client.Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: "default"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}))
	cfg, err := env.User(user)
	require.NoError(t, err)
	return cfg
}

// initUser returns the config of a user bound to deploy/rbac's ClusterRole of `init` only.
func initUser(t *testing.T) *rest.Config {
	t.Helper()
	user := "cluster-provider-init-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	bindClusterRole(t, "init_role.yaml", user)
	cfg, err := env.User(user)
	require.NoError(t, err)
	return cfg
}

// bindClusterRole creates the ClusterRole of deploy/rbac/file under the name user and binds user
// to it.
func bindClusterRole(t *testing.T, file, user string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "rbac", file))
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{}
	require.NoError(t, yaml.UnmarshalStrict(data, role))
	role.Name = user
	require.NoError(t, env.Client.Create(t.Context(), role))
	require.NoError(t, env.Client.Create(t.Context(), &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}))
}

// sampleProviderConfig is deploy/samples/providerconfig.yaml, the one `make run` applies.
func sampleProviderConfig(t *testing.T) *providersv1alpha1.ProviderConfig {
	return readSample(t, "providerconfig.yaml", &providersv1alpha1.ProviderConfig{})
}

// readSample reads deploy/samples/<name> into obj, strictly.
func readSample[T client.Object](t *testing.T, name string, obj T) T {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "samples", name))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(data, obj))
	return obj
}

// assetsDir is the folder of the envtest binaries, which the operator's local backend runs.
func assetsDir(t *testing.T) string {
	t.Helper()
	dir, err := testenv.AssetsDir()
	require.NoError(t, err)
	return dir
}

// crdVersions maps the project's CRDs to their resourceVersions.
func crdVersions(t *testing.T) map[string]string {
	t.Helper()
	list := &apiextensionsv1.CustomResourceDefinitionList{}
	require.NoError(t, env.Client.List(t.Context(), list))
	out := map[string]string{}
	for _, crd := range list.Items {
		if crd.Spec.Group == clustersv1alpha1.GroupVersion.Group || crd.Spec.Group == providersv1alpha1.GroupVersion.Group {
			out[crd.Name] = crd.ResourceVersion
		}
	}
	return out
}

func httpOK(url string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
