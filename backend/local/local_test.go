package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// Deadlines of the real-process tests: a cold kube-apiserver takes seconds, more under -race.
const (
	readyWithin = 90 * time.Second
	stopWithin  = 30 * time.Second
)

// harness runs a Backend until the test ends and collects its notifications.
type harness struct {
	t        *testing.T
	b        *Backend
	notified chan backend.Ref
	cancel   context.CancelFunc
	done     chan error
}

func newCluster(name string) *clustersv1alpha1.Cluster {
	return &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uuid.NewUUID()},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: "default.test.local"},
	}
}

// startBackend starts a Backend on stateDir with the envtest binaries; existing lists the
// Clusters it may adopt.
func startBackend(t *testing.T, stateDir string, maxClusters int, existing ...*clustersv1alpha1.Cluster) *harness {
	t.Helper()
	return startBackendOptions(t, Options{StateDir: stateDir, MaxClusters: maxClusters}, existing...)
}

// startBackendWith is startBackend with the given binaries.
func startBackendWith(t *testing.T, bins []Binaries, stateDir string, maxClusters int, existing ...*clustersv1alpha1.Cluster) *harness {
	t.Helper()
	return startBackendOptions(t, Options{Binaries: bins, StateDir: stateDir, MaxClusters: maxClusters}, existing...)
}

// startBackendOptions is startBackend with opts (the envtest binaries when opts has none); it
// sets the timing, Notify and ListClusters.
func startBackendOptions(t *testing.T, opts Options, existing ...*clustersv1alpha1.Cluster) *harness {
	t.Helper()
	var err error
	if opts.Binaries == nil {
		assets, err := testenv.AssetsDir()
		require.NoError(t, err)
		opts.Binaries, err = LoadBinaries(t.Context(), []string{assets})
		require.NoError(t, err)
	}
	h := &harness{t: t, notified: make(chan backend.Ref, 100), done: make(chan error, 1)}
	opts.StopGrace = 5 * time.Second
	// Short, so that a hung controller manager is restarted within seconds.
	opts.HealthInterval = 200 * time.Millisecond
	opts.Notify = func(r backend.Ref) {
		select {
		case h.notified <- r:
		default:
		}
	}
	opts.ListClusters = func(context.Context) ([]clustersv1alpha1.Cluster, error) {
		out := make([]clustersv1alpha1.Cluster, len(existing))
		for i, cl := range existing {
			out[i] = *cl
		}
		return out, nil
	}
	h.b, err = New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.b.Start(ctx) }()
	t.Cleanup(h.stop)
	return h
}

// stop stops the Backend and waits until every cluster stopped.
func (h *harness) stop() {
	h.cancel()
	select {
	case err := <-h.done:
		assert.NoError(h.t, err)
		h.done <- err // stop may be called again
	case <-time.After(stopWithin):
		h.t.Error("the backend did not stop")
	}
}

// await calls Ensure after every notification (and once at first) until cond holds for the
// state, or fails the test at the deadline.
func (h *harness) await(cl *clustersv1alpha1.Cluster, what string, cond func(backend.State) bool) backend.State {
	h.t.Helper()
	return h.awaitWant(cl, backend.Want{Version: "1.37.1"}, what, cond)
}

// awaitWant is await with the version cl asks for.
func (h *harness) awaitWant(cl *clustersv1alpha1.Cluster, want backend.Want, what string, cond func(backend.State) bool) backend.State {
	h.t.Helper()
	return h.awaitOn(h.b, cl, want, what, cond)
}

// awaitOn is awaitWant through be: the harness's Backend, or one bound to a ProviderConfig.
func (h *harness) awaitOn(be backend.Backend, cl *clustersv1alpha1.Cluster, want backend.Want, what string, cond func(backend.State) bool) backend.State {
	h.t.Helper()
	deadline := time.After(readyWithin)
	for {
		s, err := be.Ensure(h.t.Context(), cl, want)
		require.NoError(h.t, err)
		if cond(s) {
			return s
		}
		retry := time.After(s.RetryAfter + time.Second) // the backend starting: no notification
		select {
		case <-h.notified:
		case <-retry:
		case <-deadline:
			h.t.Fatalf("%s: not within %s; last state: ready %v, %s: %s\n%s", what, readyWithin, s.Ready, s.Reason, s.Message, logTails(h.b.Dir(cl.UID)))
		}
	}
}

// logTails returns the end of the cluster's process logs, for a failure message.
func logTails(dir string) string {
	var out string
	for _, f := range []string{etcdLogFile, apiLogFile} {
		data, _ := os.ReadFile(filepath.Join(dir, logDir, f))
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		out += "--- " + f + " ---\n" + string(data) + "\n"
	}
	return out
}

func ready(s backend.State) bool { return s.Ready }

// complete: the API server serves and the controller manager runs its controllers.
func complete(s backend.State) bool {
	kcm := s.Part(backend.PartControllerManager)
	return s.Ready && kcm != nil && kcm.Ready
}

// dataLost is what s says of the cluster's lost data (its Provisioned part of reason DataLost),
// or "".
func dataLost(s backend.State) string {
	if p := s.Part(backend.PartProvisioned); p != nil && p.Reason == backend.ReasonDataLost {
		return p.Message
	}
	return ""
}

// restarts is how many times the cluster's processes restarted, as its provider status says.
func restarts(s backend.State) int {
	ps, _ := s.ProviderStatus.(providerStatus)
	return ps.Restarts
}

func portOpen(endpointURL string) bool {
	host := endpointURL[len("https://"):]
	c, err := net.DialTimeout("tcp", host, time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// cmdline is the arguments of process pid.
func cmdline(t *testing.T, pid int) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
}

func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestClusterLifecycle runs one real cluster through everything a cluster lives through: start,
// crashes of each process, a restart of the operator with adoption, and deletion. One cluster
// serves every step, to keep the test's CPU cost to a few control-plane starts.
func TestClusterLifecycle(t *testing.T) {
	stateDir := t.TempDir()
	cl := newCluster("one")
	staleUID := string(uuid.NewUUID())
	stale := filepath.Join(stateDir, staleUID)
	require.NoError(t, os.MkdirAll(filepath.Join(stale, "etcd"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(stale, "etcd", "data"), []byte("someone's data"), 0o600))
	quarantined := testutil.ToFloat64(metricQuarantined)

	h := startBackend(t, stateDir, 1, cl)
	s := h.await(cl, "complete", complete)
	checkQuarantined(t, stateDir, stale, staleUID, quarantined)
	assert.Equal(t, "1.37.1", s.Version, "the running API server's /version")
	assert.Equal(t, backend.ReasonRunning, s.Reason)
	assert.Equal(t, s.Endpoint, s.Endpoints[backend.EndpointAPIServerExternal])
	assert.Contains(t, s.Info, "local v1.37.1 :")
	endpoint := s.Endpoint

	// The folder: keys 0600, the record, the authentication config.
	dir := h.b.Dir(cl.UID)
	m := checkFolder(t, dir, endpoint)

	// The admin config works, RBAC is on, and data goes in.
	cfg, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	cs := kubernetes.NewForConfigOrDie(cfg)
	// The service range is the default one, recorded, and the kubernetes Service is in it.
	assert.Equal(t, DefaultServiceCIDR, m.ServiceCIDR)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		svc, err := cs.CoreV1().Services("default").Get(t.Context(), "kubernetes", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, "198.18.0.1", svc.Spec.ClusterIP)
		}
	}, readyWithin, 200*time.Millisecond)
	view, err := cs.RbacV1().ClusterRoles().Get(t.Context(), "view", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, view.Rules, "a complete cluster's view role is aggregated from the start")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kept"}, Data: map[string]string{"k": "v"}}
	_, err = cs.CoreV1().ConfigMaps("default").Create(t.Context(), cm, metav1.CreateOptions{})
	require.NoError(t, err)

	t.Run("capacity", func(t *testing.T) {
		_, err := h.b.Ensure(t.Context(), newCluster("two"), backend.Want{Version: "1.37.1"})
		require.Error(t, err)
		assert.True(t, backend.IsReason(err, backend.ReasonCapacityExhausted), "%v", err)
		assert.Contains(t, err.Error(), "--local-max-clusters")
	})

	t.Run("complete control plane", func(t *testing.T) { checkComplete(t, cs, s.CABundle) })
	t.Run("etcd is reachable only through its socket", func(t *testing.T) { checkEtcdPrivate(t, dir, h.b.PIDs(cl.UID)[procEtcd]) })

	for _, proc := range []string{procAPIServer, procEtcd, procControllerManager} {
		t.Run("kill -9 "+proc, func(t *testing.T) { checkKillRecovered(t, h, cl, cs, proc) })
	}

	t.Run("a hung controller manager is restarted", func(t *testing.T) { checkHungControllerManagerRestarted(t, h, cl) })

	// A hung API server or etcd (alive, answering nothing) was never noticed after Ready: only the
	// controller manager had a liveness check (issue 25, item 4).
	for _, proc := range []string{procAPIServer, procEtcd} {
		t.Run("a hung "+proc+" is restarted", func(t *testing.T) { checkHungRestarted(t, h, cl, cs, proc) })
	}

	outer := t // the second backend must outlive this subtest
	t.Run("operator restart adopts the cluster", func(t *testing.T) {
		h = checkRestartAdopts(t, outer, h, cl, stateDir, endpoint)
	})

	t.Run("delete", func(t *testing.T) { checkDeleted(t, h, cl, endpoint, dir) })
}

// checkQuarantined checks that the folder stale of the Cluster staleUID, which the backend cannot
// find, was moved aside with everything in it, never deleted, and counted (the metric was
// quarantined before).
func checkQuarantined(t *testing.T, stateDir, stale, staleUID string, quarantined float64) {
	assert.NoDirExists(t, stale, "the folder of a Cluster that is not found is moved away")
	moved, err := filepath.Glob(filepath.Join(stateDir, QuarantineDir, staleUID+"-*"))
	require.NoError(t, err)
	require.Len(t, moved, 1, "moved to %s/<uid>-<time>", QuarantineDir)
	data, err := os.ReadFile(filepath.Join(moved[0], "etcd", "data"))
	require.NoError(t, err)
	assert.Equal(t, "someone's data", string(data), "with everything in it")
	assert.Equal(t, quarantined+1, testutil.ToFloat64(metricQuarantined))
}

// checkFolder checks the cluster's folder dir: its keys are 0600 and its record names the
// namespace and the port of endpoint. It returns the record.
func checkFolder(t *testing.T, dir, endpoint string) meta {
	for _, f := range []string{caKeyFile, servingKeyFile, adminKeyFile, saKeyFile} {
		fi, err := os.Stat(filepath.Join(dir, pkiDir, f))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
	}
	m, err := readMeta(dir)
	require.NoError(t, err)
	assert.Equal(t, "ns", m.Namespace)
	assert.Equal(t, endpoint, "https://127.0.0.1:"+strconv.Itoa(m.Ports.APIServer))
	return m
}

// checkKillRecovered kills proc of cl with SIGKILL and checks that the state says so and that
// the cluster comes back complete with a new process and its data.
func checkKillRecovered(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster, cs kubernetes.Interface, proc string) {
	before, _ := h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	pid := h.b.PIDs(cl.UID)[proc]
	require.NotZero(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	if proc == procControllerManager {
		down := h.await(cl, "controller manager not Ready after the kill", func(s backend.State) bool { return !s.Part(backend.PartControllerManager).Ready })
		assert.Equal(t, backend.ReasonRestarting, down.Part(backend.PartControllerManager).Reason)
		assert.Contains(t, down.Part(backend.PartControllerManager).Message, proc+" exited (signal: killed)")
		assert.True(t, down.Ready, "the API server serves on")
	} else {
		down := h.await(cl, "not Ready after the kill", func(s backend.State) bool { return !s.Ready })
		assert.Equal(t, backend.ReasonRestarting, down.Reason)
		assert.Contains(t, down.Message, proc+" exited (signal: killed)")
	}
	up := h.await(cl, "complete again", complete)
	assert.Equal(t, restarts(before)+1, restarts(up))
	assert.NotEqual(t, pid, h.b.PIDs(cl.UID)[proc], "a new process")
	_, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "kept", metav1.GetOptions{})
	assert.NoError(t, err, "the data survives")
}

// checkHungControllerManagerRestarted stops the controller manager of cl with SIGSTOP and checks
// that it is killed and restarted while the API server serves on.
func checkHungControllerManagerRestarted(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster) {
	pid := h.b.PIDs(cl.UID)[procControllerManager]
	require.NotZero(t, pid)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP)) // alive, but answers nothing
	down := h.await(cl, "controller manager not Ready while hung", func(s backend.State) bool { return !s.Part(backend.PartControllerManager).Ready })
	assert.Contains(t, down.Part(backend.PartControllerManager).Message, "missed 3 health checks in a row")
	assert.True(t, down.Ready, "the API server serves on")
	h.await(cl, "complete again", complete)
	assert.True(t, processGone(pid), "the hung process was killed")
	assert.NotEqual(t, pid, h.b.PIDs(cl.UID)[procControllerManager])
}

// checkHungRestarted stops proc of cl with SIGSTOP and checks that the state says so, and that
// the process is killed and restarted and the cluster comes back complete with its data.
func checkHungRestarted(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster, cs kubernetes.Interface, proc string) {
	pid := h.b.PIDs(cl.UID)[proc]
	require.NotZero(t, pid)
	before := h.await(cl, "complete", complete)
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP)) // alive, but answers nothing
	down := h.await(cl, "not Ready while hung", func(s backend.State) bool {
		return !s.Ready && strings.Contains(s.Message, proc+" missed 6 health checks in a row")
	})
	assert.Equal(t, backend.ReasonRestarting, down.Reason)
	up := h.await(cl, "complete again", complete)
	assert.True(t, processGone(pid), "the hung process was killed")
	assert.NotEqual(t, pid, h.b.PIDs(cl.UID)[proc])
	assert.Greater(t, restarts(up), restarts(before))
	_, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "kept", metav1.GetOptions{})
	assert.NoError(t, err, "the data survives")
}

// checkRestartAdopts stops the backend of h and checks that its processes stopped; it starts
// another one on stateDir, for outer, and checks that it adopts cl as it was: endpoint, data,
// service range. It returns the new harness.
func checkRestartAdopts(t, outer *testing.T, h *harness, cl *clustersv1alpha1.Cluster, stateDir, endpoint string) *harness {
	pids := h.b.PIDs(cl.UID)
	h.stop()
	for name, pid := range pids {
		assert.True(t, processGone(pid), "%s (pid %d) stopped with the backend", name, pid)
	}
	assert.False(t, portOpen(endpoint))
	// The new operator has another --local-service-cidr: it is for new clusters only.
	h2 := startBackendOptions(outer, Options{StateDir: stateDir, MaxClusters: 1, ServiceCIDR: "203.0.113.0/24"}, cl)
	s := h2.await(cl, "complete after adoption", complete)
	assert.Equal(t, endpoint, s.Endpoint, "same port")
	cfg, err := h2.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	cs := kubernetes.NewForConfigOrDie(cfg)
	got, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "kept", metav1.GetOptions{})
	require.NoError(t, err, "same data")
	assert.Equal(t, "v", got.Data["k"])
	// The cluster keeps the service range it was created with.
	now := h2.b.PIDs(cl.UID)
	for _, proc := range []string{procAPIServer, procControllerManager} {
		assert.Contains(t, cmdline(t, now[proc]), "--service-cluster-ip-range="+DefaultServiceCIDR, proc)
	}
	svc, err := cs.CoreV1().Services("default").Get(t.Context(), "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "198.18.0.1", svc.Spec.ClusterIP)
	return h2
}

// checkDeleted deletes cl and checks that its processes, its port and its folder dir are gone.
func checkDeleted(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster, endpoint, dir string) {
	pids := h.b.PIDs(cl.UID)
	gone, err := h.b.Delete(t.Context(), cl)
	require.NoError(t, err)
	assert.True(t, gone)
	for name, pid := range pids {
		assert.True(t, processGone(pid), "%s (pid %d) is gone", name, pid)
	}
	assert.False(t, portOpen(endpoint), "the port is closed")
	assert.NoDirExists(t, dir)
	_, err = h.b.AdminConfig(t.Context(), cl)
	assert.Error(t, err)
}

func TestEnsureRejectsUnservedVersion(t *testing.T) {
	h := startBackend(t, t.TempDir(), 1)
	cl := newCluster("old")
	var err error
	require.Eventually(t, func() bool { // wait for Start to finish adopting (nothing to adopt)
		var s backend.State
		s, err = h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.20.0"})
		return err != nil || s.Reason != backend.ReasonBackendStarting
	}, stopWithin, 10*time.Millisecond)
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonVersionNotSupported), "%v", err)
	assert.NoDirExists(t, h.b.Dir(cl.UID), "nothing is started")
}

func TestNewRejectsAStateDirTooLongForSockets(t *testing.T) {
	long := "/" + strings.Repeat("d", maxStateDirLen) // one byte too long
	_, err := New(Options{Binaries: []Binaries{{Dir: "/bin", Version: "1.37.1"}}, StateDir: long,
		ListClusters: func(context.Context) ([]clustersv1alpha1.Cluster, error) { return nil, nil }})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--state-dir")
	assert.Contains(t, err.Error(), "shorter path")

	ok := "/" + strings.Repeat("d", maxStateDirLen-1)
	_, err = New(Options{Binaries: []Binaries{{Dir: "/bin", Version: "1.37.1"}}, StateDir: ok,
		ListClusters: func(context.Context) ([]clustersv1alpha1.Cluster, error) { return nil, nil }})
	require.NoError(t, err)
	assert.LessOrEqual(t, len(filepath.Join(ok, "6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a", etcdPeerSocket)), 107, "the longest socket path fits")
}
