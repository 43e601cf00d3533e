package e2e

import (
	"context"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// The drills of issue 18 that need the whole binary: the platform's API server goes away, the
// leader dies. Each runs real processes: the operator (built with -race under make test), the
// local clusters it starts, and the package's envtest API server.

const (
	// outage is how long the platform's API server is stopped.
	outage = 30 * time.Second
	// reconcilesWithin bounds how soon after the platform's API server is back a new
	// AccessRequest is Granted and a new Cluster has a status.
	reconcilesWithin = 5 * time.Second
)

// TestPlatformOutage stops the platform's API server for 30 s while a local cluster runs and is
// granted, with the lease settings of deploy/default. The operator neither exits nor loses its
// lease, the cluster's processes keep running and the cluster answers all along, and within 5 s of
// the API server's return the operator reconciles again: a new AccessRequest is Granted, a new
// Cluster gets its status (and is Ready later).
func TestPlatformOutage(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	const provider = "e2eout"
	stateDir := t.TempDir()
	op := runLocal(t, bin, kubeconfig, provider, stateDir,
		"--leader-elect", "--leader-election-namespace", "default") // the lease's defaults
	ctx := t.Context()
	pc, cl := localCluster(t, provider)
	cl = waitReady(t, cl)
	clusterDir := filepath.Join(stateDir, string(cl.UID))
	admin := clusterAdmin(t, clusterDir, cl.Status.APIServer)
	ar := clusterAccessRequest(t, cl)
	kubeconfigFile := waitKubeconfig(t, ar)
	pids := clusterPIDs(t, clusterDir)
	require.Len(t, pids, 3)
	holder := leaseHolder(t, provider)
	require.NotEmpty(t, holder)

	probe := startProbe(admin)
	defer probe.stop()
	down := time.Now()
	require.NoError(t, env.StopAPIServer())
	restarted := false
	defer func() {
		if !restarted { // the package's other tests need it
			assert.NoError(t, env.StartAPIServer())
		}
	}()
	tick := time.NewTicker(poll)
	for time.Since(down) < outage {
		<-tick.C
		require.False(t, op.exited(), "the operator exited during the outage")
	}
	tick.Stop()
	require.NoError(t, env.StartAPIServer())
	restarted = true
	back := time.Now()
	lost, _ := probe.stop()
	require.True(t, lost.IsZero(), "the local cluster stopped answering %s into the outage", lost.Sub(down))
	t.Logf("platform API server down for %s; the local cluster answered every 100 ms meanwhile", back.Sub(down).Round(time.Millisecond))

	// Reconciles again: a new request on the running cluster, a new Cluster.
	ar2 := clusterAccessRequest(t, cl)
	cl2 := readSample(t, "cluster.yaml", &clustersv1alpha1.Cluster{})
	cl2.Namespace, cl2.Spec.Profile = cl.Namespace, cl.Spec.Profile
	cl2.GenerateName, cl2.Name = "after-outage-", ""
	require.NoError(t, env.Client.Create(ctx, cl2))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &clustersv1alpha1.AccessRequest{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(ar2), got))
		assert.Equal(c, common.PhaseGranted, got.Status.Phase)
	}, reconcilesWithin, poll, "an AccessRequest created after the outage is Granted within %s", reconcilesWithin)
	granted := time.Since(back)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &clustersv1alpha1.Cluster{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(cl2), got))
		assert.NotEmpty(c, got.Status.Conditions)
	}, reconcilesWithin, poll, "a Cluster created after the outage has a status within %s", reconcilesWithin)
	waitReady(t, cl2)
	t.Logf("after the API server's return: AccessRequest Granted in %s, new Cluster Ready in %s",
		granted.Round(time.Millisecond), time.Since(back).Round(time.Millisecond))

	assert.ElementsMatch(t, pids, clusterPIDs(t, clusterDir), "the cluster's processes were not restarted")
	assert.Equal(t, holder, leaseHolder(t, provider), "the lease stayed with the same process")
	kubectlPath(t)
	out, err := kubectl(t, kubeconfigFile, "-n", "sample-apps", "get", "configmaps")
	assert.NoError(t, err, "the kubeconfig granted before the outage works: %s", out)
	assert.Contains(t, op.output.String(), "watches wait for it", "the operator said why it waits")

	require.NoError(t, env.Client.Delete(ctx, cl))
	require.NoError(t, env.Client.Delete(ctx, cl2))
	waitGone(t, cl, cl2)
	require.NoError(t, env.Client.Delete(ctx, pc))
}

// TestLeaderHandoff runs two operators with leader election on one state dir and kills the leader
// with SIGKILL. The standby takes the lease within the lease duration (and a few retry periods)
// and adopts the cluster: same endpoint, same data, the kubeconfig granted before works. The gap in
// which the cluster does not answer is measured and logged.
func TestLeaderHandoff(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	const (
		provider      = "e2eha"
		leaseDuration = 10 * time.Second
		retryPeriod   = time.Second
	)
	stateDir := t.TempDir()
	flags := []string{"--leader-elect", "--leader-election-namespace", "default",
		"--leader-elect-lease-duration=" + leaseDuration.String(), "--leader-elect-renew-deadline=8s",
		"--leader-elect-retry-period=" + retryPeriod.String()}
	leader := runLocal(t, bin, kubeconfig, provider, stateDir, flags...)
	require.Eventually(t, func() bool { return leaseHolder(t, provider) != "" }, readyTimeout, poll, "the first operator takes the lease")
	first := leaseHolder(t, provider)
	standby := runLocal(t, bin, kubeconfig, provider, stateDir, flags...)
	ctx := t.Context()

	_, cl := localCluster(t, provider)
	cl = waitReady(t, cl)
	endpoint := cl.Status.APIServer
	admin := clusterAdmin(t, filepath.Join(stateDir, string(cl.UID)), endpoint)
	_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "survives"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	kubeconfigFile := waitKubeconfig(t, clusterAccessRequest(t, cl))
	clusterDir := filepath.Join(stateDir, string(cl.UID))
	leaderPIDs := clusterPIDs(t, clusterDir)
	require.Len(t, leaderPIDs, 3)
	for _, pid := range leaderPIDs {
		require.Equal(t, leader.cmd.Process.Pid, parentPID(t, pid), "the leader runs the cluster")
	}

	probe := startProbe(admin)
	defer probe.stop()
	killed := time.Now()
	require.NoError(t, leader.cmd.Process.Kill())
	<-leader.done

	require.Eventually(t, func() bool {
		h := leaseHolder(t, provider)
		return h != "" && h != first
	}, leaseDuration+5*retryPeriod, poll, "the standby takes the lease within the lease duration")
	lease := &coordinationv1.Lease{}
	require.NoError(t, env.Client.Get(ctx, leaseKey(provider), lease))
	takeover := lease.Spec.AcquireTime.Sub(killed)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		pids := clusterPIDs(t, clusterDir)
		require.Len(c, pids, 3)
		for _, pid := range pids {
			assert.Equal(c, standby.cmd.Process.Pid, parentPID(t, pid))
		}
		got, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "survives", metav1.GetOptions{})
		require.NoError(c, err)
		assert.Equal(c, "v", got.Data["k"])
	}, clusterReadyWithin, poll, "the standby adopts the cluster with its data, on %s", endpoint)
	// The probe's own requests see the cluster back a little later than the check above did (its
	// goroutine, one request per 100 ms): awaited, not read at once.
	require.Eventually(t, probe.back, clusterReadyWithin, poll, "the probe's requests are answered again")
	lost, answered := probe.stop()
	require.False(t, lost.IsZero() || answered.IsZero(), "the cluster went down with its leader and came back (down %v, back %v)", lost, answered)
	again := waitReady(t, cl)
	assert.Equal(t, endpoint, again.Status.APIServer, "same endpoint")
	kubectlPath(t) // from the test's goroutine: without kubectl it skips, or fails with CI set
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl(t, kubeconfigFile, "-n", "sample-apps", "get", "configmaps")
		assert.NoError(c, err, "the kubeconfig granted before the handoff works: %s", out)
	}, convergeWithin, poll)
	t.Logf("leader killed: lease taken after %s (lease duration %s, retry period %s); the cluster did not answer for %s (down %s after the kill, back %s after it)",
		takeover.Round(time.Millisecond), leaseDuration, retryPeriod, answered.Sub(lost).Round(time.Millisecond),
		lost.Sub(killed).Round(time.Millisecond), answered.Sub(killed).Round(time.Millisecond))

	require.NoError(t, env.Client.Delete(ctx, cl))
	waitGone(t, cl)
	require.NoError(t, standby.cmd.Process.Signal(syscall.SIGTERM))
	<-standby.done
	require.NoError(t, standby.err, "the new leader exits 0 on SIGTERM")
}

// localCluster creates a ProviderConfig like the sample for provider and a Cluster of its profile
// in a new namespace.
func localCluster(t *testing.T, provider string) (*providersv1alpha1.ProviderConfig, *clustersv1alpha1.Cluster) {
	t.Helper()
	pc := sampleProviderConfig(t)
	pc.GenerateName, pc.Name = provider+"-", ""
	require.NoError(t, env.Client.Create(t.Context(), pc))
	cl := readSample(t, "cluster.yaml", &clustersv1alpha1.Cluster{})
	cl.Namespace = testNamespace(t)
	cl.Spec.Profile = "default." + provider + "." + pc.Name
	require.NoError(t, env.Client.Create(t.Context(), cl))
	return pc, cl
}

// clusterAccessRequest creates a request like the sample for cl.
func clusterAccessRequest(t *testing.T, cl *clustersv1alpha1.Cluster) *clustersv1alpha1.AccessRequest {
	t.Helper()
	ar := readSample(t, "accessrequest.yaml", &clustersv1alpha1.AccessRequest{})
	ar.GenerateName, ar.Name = ar.Name+"-", ""
	ar.Namespace, ar.Spec.ClusterRef.Namespace, ar.Spec.ClusterRef.Name = cl.Namespace, cl.Namespace, cl.Name
	require.NoError(t, env.Client.Create(t.Context(), ar))
	return ar
}

// waitGone waits until the Clusters are deleted.
func waitGone(t *testing.T, cls ...*clustersv1alpha1.Cluster) {
	t.Helper()
	for _, cl := range cls {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(cl), &clustersv1alpha1.Cluster{})
			assert.True(c, apierrors.IsNotFound(err), "Cluster %s still exists (%v)", cl.Name, err)
		}, convergeWithin, poll)
	}
}

// leaseKey names provider's leader election lease in the namespace the tests elect in.
func leaseKey(provider string) client.ObjectKey {
	return client.ObjectKey{Namespace: "default", Name: provider + ".cluster-provider.openmcp.cloud"}
}

// leaseHolder is the holder of provider's leader election lease, empty if none.
func leaseHolder(t *testing.T, provider string) string {
	t.Helper()
	lease := &coordinationv1.Lease{}
	err := env.Client.Get(t.Context(), leaseKey(provider), lease)
	if client.IgnoreNotFound(err) != nil {
		t.Fatalf("reading the lease: %v", err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// parentPID is the parent of process pid (field 4 of /proc/<pid>/stat); 0 if it has ended.
func parentPID(t *testing.T, pid int) int {
	t.Helper()
	fields, err := testenv.ProcStat(pid)
	if err != nil {
		return 0
	}
	ppid, err := strconv.Atoi(fields[1])
	require.NoError(t, err)
	return ppid
}

// probe asks a cluster's API server for a namespace every 100 ms and records when it first failed
// to answer and when it first answered again after that.
type probe struct {
	cancel       context.CancelFunc
	done         chan struct{}
	mu           sync.Mutex
	lost, answer time.Time
}

func startProbe(c kubernetes.Interface) *probe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &probe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		pollNamespace(ctx, c, 100*time.Millisecond, time.Second, func(sent time.Time, took time.Duration, err error) {
			now := sent.Add(took)
			p.mu.Lock()
			defer p.mu.Unlock()
			switch {
			case err != nil && p.lost.IsZero():
				p.lost = now
			case err == nil && !p.lost.IsZero() && p.answer.IsZero():
				p.answer = now
			}
		})
	}()
	return p
}

// pollNamespace GETs namespace default through c every interval until ctx ends, each request
// bounded by timeout, and hands record each request's send time, duration and error. A request cut
// off by ctx's end is not recorded: it was stopped, not a failure of the cluster.
func pollNamespace(ctx context.Context, c kubernetes.Interface, interval, timeout time.Duration, record func(sent time.Time, took time.Duration, err error)) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		reqCtx, cancel := context.WithTimeout(ctx, timeout)
		sent := time.Now()
		_, err := c.CoreV1().Namespaces().Get(reqCtx, "default", metav1.GetOptions{})
		took := time.Since(sent)
		cancel()
		if ctx.Err() != nil {
			return
		}
		record(sent, took, err)
	}
}

// back reports whether the probe saw the cluster stop answering and answer again.
func (p *probe) back() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.lost.IsZero() && !p.answer.IsZero()
}

// stop ends the probe and returns when the cluster stopped and started answering.
func (p *probe) stop() (lost, answered time.Time) {
	p.cancel()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost, p.answer
}
