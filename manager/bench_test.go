package manager

// Benchmarks of the engine, each side by side with a baseline of one stock controller-runtime
// controller per profile (source.Kind on the same shared cache, filtering by profile). The
// figures and the command are recorded in docs/benchmarks.md. Every benchmark does a fixed
// amount of work per iteration and reports its own metrics, so `-benchtime 1x` gives
// meaningful numbers.

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

const (
	benchFillers = 10000 // Clusters of 100 filler profiles
	benchTargets = 400   // Clusters that are each the only object of their own profile
)

func targetProfile(i int) string { return fmt.Sprintf("bench-target-%03d", i) }

var benchData struct {
	once sync.Once
	full string // namespace with benchFillers + benchTargets Clusters
	err  error
}

// benchNamespace returns the namespace with 10k cached objects; it is filled once per process.
func benchNamespace(b *testing.B) string {
	b.Helper()
	benchData.once.Do(func() { benchData.full, benchData.err = fillNamespace() })
	require.NoError(b, benchData.err)
	return benchData.full
}

func fillNamespace() (string, error) {
	ctx := context.Background()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side throttling while filling
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		return "", err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	if err := c.Create(ctx, ns); err != nil {
		return "", err
	}
	jobs := make(chan *clustersv1alpha1.Cluster)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cl := range jobs {
				if err := c.Create(ctx, cl); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	mk := func(name, profile string) *clustersv1alpha1.Cluster {
		return &clustersv1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: name},
			Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyShared},
		}
	}
	for i := range benchFillers {
		jobs <- mk(fmt.Sprintf("filler-%05d", i), fmt.Sprintf("bench-filler-%d", i%100))
	}
	for i := range benchTargets {
		jobs <- mk(fmt.Sprintf("target-%03d", i), targetProfile(i))
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return "", err
	default:
	}
	return ns.Name, nil
}

// newBenchCache returns a started cache of ns (or of an empty namespace if ns is ""), wrapped to
// count handler registrations.
func newBenchCache(b *testing.B, ns string) *countingCache {
	b.Helper()
	if ns == "" {
		ns = env.Namespace(b)
	}
	c, err := cache.New(env.Config, cache.Options{Scheme: testenv.Scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	require.NoError(b, err)
	return &countingCache{Cache: c}
}

// startCache starts c until the benchmark ends and waits for it to sync. The engine's startEngine
// does this itself.
func startCache(b *testing.B, c cache.Cache) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Start(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	// Create the informer now, so that the baseline does not pay its initial list.
	_, err := c.GetInformer(ctx, &clustersv1alpha1.Cluster{})
	require.NoError(b, err)
	require.True(b, c.WaitForCacheSync(ctx))
}

// stockController starts one stock controller-runtime controller for a profile: source.Kind on
// the shared cache, filtering Clusters by spec.profile. stop cancels it and waits for Start to
// return; its informer handler stays registered, as controller-runtime leaves it.
func stockController(b *testing.B, c cache.Cache, profile string, rec reconcile.Reconciler) (stop func()) {
	b.Helper()
	ctl, err := crcontroller.NewUnmanaged("stock-"+profile, crcontroller.Options{
		Reconciler:         rec,
		SkipNameValidation: ptr.To(true),
	})
	require.NoError(b, err)
	require.NoError(b, ctl.Watch(source.Kind(c, &clustersv1alpha1.Cluster{},
		&handler.TypedEnqueueRequestForObject[*clustersv1alpha1.Cluster]{},
		predicate.NewTypedPredicateFuncs(func(o *clustersv1alpha1.Cluster) bool { return o.Spec.Profile == profile }))))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ctl.Start(ctx) }()
	return func() { cancel(); <-done }
}

// firstReconcile returns a reconciler that signals on ch at its first call.
func firstReconcile(ch chan<- struct{}) reconcile.Reconciler {
	var once sync.Once
	return reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		once.Do(func() { ch <- struct{}{} })
		return reconcile.Result{}, nil
	})
}

var noop = reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
	return reconcile.Result{}, nil
})

func reportLatency(b *testing.B, samples []time.Duration) {
	slices.Sort(samples)
	q := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(len(samples)), "samples")
}

// BenchmarkStartLatency measures profile start → first reconcile of one of its existing objects,
// with 10k objects in the shared cache.
func BenchmarkStartLatency(b *testing.B) {
	ns := benchNamespace(b)
	const perRun = 100
	b.Run("engine", func(b *testing.B) {
		c := newBenchCache(b, ns)
		e := startEngine(b, c, Options{})
		ctx := context.Background()
		var samples []time.Duration
		for i := 0; i < b.N; i++ {
			for j := range perRun {
				name := targetProfile((i*perRun + j) % (benchTargets / 2))
				got := make(chan struct{}, 1)
				start := time.Now()
				require.NoError(b, e.StartProfile(ctx, profileOf(name, "1", firstReconcile(got), nil)))
				<-got
				samples = append(samples, time.Since(start))
				e.StopProfile(name)
			}
		}
		reportLatency(b, samples)
	})
	b.Run("baseline", func(b *testing.B) {
		c := newBenchCache(b, ns)
		startCache(b, c)
		var samples []time.Duration
		for i := 0; i < b.N; i++ {
			for j := range perRun {
				name := targetProfile(benchTargets/2 + (i*perRun+j)%(benchTargets/2))
				got := make(chan struct{}, 1)
				start := time.Now()
				stop := stockController(b, c, name, firstReconcile(got))
				<-got
				samples = append(samples, time.Since(start))
				stop()
			}
		}
		reportLatency(b, samples)
	})
}

// serialInformers wraps FakeInformers so that concurrent handler registrations (stock
// controllers register from their own goroutines) do not race on the fake's handler list.
type serialInformers struct {
	*informertest.FakeInformers
	mu    sync.Mutex
	added int
}

func (s *serialInformers) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inf, err := s.FakeInformers.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return &serialInformer{Informer: inf, s: s}, nil
}

type serialInformer struct {
	cache.Informer
	s *serialInformers
}

func (i *serialInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	i.s.added++
	return i.Informer.AddEventHandler(h)
}

func (i *serialInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, d time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	i.s.added++
	return i.Informer.AddEventHandlerWithResyncPeriod(h, d)
}

func (i *serialInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	i.s.added++
	return i.Informer.AddEventHandlerWithOptions(h, o)
}

func (s *serialInformers) handlers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.added
}

// BenchmarkDispatch measures the cost of delivering one update event from the shared informer to
// the owning profile's queue, with 1, 100 and 1000 running profiles. The informer is
// controller-runtime's FakeInformer, which calls the registered handlers synchronously, so the
// figure is the handler work alone.
func BenchmarkDispatch(b *testing.B) {
	const events = 1400000
	for _, profiles := range []int{1, 100, 1000} {
		old := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "x", Generation: 1}}
		old.Spec.Profile = fmt.Sprintf("p-%d", profiles/2)
		upd := old.DeepCopy()
		upd.Generation = 2

		b.Run(fmt.Sprintf("engine/profiles-%d", profiles), func(b *testing.B) {
			fake := &serialInformers{FakeInformers: &informertest.FakeInformers{Scheme: testenv.Scheme}}
			e := startEngine(b, fake, Options{})
			ctx := context.Background()
			for i := range profiles {
				require.NoError(b, e.StartProfile(ctx, profileOf(fmt.Sprintf("p-%d", i), "1", noop, nil)))
			}
			inf, err := fake.FakeInformerFor(ctx, &clustersv1alpha1.Cluster{})
			require.NoError(b, err)
			dispatch(b, events, func() { inf.Update(old, upd) })
		})
		b.Run(fmt.Sprintf("baseline/profiles-%d", profiles), func(b *testing.B) {
			fake := &serialInformers{FakeInformers: &informertest.FakeInformers{Scheme: testenv.Scheme}}
			for i := range profiles {
				stop := stockController(b, fake, fmt.Sprintf("p-%d", i), noop)
				b.Cleanup(stop)
			}
			require.Eventually(b, func() bool { return fake.handlers() == profiles }, time.Minute, time.Millisecond)
			inf, err := fake.FakeInformerFor(context.Background(), &clustersv1alpha1.Cluster{})
			require.NoError(b, err)
			dispatch(b, events, func() { inf.Update(old, upd) })
		})
	}
}

// dispatch sends events in 7 rounds per iteration and reports the median and the fastest round
// per event: a worker wakes on the other core for every event, so single rounds are noisy.
func dispatch(b *testing.B, events int, send func()) {
	const rounds = 7
	var perEvent []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for range rounds {
			start := time.Now()
			for range events / rounds {
				send()
			}
			perEvent = append(perEvent, float64(time.Since(start).Nanoseconds())/float64(events/rounds))
		}
	}
	b.StopTimer()
	slices.Sort(perEvent)
	b.ReportMetric(perEvent[len(perEvent)/2], "ns/event")
	b.ReportMetric(perEvent[0], "min-ns/event")
}

// BenchmarkFootprint measures heap and goroutines per running profile with 0 and 10k objects in
// the shared cache, and what 100 start/stop cycles leave behind (goroutines and handler
// registrations).
func BenchmarkFootprint(b *testing.B) {
	full := benchNamespace(b)
	const profiles = 100
	for _, cached := range []int{0, benchFillers + benchTargets} {
		ns := ""
		if cached > 0 {
			ns = full
		}
		b.Run(fmt.Sprintf("engine/cached-%d", cached), func(b *testing.B) {
			c := newBenchCache(b, ns)
			e := startEngine(b, c, Options{})
			ctx := context.Background()
			handlers := c.added.Load()
			footprint(b, profiles, func(name string) func() {
				require.NoError(b, e.StartProfile(ctx, profileOf(name, "1", noop, nil)))
				return func() { e.StopProfile(name) }
			})
			b.ReportMetric(float64(c.added.Load()-c.removed.Load()-handlers), "leaked-handlers")
		})
		b.Run(fmt.Sprintf("engine-both-kinds/cached-%d", cached), func(b *testing.B) {
			c := newBenchCache(b, ns)
			e := startEngine(b, c, Options{})
			ctx := context.Background()
			footprint(b, profiles, func(name string) func() {
				require.NoError(b, e.StartProfile(ctx, profileOf(name, "1", noop, noop)))
				return func() { e.StopProfile(name) }
			})
		})
		b.Run(fmt.Sprintf("baseline/cached-%d", cached), func(b *testing.B) {
			c := newBenchCache(b, ns)
			startCache(b, c)
			handlers := c.added.Load()
			footprint(b, profiles, func(name string) func() {
				return stockController(b, c, name, noop)
			})
			b.ReportMetric(float64(c.added.Load()-c.removed.Load()-handlers), "leaked-handlers")
		})
	}
}

// footprint starts n profiles (start returns their stop), reports heap and goroutines per
// profile while they run, stops them, and reports the goroutines left over.
func footprint(b *testing.B, n int, start func(name string) (stop func())) {
	var heapPer, goPer, leaked float64
	for i := 0; i < b.N; i++ {
		baseG := settledGoroutines(-1)
		baseHeap := heapInUse()
		stops := make([]func(), 0, n)
		for j := range n {
			stops = append(stops, start(fmt.Sprintf("idle-%d-%d", i, j)))
		}
		runningG := settledGoroutines(-1)
		heapPer += float64(heapInUse()-baseHeap) / float64(n)
		goPer += float64(runningG-baseG) / float64(n)
		for _, stop := range stops {
			stop()
		}
		leaked += float64(settledGoroutines(baseG) - baseG)
	}
	b.ReportMetric(heapPer/float64(b.N)/1024, "KiB/profile")
	b.ReportMetric(goPer/float64(b.N), "goroutines/profile")
	b.ReportMetric(leaked/float64(b.N), "leaked-goroutines")
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// settledGoroutines returns the goroutine count once it stopped changing (goroutines of stopped
// queues exit asynchronously) or reached target, waiting at most 5s.
func settledGoroutines(target int) int {
	deadline := time.Now().Add(5 * time.Second)
	last, stable := runtime.NumGoroutine(), 0
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling a count, not synchronising
		n := runtime.NumGoroutine()
		if n <= target {
			return n
		}
		if n == last {
			if stable++; stable >= 20 {
				return n
			}
		} else {
			last, stable = n, 0
		}
	}
	return last
}
