package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// clusterReadyWithin bounds a local cluster's start by the binary (built with -race under make
// test) on a busy machine.
const clusterReadyWithin = 2 * time.Minute

// TestLocalClusterSurvivesKill9 runs the binary with the local backend: the sample Cluster becomes
// Ready; kill -9 of the operator takes the cluster's processes with it (parent-death signal); the
// restarted operator adopts the cluster folder, so the cluster comes back on the same endpoint with
// its data; deleting the Cluster removes everything.
func TestLocalClusterSurvivesKill9(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	stateDir := t.TempDir()
	ctx := t.Context()
	run := func() *process { return runLocal(t, bin, kubeconfig, "e2ek", stateDir) }
	op := run()

	pc := sampleProviderConfig(t)
	pc.GenerateName, pc.Name = "kill9-", ""
	require.NoError(t, env.Client.Create(ctx, pc))
	cl := readSample(t, "cluster.yaml", &clustersv1alpha1.Cluster{})
	cl.Namespace = testNamespace(t)
	cl.Spec.Profile = "default.e2ek." + pc.Name
	require.NoError(t, env.Client.Create(ctx, cl))
	cl = waitReady(t, cl)
	endpoint := cl.Status.APIServer
	clusterDir := filepath.Join(stateDir, string(cl.UID))
	admin := clusterAdmin(t, clusterDir, endpoint)
	_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "survives"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pids := clusterPIDs(t, clusterDir)
	require.Len(t, pids, 3, "etcd, kube-apiserver and kube-controller-manager of %s", clusterDir)

	// The README's quickstart: the sample AccessRequest, its kubeconfig used by kubectl.
	ar := readSample(t, "accessrequest.yaml", &clustersv1alpha1.AccessRequest{})
	ar.Namespace, ar.Spec.ClusterRef.Namespace, ar.Spec.ClusterRef.Name = cl.Namespace, cl.Namespace, cl.Name
	require.NoError(t, env.Client.Create(ctx, ar))
	kubeconfigFile := waitKubeconfig(t, ar)
	kubectlPath(t) // skips the test without kubectl, from the test's goroutine
	// What the request grants is awaited: the cluster's API server authorizes with the RBAC
	// objects its informers have seen, which may lag behind the grant's writes.
	var out string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var err error
		out, err = kubectl(t, kubeconfigFile, "get", "namespaces")
		require.NoError(c, err, "%s", out)
	}, convergeWithin, poll, "kubectl get namespaces")
	assert.Contains(t, out, "sample-apps", "the permission's namespace was created")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl(t, kubeconfigFile, "-n", "sample-apps", "create", "configmap", "mine")
		require.NoError(c, err, "%s", out)
	}, convergeWithin, poll, "kubectl create configmap in sample-apps")
	out, err = kubectl(t, kubeconfigFile, "create", "namespace", "not-allowed")
	require.Error(t, err)
	assert.Contains(t, out, "forbidden")
	// The stock ClusterRole view, aggregated by the cluster's kube-controller-manager.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl(t, kubeconfigFile, "get", "pods", "--all-namespaces")
		require.NoError(c, err, "%s", out)
	}, convergeWithin, poll, "kubectl get pods -A with view")
	out, err = kubectl(t, kubeconfigFile, "auth", "can-i", "list", "deployments.apps", "--all-namespaces")
	require.NoError(t, err, "%s", out)
	assert.Equal(t, "yes", strings.TrimSpace(out), "view covers deployments")

	require.NoError(t, op.cmd.Process.Kill())
	<-op.done
	require.Eventually(t, func() bool {
		for _, pid := range pids {
			if !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				return false
			}
		}
		return true
	}, stopWithin, poll, "the cluster's processes %v die with the operator", pids)

	op = run()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "survives", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, "v", got.Data["k"])
	}, clusterReadyWithin, poll, "the adopted cluster answers on %s with its data", endpoint)
	again := waitReady(t, cl)
	assert.Equal(t, endpoint, again.Status.APIServer, "same endpoint")
	// The Cluster's status may still be the one from before the kill; the restarted API server
	// authorizes the token once its RBAC informers have synced.
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl(t, kubeconfigFile, "-n", "sample-apps", "get", "configmap", "mine")
		assert.NoError(c, err, "the granted kubeconfig works after the restart: %s", out)
	}, clusterReadyWithin, poll)

	require.NoError(t, env.Client.Delete(ctx, cl))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(cl), &clustersv1alpha1.Cluster{}))
	}, convergeWithin, poll, "the Cluster is deleted")
	assert.NoDirExists(t, clusterDir)
	assert.Empty(t, clusterPIDs(t, clusterDir), "no process of the cluster is left")
	require.NoError(t, op.cmd.Process.Signal(syscall.SIGTERM))
	<-op.done
	require.NoError(t, op.err, "cluster-provider exits 0 on SIGTERM")
	assert.NotContains(t, op.output.String(), "forbidden", "the generated ClusterRole lacks a permission")
}

// runLocal starts `cluster-provider run` with the local backend on stateDir, as provider, with
// extra flags, and returns once it is ready.
func runLocal(t *testing.T, bin, kubeconfig, provider, stateDir string, extra ...string) *process {
	t.Helper()
	probes := "127.0.0.1:" + freePort(t)
	op := start(t, bin, append([]string{"run", "--provider-name", provider, "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", probes,
		"--local-binaries", assetsDir(t), "--state-dir", stateDir}, extra...)...)
	require.Eventually(t, func() bool { return op.exited() || httpOK("http://"+probes+"/readyz") },
		readyTimeout, poll, "/readyz never answered 200")
	require.False(t, op.exited(), "cluster-provider exited before it was ready")
	return op
}

func testNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	require.NoError(t, env.Client.Create(t.Context(), ns))
	return ns.Name
}

// waitReady waits until the Cluster is Ready for its current generation.
func waitReady(t *testing.T, cl *clustersv1alpha1.Cluster) *clustersv1alpha1.Cluster {
	t.Helper()
	got := &clustersv1alpha1.Cluster{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, env.Client.Get(context.Background(), client.ObjectKeyFromObject(cl), got))
		assert.Equal(c, common.PhaseReady, got.Status.Phase, "conditions: %+v", got.Status.Conditions)
		assert.Equal(c, got.Generation, got.Status.ObservedGeneration)
	}, clusterReadyWithin, poll, "Cluster %s is Ready", cl.Name)
	return got
}

// clusterAdmin is a client of the local cluster in dir with the operator's admin certificate, read
// from the cluster's folder: the operator never publishes it.
func clusterAdmin(t *testing.T, dir, endpoint string) kubernetes.Interface {
	t.Helper()
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dir, "pki", name))
		require.NoError(t, err)
		return data
	}
	cfg := &rest.Config{Host: endpoint, TLSClientConfig: rest.TLSClientConfig{
		CAData: read("ca.crt"), CertData: read("admin.crt"), KeyData: read("admin.key"),
	}}
	return kubernetes.NewForConfigOrDie(cfg)
}

// clusterPIDs finds the processes whose command line names the cluster folder dir.
func clusterPIDs(t *testing.T, dir string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmdline), dir+"/") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitKubeconfig waits until ar is Granted and writes the kubeconfig of its Secret to a file.
func waitKubeconfig(t *testing.T, ar *clustersv1alpha1.AccessRequest) string {
	t.Helper()
	got := &clustersv1alpha1.AccessRequest{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, env.Client.Get(context.Background(), client.ObjectKeyFromObject(ar), got))
		assert.Equal(c, common.PhaseGranted, got.Status.Phase, "conditions: %+v", got.Status.Conditions)
	}, convergeWithin, poll, "AccessRequest %s is Granted", ar.Name)
	require.NotNil(t, got.Status.SecretRef)
	s := &corev1.Secret{}
	require.NoError(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: ar.Namespace, Name: got.Status.SecretRef.Name}, s))
	file := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(file, s.Data[clustersv1alpha1.SecretKeyKubeconfig], 0o600))
	return file
}

// kubectl runs the kubectl on the PATH with kubeconfig and returns its combined output.
func kubectl(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	// Not kubectlPath: this may run in an Eventually's goroutine, where a skip or fatal would be
	// lost (testify counts a skipped condition as met). The test calls kubectlPath first.
	path, err := exec.LookPath("kubectl")
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(t.Context(), path, append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}

// kubectlPath is the kubectl on the PATH; without one the test is skipped, or fails with CI set. A goroutine other than
// the test's (an Eventually condition) may call kubectl only once the test's goroutine has called
// kubectlPath: Skip works from the test's goroutine only.
func kubectlPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		testenv.MissingTool(t, "kubectl on the PATH", err)
	}
	return path
}
