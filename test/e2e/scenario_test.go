package e2e

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend/kind"
	"github.com/openmcp-local/cluster-provider/test/idp"
	"github.com/openmcp-local/cluster-provider/test/scenario"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestScenario runs the scenario suite against the binary, run as a process against envtest with
// the local backend, as the user the generated ClusterRole binds.
func TestScenario(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	probes := "127.0.0.1:" + freePort(t)
	op := start(t, bin, "run", "--provider-name", "e2es", "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", probes,
		"--local-binaries", assetsDir(t), "--state-dir", t.TempDir())
	require.Eventually(t, func() bool { return op.exited() || httpOK("http://"+probes+"/readyz") },
		readyTimeout, poll, "/readyz never answered 200")
	scenario.Run(t, scenario.Target{
		Client: env.Client, ProviderName: "e2es", Environment: "default",
		ProviderConfig: sampleProviderConfig(t), Within: clusterReadyWithin, IdP: idp.Start(t),
	})
	require.False(t, op.exited(), "cluster-provider exited during the scenario")
}

// TestScenarioKindBackend runs the scenario suite against the binary with --kind-backend and a
// ProviderConfig of backend kind: its Cluster is a real kind cluster made from the node image
// KIND_NODE_IMAGE (make kind-image; make e2e-kind sets it). Where it is not set, make test skips
// this: it needs a Docker engine and the node image, a 30-minute build when cold.
func TestScenarioKindBackend(t *testing.T) {
	image := os.Getenv("KIND_NODE_IMAGE")
	if image == "" {
		t.Skip("KIND_NODE_IMAGE is not set: this runs under make e2e-kind, which builds the node image")
	}
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	probes := "127.0.0.1:" + freePort(t)
	op := start(t, bin, "run", "--provider-name", "e2ekind", "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", probes,
		"--kind-backend", "--local-binaries", assetsDir(t), "--state-dir", t.TempDir())
	require.Eventually(t, func() bool { return op.exited() || httpOK("http://"+probes+"/readyz") },
		readyTimeout, poll, "/readyz never answered 200")
	// The version the node image runs, from its label (hack/kind-image.sh).
	out, err := exec.Command("docker", "image", "inspect", "-f", `{{index .Config.Labels "io.cluster-provider.kubernetes"}}`, image).Output()
	require.NoError(t, err, "docker image inspect %s", image)
	version := strings.TrimPrefix(strings.TrimSpace(string(out)), "v")
	require.NotEmpty(t, version, "node image %s has no io.cluster-provider.kubernetes label: build it with make kind-image", image)
	pc := &providersv1alpha1.ProviderConfig{Spec: providersv1alpha1.ProviderConfigSpec{
		Backend:           providersv1alpha1.BackendKind,
		Kind:              &providersv1alpha1.KindBackendConfig{NodeImages: map[string]string{version: image}},
		SupportedVersions: []clustersv1alpha1.SupportedK8sVersion{{Version: version}},
		DefaultVersion:    version,
	}}
	scenario.Run(t, scenario.Target{
		Client: env.Client, ProviderName: "e2ekind", Environment: "default",
		ProviderConfig: pc, Within: 5 * time.Minute, IdP: idp.StartAt(t, kindGateway(t)),
		ClusterGone: func(t *testing.T, uid types.UID) {
			assert.NotContains(t, kindClusters(t), kind.ClusterName(uid), "the Cluster's kind cluster is deleted with it")
		},
	})
	require.False(t, op.exited(), "cluster-provider exited during the scenario")
}

// TestScenarioOnKind runs the scenario suite against the operator that `make e2e-kind` deployed
// into a kind cluster (deploy/default); E2E_KIND_KUBECONFIG names that cluster's kubeconfig.
// The local clusters' endpoints are pod addresses: the suite reaches them through
// `kubectl port-forward` to the operator's pod, on the same port (their serving certificates name
// 127.0.0.1).
func TestScenarioOnKind(t *testing.T) {
	kubeconfig := os.Getenv("E2E_KIND_KUBECONFIG")
	if kubeconfig == "" {
		t.Skip("E2E_KIND_KUBECONFIG is not set: this runs under make e2e-kind, which needs a Docker engine")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	pc := sampleProviderConfig(t)
	pc.Spec.SupportedVersions, pc.Spec.DefaultVersion = nil, "" // whatever the image's binaries serve
	scenario.Run(t, scenario.Target{
		Client: c, ProviderName: envOr("E2E_PROVIDER_NAME", "local"), Environment: envOr("E2E_ENVIRONMENT", "default"),
		ProviderConfig: pc, Within: 5 * time.Minute, IdP: idp.StartAt(t, kindGateway(t)),
		Reach: func(t *testing.T, endpoint string) string { return portForward(t, kubeconfig, endpoint) },
	})
}

// portForward forwards the port of endpoint from the operator's pod to 127.0.0.1 until the test
// ends, and returns the local URL. The operator is Deployment $E2E_OPERATOR_DEPLOYMENT (default
// cluster-provider) in namespace $E2E_OPERATOR_NAMESPACE (default cluster-provider-system, where
// deploy/default puts it; openMCP's operator makes cp-<name> in its own namespace).
func portForward(t *testing.T, kubeconfig, endpoint string) string {
	t.Helper()
	port, err := scenario.Port(endpoint)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", kubeconfig, "-n", envOr("E2E_OPERATOR_NAMESPACE", "cluster-provider-system"),
		"port-forward", "deploy/"+envOr("E2E_OPERATOR_DEPLOYMENT", "cluster-provider"), port+":"+port)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() { // "Forwarding from 127.0.0.1:<port> -> <port>"
		if strings.HasPrefix(sc.Text(), "Forwarding from 127.0.0.1:") {
			go func() {
				for sc.Scan() {
				}
			}()
			return "https://127.0.0.1:" + port
		}
	}
	t.Fatalf("kubectl port-forward to port %s did not start: %v", port, sc.Err())
	return ""
}

// kindClusters lists the kind clusters that have node containers, by kind's label.
func kindClusters(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("docker", "ps", "-a", "--filter", "label=io.x-k8s.kind.cluster",
		"--format", `{{.Label "io.x-k8s.kind.cluster"}}`).Output()
	require.NoError(t, err)
	return strings.Fields(string(out))
}

// kindGateway is the host's address on kind's Docker network: what kind nodes, and pods through
// them, reach this machine at (an identity provider listens there).
func kindGateway(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("docker", "network", "inspect", "kind", "-f", "{{range .IPAM.Config}}{{.Gateway}} {{end}}").Output()
	require.NoError(t, err, "docker network inspect kind: make e2e-kind creates the network with its platform cluster")
	for _, gw := range strings.Fields(string(out)) {
		if ip := net.ParseIP(gw); ip != nil && ip.To4() != nil {
			return gw
		}
	}
	t.Fatalf("kind's Docker network has no IPv4 gateway: %q", out)
	return ""
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
