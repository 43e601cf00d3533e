package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/scheduler"
)

// TestSchedulerFlow is the openMCP flow of docs/access.md, through the binary with the scheduler on
// and the sample --config of `make run`: the sample ClusterRequest gets a new Cluster of its own,
// which becomes Ready; the sample AccessRequest by requestRef yields a kubeconfig that kubectl
// uses with the stock role view; deleting the request deletes its Cluster.
func TestSchedulerFlow(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	ctx := t.Context()
	pc := sampleProviderConfig(t)
	pc.GenerateName, pc.Name = "sched-", ""
	require.NoError(t, env.Client.Create(ctx, pc))

	// The sample configuration, for this operator's profile.
	sample, err := os.ReadFile(filepath.Join("..", "..", "deploy", "samples", "config", "operator.yaml"))
	require.NoError(t, err)
	config := filepath.Join(t.TempDir(), "config.yaml")
	profile := "default.e2esched." + pc.Name
	require.NoError(t, os.WriteFile(config, []byte(strings.ReplaceAll(string(sample), "default.local.local", profile)), 0o600))

	probes := "127.0.0.1:" + freePort(t)
	op := start(t, bin, "run", "--provider-name", "e2esched", "--kubeconfig", kubeconfig,
		"--controllers", "accessrequest,providerconfig,scheduler", "--config", config,
		"--metrics-bind-address", "0", "--health-probe-bind-address", probes,
		"--local-binaries", assetsDir(t), "--state-dir", t.TempDir())
	require.Eventually(t, func() bool { return op.exited() || httpOK("http://"+probes+"/readyz") },
		readyTimeout, poll, "/readyz never answered 200")
	require.False(t, op.exited(), "cluster-provider exited before it was ready")

	ns := testNamespace(t)
	cr := readSample(t, "clusterrequest.yaml", &clustersv1alpha1.ClusterRequest{})
	cr.Namespace = ns
	require.NoError(t, env.Client.Create(ctx, cr))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(cr), cr))
		assert.Equal(c, common.PhaseGranted, cr.Status.Phase, "conditions: %+v", cr.Status.Conditions)
	}, convergeWithin, poll, "ClusterRequest %s is Granted", cr.Name)
	require.NotNil(t, cr.Status.Cluster)
	assert.Equal(t, "exclusive-"+scheduler.RequestHash(ns, cr.Name), cr.Status.Cluster.Name)
	cl := &clustersv1alpha1.Cluster{}
	require.NoError(t, env.Client.Get(ctx, cr.Status.Cluster.Key(ns), cl))
	assert.Equal(t, profile, cl.Spec.Profile)
	assert.Contains(t, cl.Finalizers, scheduler.RequestFinalizer(cr.UID))
	cl = waitReady(t, cl)

	ar := readSample(t, "accessrequest-by-request.yaml", &clustersv1alpha1.AccessRequest{})
	ar.Namespace, ar.Spec.RequestRef.Namespace = ns, ns
	require.NoError(t, env.Client.Create(ctx, ar))
	kubeconfigFile := waitKubeconfig(t, ar)
	kubectlPath(t) // skips the test without kubectl, from the test's goroutine
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl(t, kubeconfigFile, "get", "pods", "--all-namespaces")
		require.NoError(c, err, "%s", out)
	}, convergeWithin, poll, "kubectl get pods -A with view, through the ClusterRequest")

	require.NoError(t, env.Client.Delete(ctx, ar))
	require.NoError(t, env.Client.Delete(ctx, cr))
	for _, o := range []client.Object{ar, cr, cl} {
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(o), o.DeepCopyObject().(client.Object)))
		}, clusterReadyWithin, poll, "%T %s is deleted", o, o.GetName())
	}
	require.NoError(t, op.cmd.Process.Signal(syscall.SIGTERM))
	<-op.done
	require.NoError(t, op.err, "cluster-provider exits 0 on SIGTERM")
	assert.NotContains(t, op.output.String(), "forbidden", "the generated ClusterRole lacks a permission")
}
