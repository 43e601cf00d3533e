package local

// Benchmarks of hibernation (hibernate.go): how long the first request after hibernation waits,
// for one cluster woken again and again and for ten woken at once. Run one at a time, -benchtime
// 1x (each iteration does all its rounds and reports its own metrics):
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkWake -benchtime 1x -timeout 30m ./backend/local/

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// wakeRounds is how many wakes BenchmarkWake measures per iteration.
const wakeRounds = 50

// firstRequest is a `kubectl get ns` with cfg, with client-go's defaults (a 10 s TLS handshake
// timeout, as kubectl): testenv.ListNamespacesOnce.
func firstRequest(ctx context.Context, cfg *rest.Config) (time.Duration, error) {
	return testenv.ListNamespacesOnce(ctx, cfg, 0)
}

// hibernateNow hibernates cl's cluster on demand and waits until it is (processes stopped).
func (h *benchHarness) hibernateNow(tb testing.TB, cl *clustersv1alpha1.Cluster) {
	tb.Helper()
	h.b.mu.Lock()
	in := h.b.instances[cl.UID]
	h.b.mu.Unlock()
	require.NotNil(tb, in)
	// Fully awake first: a cluster still waking (its controller manager starting) is not put
	// back to sleep.
	require.Eventually(tb, func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		return in.api.Ready && in.kcm.Ready && !in.waking && !in.woken
	}, benchReadyWithin, 10*time.Millisecond, "complete after its wake")
	h.b.hibernate(in, backend.ReasonOnDemand)
	in.mu.Lock()
	asleep := in.asleepLocked()
	in.mu.Unlock()
	require.True(tb, asleep, "hibernated")
	require.Empty(tb, h.b.PIDs(cl.UID), "no process runs")
}

// cpuSeconds is the CPU time cl's processes have used since they started.
func (h *benchHarness) cpuSeconds(tb testing.TB, cl *clustersv1alpha1.Cluster) float64 {
	tb.Helper()
	var sum float64
	for name, pid := range h.b.PIDs(cl.UID) {
		t, err := testenv.CPUSeconds(pid)
		require.NoError(tb, err, "%s of %s", name, cl.Name)
		sum += t
	}
	return sum
}

// endpointConfig is the admin's config through cl's endpoint (the front door), as a client of
// the platform reaches it.
func (h *benchHarness) endpointConfig(tb testing.TB, cl *clustersv1alpha1.Cluster) *rest.Config {
	tb.Helper()
	cfg, err := h.b.AdminConfig(tb.Context(), cl)
	require.NoError(tb, err)
	return cfg
}

// quantile is the q-quantile (nearest rank) of sorted seconds.
func quantile(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func seconds(ds []time.Duration) []float64 {
	s := make([]float64, len(ds))
	for i, d := range ds {
		s[i] = d.Seconds()
	}
	slices.Sort(s)
	return s
}

// BenchmarkWake hibernates one complete cluster and measures its first request after, wakeRounds
// times (WAKE_ROUNDS overrides it): wake-p50-s, wake-p99-s, wake-max-s (target: p50 ≤ 1.5 s, p99 ≤ 3 s), and awake-p50-s,
// the same request to the cluster awake, for comparison.
func BenchmarkWake(b *testing.B) {
	h := startBenchBackend(b, 1, nil)
	cl := newCluster("wake")
	_, _, err := h.awaitReady(b.Context(), cl)
	require.NoError(b, err)
	cfg := h.endpointConfig(b, cl)
	for b.Loop() {
		var wakes, awake []time.Duration
		var cpuServed, cpuComplete []float64
		for round := range envInt(b, "WAKE_ROUNDS", wakeRounds) {
			// The cluster is complete before each round: a wake redoes nothing of its bootstrap.
			_, _, err := h.awaitReady(b.Context(), cl)
			require.NoError(b, err)
			if round > 0 {
				cpuComplete = append(cpuComplete, h.cpuSeconds(b, cl))
			}
			d, err := firstRequest(b.Context(), cfg)
			require.NoError(b, err, "round %d: awake", round)
			awake = append(awake, d)
			h.hibernateNow(b, cl)
			d, err = firstRequest(b.Context(), cfg)
			require.NoError(b, err, "round %d: the first request after hibernation", round)
			wakes = append(wakes, d)
			cpuServed = append(cpuServed, h.cpuSeconds(b, cl))

		}
		w, a := seconds(wakes), seconds(awake)
		b.ReportMetric(quantile(w, 0.5), "wake-p50-s")
		b.ReportMetric(quantile(w, 0.99), "wake-p99-s")
		b.ReportMetric(w[len(w)-1], "wake-max-s")
		b.ReportMetric(quantile(a, 0.5), "awake-p50-s")
		// The CPU a wake costs (its processes start anew): until the first request is answered,
		// and until the cluster is complete again (the controller manager started).
		slices.Sort(cpuServed)
		slices.Sort(cpuComplete)
		b.ReportMetric(quantile(cpuServed, 0.5), "served-cpu-s")
		if len(cpuComplete) > 0 {
			b.ReportMetric(quantile(cpuComplete, 0.5), "complete-cpu-s")
		}
	}
}

// wakeTogether is how many clusters BenchmarkWakeTogether wakes at once.
const wakeTogether = 10

// BenchmarkWakeTogether hibernates ten complete clusters and sends each its first request at the
// same moment, with client-go's defaults (a 10 s TLS handshake timeout, as kubectl): it reports
// how many were answered, and wake-p50-s, wake-p99-s and wake-max-s of those.
func BenchmarkWakeTogether(b *testing.B) {
	h := startBenchBackend(b, wakeTogether, nil)
	cls := make([]*clustersv1alpha1.Cluster, wakeTogether)
	for i := range cls {
		cls[i] = newCluster(fmt.Sprintf("together-%d", i))
	}
	var wg sync.WaitGroup
	errs := make([]error, len(cls))
	for i, cl := range cls {
		wg.Go(func() { _, _, errs[i] = h.awaitReady(b.Context(), cl) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(b, err)
	}
	cfgs := map[types.UID]*rest.Config{}
	for _, cl := range cls {
		cfgs[cl.UID] = h.endpointConfig(b, cl)
	}
	for b.Loop() {
		for _, cl := range cls {
			h.hibernateNow(b, cl)
		}
		took := make([]time.Duration, len(cls))
		start := make(chan struct{})
		for i, cl := range cls {
			wg.Go(func() {
				<-start
				took[i], errs[i] = firstRequest(b.Context(), cfgs[cl.UID])
			})
		}
		close(start)
		wg.Wait()
		// With kubectl's and client-go's 10 s TLS handshake timeout, a first request whose
		// wake waits past it fails (docs/hibernation.md): counted, not fatal.
		var answered []time.Duration
		for i, err := range errs {
			if err != nil {
				b.Logf("cluster %d: the first request after hibernation failed after %s: %v", i, took[i], err)
				continue
			}
			answered = append(answered, took[i])
		}
		b.ReportMetric(float64(len(answered)), "answered")
		if w := seconds(answered); len(w) > 0 {
			b.ReportMetric(quantile(w, 0.5), "wake-p50-s")
			b.ReportMetric(quantile(w, 0.99), "wake-p99-s")
			b.ReportMetric(w[len(w)-1], "wake-max-s")
		}
		// Complete again before the next iteration (the controller managers start after).
		for i, cl := range cls {
			wg.Go(func() { _, _, errs[i] = h.awaitReady(b.Context(), cl) })
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(b, err)
		}
	}
}

// hibernatedCopies is how many hibernated clusters BenchmarkHibernatedMemory adopts
// (HIBERNATED_CLUSTERS overrides it).
const hibernatedCopies = 100

// BenchmarkHibernatedMemory measures what a hibernated cluster costs the operator, the only
// process it has: one real cluster is made complete and hibernated, its folder is copied
// (sparse) under new UIDs as many times as asked, and a new Backend adopts them all, hibernated:
// no process starts, each gets its front door. It reports heap-KiB-per-cluster (the Go heap and
// stacks after a GC, per adopted cluster), rss-KiB-per-cluster (the test process's VmRSS, per
// cluster) and adopt-s (how long the adoption took). It then wakes HIBERNATED_WAKE clusters
// (default 0), one after the other, each left awake, and reports their first requests'
// wake-p50-s and wake-max-s, and the host's memory in use (MemTotal - MemAvailable of
// /proc/meminfo) before the wakes and once the woken clusters are complete: host-used-GiB-hibernated,
// host-used-GiB-awake.
func BenchmarkHibernatedMemory(b *testing.B) {
	copies := envInt(b, "HIBERNATED_CLUSTERS", hibernatedCopies)
	wakeN := envInt(b, "HIBERNATED_WAKE", 0)
	for b.Loop() {
		first := startBenchBackend(b, 1, nil)
		cl := newCluster("original")
		_, _, err := first.awaitReady(b.Context(), cl)
		require.NoError(b, err)
		first.hibernateNow(b, cl)
		dir := first.b.Dir(cl.UID)
		stateDir := filepath.Dir(dir)
		first.stop()

		cls := make([]*clustersv1alpha1.Cluster, copies)
		for i := range cls {
			c := newCluster(fmt.Sprintf("copy-%d", i))
			cls[i] = c
			to := filepath.Join(stateDir, string(c.UID))
			out, err := exec.Command("cp", "-r", "--sparse=always", dir, to).CombinedOutput()
			require.NoError(b, err, "%s", out)
			m, err := readMeta(to)
			require.NoError(b, err)
			m.UID, m.Name = c.UID, c.Name
			m.Ports = ports{} // each gets its own
			require.NoError(b, writeMeta(to, m))
		}
		require.NoError(b, os.RemoveAll(dir))

		before := goMemKiB()
		rssBefore, err := vmRSSKiB(os.Getpid())
		require.NoError(b, err)
		began := time.Now()
		h := startBenchBackendAt(b, stateDir, wakeN+1, cls...)
		adopt := time.Since(began)
		for _, c := range cls {
			s, err := h.b.Ensure(b.Context(), c, backend.Want{Version: h.version})
			require.NoError(b, err)
			require.NotNil(b, s.HibernatedSince, "%s adopted hibernated", c.Name)
		}
		after := goMemKiB()
		rssAfter, err := vmRSSKiB(os.Getpid())
		require.NoError(b, err)
		b.ReportMetric(float64(after-before)/float64(copies), "heap-KiB-per-cluster")
		b.ReportMetric(float64(rssAfter-rssBefore)/float64(copies), "rss-KiB-per-cluster")
		b.ReportMetric(adopt.Seconds(), "adopt-s")
		b.ReportMetric(float64(copies), "clusters")

		if wakeN > 0 {
			// One after the other, each left awake: the platform with wakeN of them active.
			used := func() float64 {
				total, err := testenv.MemInfoKiB("MemTotal:")
				require.NoError(b, err)
				avail, err := testenv.MemInfoKiB("MemAvailable:")
				require.NoError(b, err)
				return float64(total-avail) / (1 << 20)
			}
			usedBefore := used()
			took := make([]time.Duration, wakeN)
			for i := range wakeN {
				took[i], err = firstRequest(b.Context(), h.endpointConfig(b, cls[i]))
				require.NoError(b, err, "cluster %d", i)
			}
			for _, c := range cls[:wakeN] {
				_, _, err := h.awaitReady(b.Context(), c) // complete: the controller managers too
				require.NoError(b, err)
			}
			w := seconds(took)
			b.ReportMetric(quantile(w, 0.5), "wake-p50-s")
			b.ReportMetric(w[len(w)-1], "wake-max-s")
			b.ReportMetric(float64(wakeN), "awake")
			b.ReportMetric(usedBefore, "host-used-GiB-hibernated")
			b.ReportMetric(used(), "host-used-GiB-awake")
		}
		h.stop()
	}
}

// goMemKiB is the Go heap in use and the goroutine stacks of this process after a GC, in KiB.
func goMemKiB() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse+m.StackInuse) / 1024
}

func envInt(tb testing.TB, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(tb, err, "%s", name)
	return n
}
