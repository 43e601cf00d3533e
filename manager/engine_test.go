package manager

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestSharedCacheSurvivesProfileStop runs profiles A, B and C and a fixed (non-profile)
// controller on the same cache, stops A, and checks that B, C and the fixed controller still
// receive new objects, A receives nothing, and a restarted A gets all its objects.
func TestSharedCacheSurvivesProfileStop(t *testing.T) {
	shared, err := cache.New(env.Config, cache.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	fixed := newRecorder("fixed")
	startFixedController(t, shared, fixed)
	e := startEngine(t, shared, Options{})
	ctx := context.Background()
	ns := env.Namespace(t)
	a, b, c := uniqueProfile("a"), uniqueProfile("b"), uniqueProfile("c")
	recA, recB, recC := newRecorder("A"), newRecorder("B"), newRecorder("C")
	for _, p := range []Profile{profileOf(a, "1", recA, nil), profileOf(b, "1", recB, nil), profileOf(c, "1", recC, nil)} {
		require.NoError(t, e.StartProfile(ctx, p))
	}

	a1, b1, c1 := newCluster(t, ns, "a1", a), newCluster(t, ns, "b1", b), newCluster(t, ns, "c1", c)
	waitSeen(t, recA, a1)
	waitSeen(t, recB, b1)
	waitSeen(t, recC, c1)
	assert.Equal(t, map[types.NamespacedName]int{a1: 1}, recA.keys(), "A sees only its own objects")

	e.StopProfile(a)
	recA.afterStop.Store(true)
	_, running := e.Running(a)
	assert.False(t, running)

	// The informer delivers events in order: once B and C saw their objects created after
	// a2, the router has already handled a2.
	a2 := newCluster(t, ns, "a2", a)
	b2, c2 := newCluster(t, ns, "b2", b), newCluster(t, ns, "c2", c)
	waitSeen(t, recB, b2)
	waitSeen(t, recC, c2)
	assert.Zero(t, recA.violations.Load(), "a stopped profile must not reconcile")
	assert.Zero(t, recA.count(a2))
	for _, k := range []types.NamespacedName{a1, b1, c1, a2, b2, c2} {
		waitSeen(t, fixed, k) // the fixed controller sees every Cluster, before and after the stop
	}

	recA2 := newRecorder("A again")
	require.NoError(t, e.StartProfile(ctx, profileOf(a, "1", recA2, nil)))
	waitSeen(t, recA2, a1)
	waitSeen(t, recA2, a2)
}

// TestKeyMoves checks routing by the key taken from the object: an AccessRequest that gains its
// labels reaches the right profile, and objects whose key no running profile has reach nobody.
func TestKeyMoves(t *testing.T) {
	e := startEngine(t, nil, Options{})
	ctx := context.Background()
	ns := env.Namespace(t)
	p, other := uniqueProfile("p"), uniqueProfile("other")
	recP, recOther := newRecorder("P"), newRecorder("other")
	require.NoError(t, e.StartProfile(ctx, profileOf(p, "1", recOther, recP)))
	// recOther reconciles p's clusters; a sentinel proves that earlier events were routed.

	unlabelled := newAccessRequest(t, ns, "unlabelled", nil)
	foreign := newAccessRequest(t, ns, "foreign", map[string]string{
		clustersv1alpha1.ProviderLabel: "someone-else", clustersv1alpha1.ProfileLabel: p,
	})
	onlyProvider := newAccessRequest(t, ns, "only-provider", map[string]string{clustersv1alpha1.ProviderLabel: testProvider})
	unknownProfile := newCluster(t, ns, "unknown-profile", other)
	sentinel := newCluster(t, ns, "sentinel", p)
	waitSeen(t, recOther, sentinel)
	assert.Empty(t, recP.keys(), "no AccessRequest was ours yet")
	assert.Zero(t, recOther.count(unknownProfile), "a Cluster of a profile that does not run reaches nobody")

	// The labeller adds both labels: the update moves the object to p.
	unlabelled.Labels = map[string]string{clustersv1alpha1.ProviderLabel: testProvider, clustersv1alpha1.ProfileLabel: p}
	require.NoError(t, env.Client.Update(ctx, unlabelled))
	waitSeen(t, recP, types.NamespacedName{Namespace: ns, Name: "unlabelled"})

	sentinel2 := newCluster(t, ns, "sentinel2", p)
	waitSeen(t, recOther, sentinel2)
	assert.Zero(t, recP.count(types.NamespacedName{Namespace: ns, Name: foreign.Name}), "another provider's AccessRequest")
	assert.Zero(t, recP.count(types.NamespacedName{Namespace: ns, Name: onlyProvider.Name}), "an AccessRequest without the profile label")
}

// TestNoReconcileAfterStop races events against StopProfile: once StopProfile returned, the
// profile's reconciler is never called again.
func TestNoReconcileAfterStop(t *testing.T) {
	e := startEngine(t, nil, Options{Workers: 2})
	ctx := context.Background()
	ns := env.Namespace(t)
	p, witness := uniqueProfile("racy"), uniqueProfile("witness")
	rec, recW := newRecorder("racy"), newRecorder("witness")
	require.NoError(t, e.StartProfile(ctx, profileOf(p, "1", rec, nil)))
	require.NoError(t, e.StartProfile(ctx, profileOf(witness, "1", recW, nil)))

	var keys []types.NamespacedName
	for i := range 20 {
		keys = append(keys, newCluster(t, ns, "c"+string(rune('a'+i)), p))
	}
	waitSeen(t, rec, keys[0])

	// Keep updating p's clusters while it is stopped.
	stopWriter := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopWriter:
				return
			default:
			}
			cl := &clustersv1alpha1.Cluster{}
			if err := env.Client.Get(ctx, keys[5+i%(len(keys)-5)], cl); err == nil {
				cl.Spec.Purposes = []string{time.Now().Format(time.RFC3339Nano)}
				_ = env.Client.Update(ctx, cl)
			}
		}
	}()
	e.StopProfile(p)
	rec.afterStop.Store(true)

	// More events for the stopped profile, then a witness event after them.
	for _, k := range keys[:5] {
		cl := &clustersv1alpha1.Cluster{}
		require.NoError(t, env.Client.Get(ctx, k, cl))
		cl.Spec.Purposes = []string{"after-stop"}
		require.NoError(t, env.Client.Update(ctx, cl))
	}
	close(stopWriter)
	wg.Wait()
	w := newCluster(t, ns, "witness", witness)
	waitSeen(t, recW, w)
	assert.Zero(t, rec.violations.Load(), "reconciles after StopProfile returned")
}

// TestRestartOnHashChange restarts a profile whose objects are being reconciled: afterwards only
// the new instance reconciles, and the old one's context was cancelled.
func TestRestartOnHashChange(t *testing.T) {
	e := startEngine(t, nil, Options{Workers: 2})
	ctx := context.Background()
	ns := env.Namespace(t)
	p := uniqueProfile("restart")

	var active atomic.Int32 // reconciles in flight, of any instance
	oldCancelled := make(chan struct{}, 10)
	inFlight := make(chan struct{}, 10)
	old := newRecorder("old")
	old.hook = func(ctx context.Context, _ reconcile.Request) error {
		active.Add(1)
		defer active.Add(-1)
		select {
		case inFlight <- struct{}{}:
		default:
		}
		<-ctx.Done() // busy until the profile stops
		oldCancelled <- struct{}{}
		return ctx.Err()
	}
	require.NoError(t, e.StartProfile(ctx, profileOf(p, "v1", old, nil)))
	var keys []types.NamespacedName
	for _, n := range []string{"x", "y", "z"} {
		keys = append(keys, newCluster(t, ns, n, p))
	}
	<-inFlight // the old instance is reconciling

	// Same hash: nothing happens.
	require.NoError(t, e.StartProfile(ctx, profileOf(p, "v1", newRecorder("unused"), nil)))
	hash, _ := e.Running(p)
	assert.Equal(t, "v1", hash)

	fresh := newRecorder("new")
	fresh.hook = func(context.Context, reconcile.Request) error {
		if active.Load() != 0 {
			return errors.New("the old instance is still reconciling")
		}
		return nil
	}
	require.NoError(t, e.StartProfile(ctx, profileOf(p, "v2", fresh, nil)))
	old.afterStop.Store(true)
	assert.Zero(t, active.Load(), "StartProfile returned while the old instance still reconciled")
	require.NotEmpty(t, oldCancelled, "the old instance's context was cancelled")
	for _, k := range keys {
		waitSeen(t, fresh, k)
	}
	assert.Zero(t, old.violations.Load())
	hash, running := e.Running(p)
	assert.True(t, running)
	assert.Equal(t, "v2", hash)
	assert.Equal(t, []string{p}, filter(e.Profiles(), p), "exactly one instance of the profile")
}

func filter(names []string, want string) []string {
	var out []string
	for _, n := range names {
		if n == want {
			out = append(out, n)
		}
	}
	return out
}

// TestOperationsOnDifferentKeysDoNotBlock holds StopProfile of one profile (its reconciler
// ignores cancellation for a while) and starts and stops another meanwhile.
func TestOperationsOnDifferentKeysDoNotBlock(t *testing.T) {
	e := startEngine(t, nil, Options{})
	ctx := context.Background()
	ns := env.Namespace(t)
	slow, quick := uniqueProfile("slow"), uniqueProfile("quick")
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	rec := newRecorder("slow")
	rec.hook = func(context.Context, reconcile.Request) error {
		entered <- struct{}{}
		<-release // ignores its context on purpose
		return nil
	}
	require.NoError(t, e.StartProfile(ctx, profileOf(slow, "1", rec, nil)))
	newCluster(t, ns, "slow", slow)
	<-entered

	stopped := make(chan struct{})
	go func() { e.StopProfile(slow); close(stopped) }()
	require.Eventually(t, func() bool { _, ok := e.Running(slow); return !ok }, 10*time.Second, time.Millisecond)

	recQ := newRecorder("quick")
	require.NoError(t, e.StartProfile(ctx, profileOf(quick, "1", recQ, nil)))
	waitSeen(t, recQ, newCluster(t, ns, "quick", quick))
	e.StopProfile(quick)
	select {
	case <-stopped:
		t.Fatal("StopProfile returned while a worker was still reconciling")
	default:
	}
	close(release)
	<-stopped
}

// TestPanicIsContained lets one profile's reconciler panic: the panic is counted, the item is
// retried, the profile's other objects and other profiles carry on.
func TestPanicIsContained(t *testing.T) {
	e := startEngine(t, nil, Options{})
	ctx := context.Background()
	ns := env.Namespace(t)
	bad, good := uniqueProfile("panicky"), uniqueProfile("calm")
	var panics atomic.Int32
	recBad := newRecorder("panicky")
	recBad.hook = func(_ context.Context, req reconcile.Request) error {
		if req.Name == "boom" && panics.Add(1) == 1 {
			panic("reconciler bug")
		}
		return nil
	}
	recGood := newRecorder("calm")
	require.NoError(t, e.StartProfile(ctx, profileOf(bad, "1", recBad, nil)))
	require.NoError(t, e.StartProfile(ctx, profileOf(good, "1", recGood, nil)))

	boom := newCluster(t, ns, "boom", bad)
	fine := newCluster(t, ns, "fine", bad)
	other := newCluster(t, ns, "other", good)
	waitSeen(t, recBad, fine)
	waitSeen(t, recGood, other)
	require.Eventually(t, func() bool { return recBad.count(boom) >= 2 }, 30*time.Second, 5*time.Millisecond,
		"the panicked item is retried")
	assert.Equal(t, 1.0, testutil.ToFloat64(metricReconciles.WithLabelValues(bad, "cluster", "panic")))

	assert.Contains(t, profileSeries(t), bad)
	e.StopProfile(bad)
	assert.NotContains(t, profileSeries(t), bad, "the stopped profile's series are removed")
	assert.Contains(t, profileSeries(t), good)
}

// profileSeries returns the values of the profile label of all per-profile metric series.
func profileSeries(t *testing.T) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 1024)
	metricReconciles.Collect(ch)
	metricReconcileTime.Collect(ch)
	close(ch)
	var out []string
	for m := range ch {
		var pb dto.Metric
		require.NoError(t, m.Write(&pb))
		for _, l := range pb.GetLabel() {
			if l.GetName() == "profile" {
				out = append(out, l.GetValue())
			}
		}
	}
	return out
}

// TestStartStopAreIdempotent checks the counters: repeated starts with one hash start once,
// repeated stops stop once, and a profile with a reconciler for an unrouted kind fails to start
// and is counted as a start error.
func TestStartStopAreIdempotent(t *testing.T) {
	e := startEngine(t, nil, Options{})
	ctx := context.Background()
	p := uniqueProfile("idem")
	starts, stops, errs := testutil.ToFloat64(metricStarts), testutil.ToFloat64(metricStops), testutil.ToFloat64(metricStartErrors)
	running := testutil.ToFloat64(metricRunning)

	rec := newRecorder("idem")
	require.NoError(t, e.StartProfile(ctx, profileOf(p, "1", rec, nil)))
	require.NoError(t, e.StartProfile(ctx, profileOf(p, "1", rec, nil)))
	assert.Equal(t, starts+1, testutil.ToFloat64(metricStarts))
	assert.Equal(t, running+1, testutil.ToFloat64(metricRunning))
	e.StopProfile(p)
	e.StopProfile(p)
	assert.Equal(t, stops+1, testutil.ToFloat64(metricStops))
	assert.Equal(t, running, testutil.ToFloat64(metricRunning))

	bad := Profile{Name: p, Hash: "x", Reconcilers: map[string]reconcile.Reconciler{"secret": rec}}
	err := e.StartProfile(ctx, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `kind "secret"`)
	assert.Equal(t, errs+1, testutil.ToFloat64(metricStartErrors))
	_, ok := e.Running(p)
	assert.False(t, ok)
	assert.Error(t, e.StartProfile(ctx, Profile{}), "a profile needs a name")
}

// startFixedController runs a stock controller-runtime controller for all Clusters on c, as the
// operator runs its fixed controllers (the labeller) beside the engine, until the test ends.
func startFixedController(t *testing.T, c cache.Cache, rec reconcile.Reconciler) {
	t.Helper()
	ctl, err := crcontroller.NewUnmanaged("fixed", crcontroller.Options{Reconciler: rec, SkipNameValidation: ptr.To(true)})
	require.NoError(t, err)
	require.NoError(t, ctl.Watch(source.Kind(c, &clustersv1alpha1.Cluster{}, &handler.TypedEnqueueRequestForObject[*clustersv1alpha1.Cluster]{})))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ctl.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}
