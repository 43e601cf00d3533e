package local

// Benchmarks of real local clusters (an etcd, a kube-apiserver and a kube-controller-manager each). Each benchmark does a
// fixed amount of work per iteration and reports its own metrics with b.ReportMetric, so
// -benchtime 1x is the intended way to run them; run one at a time, on a quiet machine:
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkCreateReady -benchtime 1x -timeout 30m ./backend/local/
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkIdleRSS -benchtime 1x -timeout 30m ./backend/local/
//
// The harness of local_test.go takes a *testing.T and its await is the single consumer of one
// notification channel; the benchmarks use benchHarness below instead: the same Backend setup,
// plus a Tuning, and notifications fanned out per Cluster so that many goroutines can wait.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

const (
	// benchClusters is how many clusters BenchmarkCreateReady creates per iteration.
	benchClusters = 10
	// idleClusters is how many clusters BenchmarkIdleRSS runs at once.
	idleClusters = 3
	// idleSettle is how long BenchmarkIdleRSS leaves the Ready clusters idle before reading their
	// memory: a fixed wait, on purpose, so that start-up garbage is collected (GOGC/GOMEMLIMIT act)
	// and the apiserver's start-up controllers have finished before RSS is read.
	idleSettle = 10 * time.Second
	// benchReadyWithin bounds one wait for Ready: ten clusters starting at once on two cores take
	// far longer than one.
	benchReadyWithin = 5 * time.Minute
)

// benchHarness runs a Backend until the benchmark ends and fans its notifications out per
// Cluster.
type benchHarness struct {
	tb      testing.TB
	b       *Backend
	version string

	mu       sync.Mutex
	notified map[types.NamespacedName]chan struct{}

	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

// startBenchBackend starts a Backend on a new state folder with the envtest binaries and tuning
// (nil: DefaultTuning), and waits until it has started (nothing to adopt), so that the first
// Ensure starts a cluster at once.
func startBenchBackend(tb testing.TB, maxClusters int, tuning *Tuning) *benchHarness {
	tb.Helper()
	assets, err := testenv.AssetsDir()
	require.NoError(tb, err)
	bins, err := LoadBinaries(tb.Context(), []string{assets})
	require.NoError(tb, err)
	return startBenchBackendWith(tb, bins, maxClusters, tuning)
}

// startBenchBackendWith is startBenchBackend with the given binaries; new clusters run the newest.
func startBenchBackendWith(tb testing.TB, bins []Binaries, maxClusters int, tuning *Tuning) *benchHarness {
	tb.Helper()
	return startBench(tb, bins, tb.TempDir(), maxClusters, tuning)
}

// startBenchBackendAt starts a Backend with the envtest binaries on stateDir, whose folders of
// existing it adopts.
func startBenchBackendAt(tb testing.TB, stateDir string, maxClusters int, existing ...*clustersv1alpha1.Cluster) *benchHarness {
	tb.Helper()
	assets, err := testenv.AssetsDir()
	require.NoError(tb, err)
	bins, err := LoadBinaries(tb.Context(), []string{assets})
	require.NoError(tb, err)
	return startBench(tb, bins, stateDir, maxClusters, nil, existing...)
}

func startBench(tb testing.TB, bins []Binaries, stateDir string, maxClusters int, tuning *Tuning, existing ...*clustersv1alpha1.Cluster) *benchHarness {
	tb.Helper()
	var err error
	h := &benchHarness{tb: tb, notified: map[types.NamespacedName]chan struct{}{}, done: make(chan error, 1)}
	h.b, err = New(Options{
		Binaries:    bins,
		StateDir:    stateDir,
		MaxClusters: maxClusters,
		Tuning:      tuning,
		StopGrace:   5 * time.Second,
		Notify:      func(r backend.Ref) { h.wake(r.NamespacedName) },
		ListClusters: func(context.Context) ([]clustersv1alpha1.Cluster, error) {
			out := make([]clustersv1alpha1.Cluster, len(existing))
			for i, cl := range existing {
				out[i] = *cl
			}
			return out, nil
		},
	})
	require.NoError(tb, err)
	h.version = h.b.Versions()[0]
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.b.Start(ctx) }()
	tb.Cleanup(h.stop)
	require.Eventually(tb, func() bool {
		h.b.mu.Lock()
		defer h.b.mu.Unlock()
		return h.b.started
	}, stopWithin, 10*time.Millisecond, "the backend did not start")
	return h
}

// stop stops the Backend and waits until every cluster stopped. It may be called again.
func (h *benchHarness) stop() {
	h.stopOnce.Do(func() {
		h.cancel()
		select {
		case err := <-h.done:
			if err != nil {
				h.tb.Errorf("the backend: %v", err)
			}
		case <-time.After(stopWithin):
			h.tb.Error("the backend did not stop")
		}
	})
}

// channel returns the notification channel of the Cluster named n.
func (h *benchHarness) channel(n types.NamespacedName) chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := h.notified[n]
	if ch == nil {
		ch = make(chan struct{}, 1)
		h.notified[n] = ch
	}
	return ch
}

// wake is the Backend's Notify: it never blocks; notifications not yet consumed coalesce.
func (h *benchHarness) wake(n types.NamespacedName) {
	select {
	case h.channel(n) <- struct{}{}:
	default:
	}
}

// awaitReady calls Ensure for cl, then again after every notification about cl (or its
// RetryAfter safety net), until the cluster is complete (API server Ready and controller manager
// Ready); it returns the times from the first Ensure to the Ensure that saw the API server Ready
// and to the one that saw the cluster complete. Safe for concurrent use with different Clusters;
// it reports failures as errors, so that it may run outside the benchmark's goroutine.
func (h *benchHarness) awaitReady(ctx context.Context, cl *clustersv1alpha1.Cluster) (api, all time.Duration, err error) {
	return h.awaitWant(ctx, cl, backend.Want{Version: h.version})
}

// awaitWant is awaitReady with the version cl asks for; complete also means no version change
// is in progress.
func (h *benchHarness) awaitWant(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (api, all time.Duration, err error) {
	ch := h.channel(types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}) // before the first Ensure: no notification is lost
	deadline := time.NewTimer(benchReadyWithin)
	defer deadline.Stop()
	start := time.Now()
	for {
		s, err := h.b.Ensure(ctx, cl, want)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: Ensure: %w", cl.Name, err)
		}
		if s.Ready && api == 0 {
			api = time.Since(start)
		}
		if complete(s) && s.VersionChange == nil {
			return api, time.Since(start), nil
		}
		retry := time.NewTimer(s.RetryAfter + time.Second)
		select {
		case <-ch:
		case <-retry.C:
		case <-ctx.Done():
			retry.Stop()
			return 0, 0, ctx.Err()
		case <-deadline.C:
			retry.Stop()
			return 0, 0, fmt.Errorf("%s: not complete within %s; last state: %s: %s; controller manager %+v\n%s",
				cl.Name, benchReadyWithin, s.Reason, s.Message, s.Part(backend.PartControllerManager), logTails(h.b.Dir(cl.UID)))
		}
		retry.Stop()
	}
}

// deleteAll deletes the clusters in parallel.
func (h *benchHarness) deleteAll(ctx context.Context, cls []*clustersv1alpha1.Cluster) error {
	errs := make([]error, len(cls))
	var wg sync.WaitGroup
	for i, cl := range cls {
		wg.Go(func() { _, errs[i] = h.b.Delete(ctx, cl) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// reportLatencies reports p50-s, p95-s and max-s of ds (complete clusters), and api-p50-s of
// apis (their API servers alone).
func reportLatencies(b *testing.B, ds, apis []time.Duration) {
	seconds := func(ds []time.Duration) []float64 {
		s := make([]float64, len(ds))
		for i, d := range ds {
			s[i] = d.Seconds()
		}
		slices.Sort(s)
		return s
	}
	s := seconds(ds)
	b.ReportMetric(testenv.Quantile(s, 0.50), "p50-s")
	b.ReportMetric(testenv.Quantile(s, 0.95), "p95-s")
	b.ReportMetric(s[len(s)-1], "max-s")
	b.ReportMetric(testenv.Quantile(seconds(apis), 0.50), "api-p50-s")
}

// BenchmarkCreateReady measures how long a new cluster takes from its first Ensure until it is
// complete: its API server Ready (etcd healthy, kube-apiserver /readyz, /version read) and its
// controller manager running its controllers, with the default tuning. api-p50-s is the API
// server's part alone: the difference is what the controller manager adds.
//
// sequential: benchClusters clusters, one after another, each deleted before the next starts:
// the latency of one cluster on an otherwise idle backend.
//
// concurrent: benchClusters clusters Ensured at the same moment, one goroutine each: the
// latency when a burst of Clusters arrives. Ensure holds the Backend's lock while it writes a
// cluster's folder and certificates, so those parts serialize; the processes then compete for
// the CPUs.
func BenchmarkCreateReady(b *testing.B) {
	b.Run("sequential", func(b *testing.B) {
		h := startBenchBackend(b, benchClusters, nil)
		var lat, apiLat []time.Duration
		b.ResetTimer()
		for i := range b.N {
			for j := range benchClusters {
				cl := newCluster(fmt.Sprintf("seq-%d-%d", i, j))
				a, d, err := h.awaitReady(b.Context(), cl)
				require.NoError(b, err)
				lat, apiLat = append(lat, d), append(apiLat, a)
				_, err = h.b.Delete(b.Context(), cl)
				require.NoError(b, err)
			}
		}
		reportLatencies(b, lat, apiLat)
	})

	b.Run("concurrent", func(b *testing.B) {
		h := startBenchBackend(b, 2*benchClusters, nil)
		var lat, apiLat []time.Duration
		b.ResetTimer()
		for i := range b.N {
			cls := make([]*clustersv1alpha1.Cluster, benchClusters)
			ds := make([]time.Duration, benchClusters)
			as := make([]time.Duration, benchClusters)
			errs := make([]error, benchClusters)
			gate := make(chan struct{})
			var wg sync.WaitGroup
			for j := range cls {
				cls[j] = newCluster(fmt.Sprintf("conc-%d-%d", i, j))
				wg.Go(func() {
					<-gate
					as[j], ds[j], errs[j] = h.awaitReady(b.Context(), cls[j])
				})
			}
			close(gate) // every goroutine calls its first Ensure now
			wg.Wait()
			require.NoError(b, errors.Join(errs...))
			lat, apiLat = append(lat, ds...), append(apiLat, as...)
			require.NoError(b, h.deleteAll(b.Context(), cls))
		}
		reportLatencies(b, lat, apiLat)
	})
}

// benchTunings are the variants BenchmarkIdleRSS measures.
//
// apiServerArgs always passes --profiling=false and --enable-priority-and-fairness=false, whatever
// the Tuning: "untuned" is therefore not a stock kube-apiserver; it differs from "default" only in
// the environment (no GOMEMLIMIT, no GOGC: the Go defaults) and in the watch cache (on, the
// kube-apiserver default). Processes inherit the operator's environment, so GOGC or GOMEMLIMIT
// set in the benchmark's own environment would leak into the variants that leave them unset.
var benchTunings = []struct {
	name   string
	tuning Tuning
}{
	{"default", DefaultTuning},
	{"untuned", Tuning{WatchCache: true}},
	{"no-memlimit", Tuning{GOGC: DefaultTuning.GOGC, APIServerGOGC: DefaultTuning.APIServerGOGC}},
	{"no-gogc", func() Tuning { t := DefaultTuning; t.GOGC, t.APIServerGOGC = "", ""; return t }()},
	{"watchcache-on", func() Tuning { t := DefaultTuning; t.WatchCache = true; return t }()},
	{"kcm-1-worker", func() Tuning { t := DefaultTuning; t.ConcurrentSyncs = 1; return t }()},
	{"apiserver-140MiB", func() Tuning { t := DefaultTuning; t.APIServerGOMEMLIMIT = "140MiB"; return t }()},
	{"gogc-25", func() Tuning { t := DefaultTuning; t.GOGC, t.APIServerGOGC = "25", ""; return t }()},
	{"gogc-10", func() Tuning { t := DefaultTuning; t.GOGC, t.APIServerGOGC = "10", ""; return t }()},
	{"gogc-25-api-128MiB", func() Tuning {
		t := DefaultTuning
		t.GOGC, t.APIServerGOGC, t.APIServerGOMEMLIMIT = "25", "", "128MiB"
		return t
	}()},
	// The API server's GOGC and memory limit: "gogc-50-api-160MiB" is the default before
	// issue 43's wake work (every process GOGC 50, the API server held to 160 MiB); "api-200-*"
	// and "apiserver-140MiB" keep the API server's GOGC 200 under another limit. Names are short:
	// the state folder's path, which holds etcd's sockets, includes them.
	{"gogc-50-api-160MiB", func() Tuning { t := DefaultTuning; t.APIServerGOGC, t.APIServerGOMEMLIMIT = "", "160MiB"; return t }()},
	{"api-200-160MiB", func() Tuning { t := DefaultTuning; t.APIServerGOMEMLIMIT = "160MiB"; return t }()},
	{"api-200-130MiB", func() Tuning { t := DefaultTuning; t.APIServerGOMEMLIMIT = "130MiB"; return t }()},
	{"no-apf", func() Tuning {
		t := DefaultTuning
		t.APIServerArgs = []string{"--enable-priority-and-fairness=false"}
		return t
	}()},
	{"tight-memlimit", func() Tuning {
		t := DefaultTuning
		t.APIServerGOMEMLIMIT, t.ControllerManagerGOMEMLIMIT, t.EtcdGOMEMLIMIT = "120MiB", "40MiB", "32MiB"
		return t
	}()},
}

// BenchmarkIdleRSS measures the resident memory of idle clusters, per Tuning variant: it starts
// idleClusters clusters, waits until they are complete, leaves them idle for idleSettle, then
// reads VmRSS and PSS of each cluster's etcd, kube-apiserver and kube-controller-manager. It
// reports the mean per cluster, and how many such clusters fit in 24 GiB by either measure.
func BenchmarkIdleRSS(b *testing.B) {
	for _, k := range []string{"GOGC", "GOMEMLIMIT"} {
		if v := os.Getenv(k); v != "" {
			b.Logf("%s=%s is set in the environment: the clusters' processes inherit it where the Tuning leaves it unset", k, v)
		}
	}
	for _, v := range benchTunings {
		b.Run(v.name, func(b *testing.B) {
			rss := map[string][]float64{}
			var pssMiB, privateMiB, cpuPct []float64
			for i := range b.N {
				idleRSS(b, i, v.tuning, rss, &pssMiB, &privateMiB, &cpuPct)
			}
			// CPU time of a cluster's three processes while idle, in % of one core: a memory limit
			// below the live heap would show here as garbage collection that never ends.
			b.ReportMetric(mean(cpuPct), "idle-cpu-%")
			api, etcd, kcm := mean(rss[procAPIServer]), mean(rss[procEtcd]), mean(rss[procControllerManager])
			b.ReportMetric(api, "apiserver-MiB")
			b.ReportMetric(etcd, "etcd-MiB")
			b.ReportMetric(kcm, "kcm-MiB")
			b.ReportMetric(api+etcd+kcm, "total-MiB")
			b.ReportMetric(24*1024/(api+etcd+kcm), "clusters-per-24GiB")
			// The three processes' PSS per cluster: what each further cluster costs the host.
			pss := mean(pssMiB)
			b.ReportMetric(pss, "pss-MiB")
			b.ReportMetric(24*1024/pss, "clusters-per-24GiB-by-pss")
			// Pages no other process maps: what a cluster costs when so many run that the shared
			// code pages count for nothing per cluster.
			b.ReportMetric(mean(privateMiB), "private-MiB")
		})
	}
}

// idleRSS runs one iteration of BenchmarkIdleRSS on a backend of its own, which it stops before
// it returns; it appends the RSS in MiB of each cluster's processes to rss (by process name) and
// each cluster's PSS and private memory (its processes together) to pssMiB and privateMiB.
func idleRSS(b *testing.B, iteration int, tuning Tuning, rss map[string][]float64, pssMiB, privateMiB, cpuPct *[]float64) {
	h := startBenchBackend(b, idleClusters, &tuning)
	defer h.stop()
	cls := make([]*clustersv1alpha1.Cluster, idleClusters)
	errs := make([]error, idleClusters)
	var wg sync.WaitGroup
	for j := range cls {
		cls[j] = newCluster(fmt.Sprintf("idle-%d-%d", iteration, j))
		wg.Go(func() { _, _, errs[j] = h.awaitReady(b.Context(), cls[j]) })
	}
	wg.Wait()
	require.NoError(b, errors.Join(errs...))

	time.Sleep(idleSettle) // a fixed wait: see idleSettle

	// The CPU the clusters' processes use while idle, over a fixed window.
	ticks := func() []float64 {
		out := make([]float64, len(cls))
		for i, cl := range cls {
			for _, pid := range h.b.PIDs(cl.UID) {
				t, err := testenv.CPUSeconds(pid)
				require.NoError(b, err)
				out[i] += t
			}
		}
		return out
	}
	before, t0 := ticks(), time.Now()
	time.Sleep(cpuWindow) // a measurement window, not a wait for something
	after, window := ticks(), time.Since(t0)
	for i := range cls {
		*cpuPct = append(*cpuPct, 100*(after[i]-before[i])/window.Seconds())
	}

	for _, cl := range cls {
		s, err := h.b.Ensure(b.Context(), cl, backend.Want{Version: h.version})
		require.NoError(b, err)
		require.True(b, complete(s), "%s is still complete after %s idle: %s: %s", cl.Name, idleSettle, s.Reason, s.Message)
		pids := h.b.PIDs(cl.UID)
		var pss, private float64
		for _, name := range []string{procAPIServer, procEtcd, procControllerManager} {
			pid := pids[name]
			require.NotZero(b, pid, "%s of %s runs", name, cl.Name)
			kib, err := vmRSSKiB(pid)
			require.NoError(b, err, "%s of %s", name, cl.Name)
			rss[name] = append(rss[name], float64(kib)/1024)
			p, err := pssKiB(pid)
			require.NoError(b, err, "%s of %s", name, cl.Name)
			pss += float64(p) / 1024
			for _, field := range []string{"Private_Clean:", "Private_Dirty:"} {
				kib, err := testenv.ProcKiB(pid, "smaps_rollup", field)
				require.NoError(b, err, "%s of %s", name, cl.Name)
				private += float64(kib) / 1024
			}
		}
		*pssMiB = append(*pssMiB, pss)
		*privateMiB = append(*privateMiB, private)
	}
}

// cpuWindow is how long BenchmarkIdleRSS counts the idle clusters' CPU time.
const cpuWindow = 5 * time.Second

// vmRSSKiB reads VmRSS (in KiB) from /proc/<pid>/status.
func vmRSSKiB(pid int) (int64, error) { return testenv.ProcKiB(pid, "status", "VmRSS:") }

// pssKiB reads the proportional set size (in KiB) from /proc/<pid>/smaps_rollup: resident memory
// with every page shared by N processes counted 1/N. The clusters' processes share their
// binaries' code pages, which RSS counts in full for each.
func pssKiB(pid int) (int64, error) { return testenv.ProcKiB(pid, "smaps_rollup", "Pss:") }

func mean(xs []float64) float64 {
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
