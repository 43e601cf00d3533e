package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// EnvPrevBinaries names a --local-binaries folder of the previous Kubernetes minor (kube-apiserver,
// kube-controller-manager and the etcd of its line), for the in-place upgrade tests. `make test`
// builds it from the Go module proxy (PREV_K8S_VERSION, cached in ~/.cache/cluster-provider) and
// sets it.
const EnvPrevBinaries = "LOCAL_PREV_BINARIES"

// upgradeBinaries loads the previous minor's folder and the envtest one: older first.
func upgradeBinaries(tb testing.TB) (prev, cur Binaries) {
	tb.Helper()
	dir := os.Getenv(EnvPrevBinaries)
	if dir == "" {
		testenv.MissingTool(tb, "the previous Kubernetes minor's binaries ("+EnvPrevBinaries+", set by make test)", os.ErrNotExist)
	}
	assets, err := testenv.AssetsDir()
	require.NoError(tb, err)
	bins, err := LoadBinaries(context.Background(), []string{dir, assets})
	require.NoError(tb, err)
	return bins[0], bins[1]
}

// poller reads through a client every interval until stopped, and measures the longest time no
// request succeeded (the gap a user sees).
type poller struct {
	mu             sync.Mutex
	ok, failed     int
	lastOK         time.Time
	longestGap     time.Duration
	stop           chan struct{}
	done           chan struct{}
	firstFailure   error
	firstFailureAt time.Time
}

func startPoller(read func(context.Context) error, interval time.Duration) *poller {
	p := &poller{stop: make(chan struct{}), done: make(chan struct{}), lastOK: time.Now()}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			// As kubectl and client-go do, a request waits for its answer: a loaded machine answers slowly, a
			// stopped server refuses at once.
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err := read(ctx)
			cancel()
			now := time.Now()
			p.mu.Lock()
			if err == nil {
				p.ok++
				p.longestGap = max(p.longestGap, now.Sub(p.lastOK))
				p.lastOK = now
			} else {
				if p.failed == 0 {
					p.firstFailure, p.firstFailureAt = err, now
				}
				p.failed++
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// end stops the poller and returns its figures.
func (p *poller) end() (ok, failed int, longestGap time.Duration) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ok, p.failed, p.longestGap
}

// issuedConfig is what a user holds: a ServiceAccount token bound to the stock role view, for the
// cluster's endpoint and CA.
func issuedConfig(t testing.TB, admin *rest.Config) *rest.Config {
	t.Helper()
	ctx := context.Background()
	cs := kubernetes.NewForConfigOrDie(admin)
	sa, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader-view"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: sa.Name}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return &rest.Config{Host: admin.Host, BearerToken: tr.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}, QPS: -1}
}

// TestUpgradePreviousMinor runs a real upgrade in place from the previous Kubernetes minor to the
// current one (1.36 → 1.37: etcd 3.6 → 3.7): a cluster made at the previous minor, with data and
// an issued token bound to view, keeps its version when the default moves (nothing named), then
// moves when spec.kubernetes.version names the new minor: the state says Upgrading, then the
// cluster serves the new version on the same endpoint with the same CA, the data and the token
// still work, and its processes run the new folder's binaries. A client polling every 100 ms
// measures the gap.
func TestUpgradePreviousMinor(t *testing.T) {
	prev, cur := upgradeBinaries(t)
	h := startBackendWith(t, []Binaries{prev, cur}, t.TempDir(), 1)
	cl := newCluster("upgrade")
	made := h.awaitWant(cl, backend.Want{Version: prev.Version, Requested: prev.Version}, "Ready at "+prev.Version, complete)
	assert.Equal(t, prev.Version, made.Runs)
	assert.Equal(t, prev.Version, made.Version)

	admin, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	cs := kubernetes.NewForConfigOrDie(admin)
	_, err = cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.CoreV1().ConfigMaps("kept").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "data"}, Data: map[string]string{"written-at": prev.Version}}, metav1.CreateOptions{})
	require.NoError(t, err)
	user := kubernetes.NewForConfigOrDie(issuedConfig(t, admin))
	pids := h.b.PIDs(cl.UID)

	t.Run("a Cluster naming no version keeps the one it runs when the default moves", func(t *testing.T) {
		s, err := h.b.Ensure(t.Context(), cl, backend.Want{Version: cur.Version})
		require.NoError(t, err)
		assert.Equal(t, prev.Version, s.Runs)
		assert.Nil(t, s.VersionChange)
		assert.True(t, s.Ready)
		assert.Equal(t, pids, h.b.PIDs(cl.UID), "no process restarted")
	})

	t.Run("a downgrade is refused and the cluster keeps serving", func(t *testing.T) {
		s, err := h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.35.4", Requested: "1.35.4"})
		require.NoError(t, err)
		require.NotNil(t, s.VersionChange)
		assert.True(t, s.VersionChange.Refused)
		assert.Contains(t, s.VersionChange.Message, "downgrade from "+prev.Version+" to 1.35.4 is refused")
		assert.True(t, s.Ready)
		assert.Equal(t, pids, h.b.PIDs(cl.UID), "no process restarted")
	})

	poll := startPoller(func(ctx context.Context) error {
		_, err := user.CoreV1().ConfigMaps("kept").Get(ctx, "data", metav1.GetOptions{})
		return err
	}, 100*time.Millisecond)
	want := backend.Want{Version: cur.Version, Requested: cur.Version}
	start := time.Now()
	s, err := h.b.Ensure(t.Context(), cl, want)
	require.NoError(t, err)
	require.NotNil(t, s.VersionChange, "the upgrade shows while it runs")
	assert.False(t, s.VersionChange.Refused)
	assert.Equal(t, backend.ReasonUpgrading, s.Reason)
	assert.Equal(t, prev.Version, s.Runs)

	done := h.awaitWant(cl, want, "the upgrade ends", func(s backend.State) bool { return s.VersionChange == nil })
	took := time.Since(start)
	assert.True(t, complete(done), "the upgrade ends only when the new API server and controller manager run: %+v", done)
	// The poller must see the cluster serve again before it stops.
	require.Eventually(t, func() bool {
		poll.mu.Lock()
		defer poll.mu.Unlock()
		return poll.lastOK.After(start.Add(took))
	}, 30*time.Second, 100*time.Millisecond, "the issued token works after the upgrade")
	ok, failed, gap := poll.end()
	t.Logf("upgrade %s -> %s: Ready after %s; polling every 100 ms: %d answers, %d failed, longest gap %s",
		prev.Version, cur.Version, took.Round(10*time.Millisecond), ok, failed, gap.Round(10*time.Millisecond))

	assert.Equal(t, cur.Version, done.Version, "the API server reports the new version")
	assert.Equal(t, cur.Version, done.Runs)
	assert.Equal(t, made.Endpoint, done.Endpoint, "the same endpoint")
	assert.Equal(t, made.CABundle, done.CABundle, "the same CA")
	got, err := user.CoreV1().ConfigMaps("kept").Get(t.Context(), "data", metav1.GetOptions{})
	require.NoError(t, err, "the token issued before the upgrade works after it")
	assert.Equal(t, prev.Version, got.Data["written-at"], "the data written before the upgrade")
	assertRunsBinaries(t, h, cl, cur)
	m, err := readMeta(h.b.Dir(cl.UID))
	require.NoError(t, err)
	assert.Equal(t, cur.Version, m.Version, "the record names the new version")

	t.Run("the operator restarted: the cluster is adopted at the new version", func(t *testing.T) {
		adoptedAtNewVersion(t, h, cl, prev, cur)
	})
}

// assertRunsBinaries checks that the processes of cl run the binaries of the folder bins.
func assertRunsBinaries(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster, bins Binaries) {
	for name, bin := range map[string]string{procEtcd: bins.Etcd(), procAPIServer: bins.APIServer(), procControllerManager: bins.ControllerManager()} {
		pid := h.b.PIDs(cl.UID)[name]
		require.NotZero(t, pid, name)
		exe, err := os.Readlink(filepath.Join("/proc", itoa(pid), "exe"))
		require.NoError(t, err)
		want, err := filepath.EvalSymlinks(bin)
		require.NoError(t, err)
		assert.Equal(t, want, exe, "%s runs the new folder's binary", name)
	}
}

// adoptedAtNewVersion restarts the operator of h, whose cluster cl was upgraded from prev to cur:
// the cluster is adopted at cur, and a version whose etcd would skip a line is refused at adoption.
func adoptedAtNewVersion(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster, prev, cur Binaries) {
	h.stop()
	h2 := startBackendWith(t, []Binaries{prev, cur}, filepath.Dir(h.b.Dir(cl.UID)), 1, cl)
	s := h2.awaitWant(cl, backend.Want{Version: prev.Version}, "adopted", ready)
	assert.Equal(t, cur.Version, s.Runs, "the record wins over the default")
	assert.Nil(t, s.VersionChange)

	// Restarted again, now asked for a version whose etcd would skip a line: refused, and
	// the cluster starts as it ran.
	h2.stop()
	next := Binaries{Dir: cur.Dir, Version: "1.38.0", EtcdVersion: "3.9.0"}
	h3 := startBackendWith(t, []Binaries{prev, cur, next}, filepath.Dir(h.b.Dir(cl.UID)), 1, cl)
	s = h3.awaitWant(cl, backend.Want{Version: next.Version, Requested: next.Version}, "refused at adoption", ready)
	require.NotNil(t, s.VersionChange)
	assert.True(t, s.VersionChange.Refused)
	assert.Contains(t, s.VersionChange.Message, "etcd moves one release line at a time")
	assert.Equal(t, cur.Version, s.Runs)
	m, err := readMeta(h.b.Dir(cl.UID))
	require.NoError(t, err)
	assert.Equal(t, cur.Version, m.Version, "the record keeps what runs")
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestCheckChangeLocal: the local backend refuses what its folders cannot do: a version no
// folder serves, an etcd that would skip or go back a release line.
func TestCheckChangeLocal(t *testing.T) {
	b := &Backend{opts: Options{Binaries: []Binaries{
		{Version: "1.37.1", EtcdVersion: "3.7.0"},
		{Version: "1.36.3", EtcdVersion: "3.6.6"},
		{Version: "1.35.4", EtcdVersion: "3.5.35"}, // an etcd older than its Kubernetes ships with
		{Version: "1.34.4", EtcdVersion: "3.6.6"},
	}}}
	tests := []struct {
		from, to string
		refused  string
	}{
		{"1.36.3", "1.37.1", ""},
		{"1.36.3", "1.37.2", "no --local-binaries folder serves Kubernetes 1.37.2 (served: 1.37.1, 1.36.3, 1.35.4, 1.34.4)"},
		{"1.35.4", "1.36.3", ""},
		{"1.34.4", "1.35.4", "move etcd back from 3.6 to 3.5"},
		// CheckVersionChange refuses the skipped minor before; here the etcd line alone is judged.
		{"1.35.4", "1.37.1", "etcd moves one release line at a time"},
	}
	for _, tt := range tests {
		t.Run(tt.from+"->"+tt.to, func(t *testing.T) {
			got := b.checkChangeLocked(&backend.VersionChange{From: tt.from, To: tt.to})
			if tt.refused == "" {
				assert.False(t, got.Refused, got.Message)
				return
			}
			assert.True(t, got.Refused)
			assert.Contains(t, got.Message, tt.refused)
		})
	}
	assert.Nil(t, b.checkChangeLocked(nil))
}

// BenchmarkUpgrade upgrades a local cluster in place from the previous Kubernetes minor to the
// current one, once per iteration, while a client holding an issued token reads a ConfigMap every
// 100 ms: ready-s is the time from the change to the cluster complete at the new version (goal
// ≤ 15 s), gap-s the longest time the client got no answer, failed the requests that failed.
// The data is read back after each upgrade.
func BenchmarkUpgrade(b *testing.B) {
	prev, cur := upgradeBinaries(b)
	h := startBenchBackendWith(b, []Binaries{prev, cur}, 1, nil)
	ctx := b.Context()
	var ready, gaps []float64
	failedTotal := 0
	for i := range b.N {
		cl := newCluster(fmt.Sprintf("upgrade-%d", i))
		_, _, err := h.awaitWant(ctx, cl, backend.Want{Version: prev.Version, Requested: prev.Version})
		require.NoError(b, err)
		admin, err := h.b.AdminConfig(ctx, cl)
		require.NoError(b, err)
		_, err = kubernetes.NewForConfigOrDie(admin).CoreV1().ConfigMaps("default").Create(ctx,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{})
		require.NoError(b, err)
		user := kubernetes.NewForConfigOrDie(issuedConfig(b, admin))
		read := func(ctx context.Context) error {
			_, err := user.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
			return err
		}
		poll := startPoller(read, 100*time.Millisecond)

		b.ResetTimer()
		_, all, err := h.awaitWant(ctx, cl, backend.Want{Version: cur.Version, Requested: cur.Version})
		b.StopTimer()
		require.NoError(b, err)
		done := time.Now()
		require.Eventually(b, func() bool {
			poll.mu.Lock()
			defer poll.mu.Unlock()
			return poll.lastOK.After(done)
		}, 30*time.Second, 50*time.Millisecond, "the issued token works after the upgrade")
		_, failed, gap := poll.end()
		require.NoError(b, read(ctx), "the data is back")
		ready = append(ready, all.Seconds())
		gaps = append(gaps, gap.Seconds())
		failedTotal += failed
		_, err = h.b.Delete(ctx, cl)
		require.NoError(b, err)
	}
	b.ReportMetric(mean(ready), "ready-s")
	b.ReportMetric(slices.Max(gaps), "gap-s")
	b.ReportMetric(float64(failedTotal)/float64(b.N), "failed/op")
}
