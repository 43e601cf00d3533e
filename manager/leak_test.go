package manager

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// countingCache counts event handler registrations on its informers.
type countingCache struct {
	cache.Cache
	added, removed atomic.Int32
}

func (c *countingCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	inf, err := c.Cache.GetInformer(ctx, obj, opts...)
	if err != nil {
		return nil, err
	}
	return &countingInformer{Informer: inf, c: c}, nil
}

type countingInformer struct {
	cache.Informer
	c *countingCache
}

func (i *countingInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	i.c.added.Add(1)
	return i.Informer.AddEventHandler(h)
}

func (i *countingInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, d time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	i.c.added.Add(1)
	return i.Informer.AddEventHandlerWithResyncPeriod(h, d)
}

func (i *countingInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	i.c.added.Add(1)
	return i.Informer.AddEventHandlerWithOptions(h, o)
}

func (i *countingInformer) RemoveEventHandler(r toolscache.ResourceEventHandlerRegistration) error {
	i.c.removed.Add(1)
	return i.Informer.RemoveEventHandler(r)
}

// TestStartStopCyclesLeakNothing runs 1000 start/stop cycles of a profile that has objects to
// reconcile and checks that no goroutine and no event handler registration is left behind, and
// that stopping the engine removes its handlers.
func TestStartStopCyclesLeakNothing(t *testing.T) {
	inner, err := cache.New(env.Config, cache.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	counting := &countingCache{Cache: inner}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, err := New(ctx, counting, Options{Scheme: testenv.Scheme, Kinds: testKinds(), Workers: 2})
	require.NoError(t, err)
	cacheDone, engineDone := make(chan struct{}), make(chan error, 1)
	go func() { defer close(cacheDone); _ = counting.Start(ctx) }()
	go func() { engineDone <- e.Start(ctx) }()
	<-e.Ready()
	handlers := counting.added.Load()
	require.EqualValues(t, len(testKinds()), handlers, "one handler per kind")

	ns := env.Namespace(t)
	p := uniqueProfile("churn")
	k1, k2 := newCluster(t, ns, "one", p), newCluster(t, ns, "two", p)
	var reconciled atomic.Int64
	rec := reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		reconciled.Add(1)
		return reconcile.Result{}, nil
	})
	// Warm up: the first cycle creates lazily-started goroutines of the shared machinery.
	require.NoError(t, e.StartProfile(ctx, profileOf(p, "warm", rec, rec)))
	e.StopProfile(p)
	baseline := goleak.IgnoreCurrent()

	running := testutilRunning()
	for i := range 1000 {
		require.NoError(t, e.StartProfile(ctx, profileOf(p, string(rune('a'+i%26)), rec, rec)))
		e.StopProfile(p)
	}
	assert.Equal(t, running, testutilRunning(), "the running-profiles gauge returns to where it was")
	assert.Equal(t, handlers, counting.added.Load(), "no handler registered per start")
	assert.Zero(t, counting.removed.Load())
	goleak.VerifyNone(t, baseline)
	t.Logf("reconciles during churn: %d (objects %s, %s)", reconciled.Load(), k1, k2)

	cancel()
	require.NoError(t, <-engineDone)
	<-cacheDone
	assert.Equal(t, counting.added.Load(), counting.removed.Load(), "the engine removes its handlers when it stops")
}

func testutilRunning() float64 { return testutil.ToFloat64(metricRunning) }

// TestStartRacingShutdown starts profiles while the engine shuts down: afterwards no profile
// runs and no goroutine of the engine is left, whichever side won each race.
func TestStartRacingShutdown(t *testing.T) {
	c, err := cache.New(env.Config, cache.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	cacheCtx, stopCache := context.WithCancel(context.Background())
	defer stopCache()
	go func() { _ = c.Start(cacheCtx) }()
	require.True(t, c.WaitForCacheSync(cacheCtx))
	engineCtx, stopEngine := context.WithCancel(context.Background())
	e, err := New(engineCtx, c, Options{Scheme: testenv.Scheme, Kinds: testKinds()})
	require.NoError(t, err)
	// Let the shared informers exist before the baseline.
	for _, k := range testKinds() {
		_, err := c.GetInformer(cacheCtx, k.Object)
		require.NoError(t, err)
	}
	baseline := goleak.IgnoreCurrent()

	engineDone := make(chan error, 1)
	go func() { engineDone <- e.Start(engineCtx) }()
	<-e.Ready()
	var wg sync.WaitGroup
	var started, refused atomic.Int32
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				err := e.StartProfile(context.Background(), profileOf(fmt.Sprintf("race-%d-%d", i, j), "1", noop, noop))
				if err != nil {
					assert.ErrorIs(t, err, ErrStopped)
					refused.Add(1)
					return
				}
				started.Add(1)
			}
		}()
	}
	for started.Load() < 100 {
		runtime.Gosched()
	}
	stopEngine()
	require.NoError(t, <-engineDone)
	wg.Wait()
	assert.Empty(t, e.Profiles(), "no profile runs after shutdown")
	assert.EqualValues(t, 50, refused.Load())
	goleak.VerifyNone(t, baseline)
}
