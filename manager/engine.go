package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// ErrStopped is returned by StartProfile once the engine has stopped (shutdown or lost lease).
var ErrStopped = errors.New("the controller engine is stopped")

// Kind is a resource kind whose events the engine routes to the profile owning the object.
type Kind struct {
	// Name identifies the kind in Profile.Reconcilers, metrics and logs, e.g. "cluster".
	Name string
	// Object is an empty object of the kind, e.g. &clustersv1alpha1.Cluster{}.
	Object client.Object
	// Key returns the name of the profile that owns obj, or "" if none does. It must be cheap
	// and must depend on the object alone: it also defines the cache index used at start.
	Key func(obj client.Object) string
	// Predicates filter events before routing; an event is routed only if all pass. They apply
	// to every profile alike. Initial enqueues at StartProfile bypass them.
	Predicates []predicate.Predicate
	// Workers is the number of workers per profile for this kind. Default Options.Workers. The
	// queue never hands one object to two workers at once.
	Workers int
}

// Options configure an Engine. The zero value of each field means its default.
type Options struct {
	// Scheme knows the routed kinds and their lists. Required.
	Scheme *runtime.Scheme
	// Kinds are the routed kinds. Required.
	Kinds []Kind
	// Watches map events of other kinds to objects of the routed kinds. Optional.
	Watches []Watch
	// Workers is the number of workers per profile and kind. Default 1.
	Workers int
	// NewRateLimiter builds the rate limiter of each queue.
	// Default workqueue.DefaultTypedControllerRateLimiter.
	NewRateLimiter func() workqueue.TypedRateLimiter[reconcile.Request]
	// Logger is the engine's logger. Default: discard.
	Logger logr.Logger
}

// Profile is the desired state of one profile's controllers.
type Profile struct {
	// Name is the routing key, the name of the ClusterProfile.
	Name string
	// Hash identifies the configuration the reconcilers were built from; StartProfile with a
	// different Hash restarts the profile.
	Hash string
	// Reconcilers by Kind.Name. Kinds without a reconciler get no queue.
	Reconcilers map[string]reconcile.Reconciler
}

// Engine runs per-profile controllers on one shared cache. Create it with New and add it to a
// controller-runtime manager (it is a LeaderElectionRunnable).
type Engine struct {
	cache   cache.Cache
	opts    Options
	kinds   map[string]*Kind
	lists   map[string]client.ObjectList // empty list per kind
	log     logr.Logger
	keys    keyedMutex
	ready   chan struct{} // closed once Start has synced and registered its handlers
	stopped chan struct{} // closed once Start has returned

	// mu guards routes and profiles. The event handlers take it for reading only.
	mu       sync.RWMutex
	routes   map[string]map[string]*controller // kind -> profile -> controller
	profiles map[string]*profileRun
	runCtx   context.Context
	closing  bool // set once Start stops everything; no profile may be published after

	startOnce sync.Once
}

var _ manager.LeaderElectionRunnable = &Engine{}

// New creates an Engine over c and adds the routing indexes to c. Call it before the cache
// starts.
func New(ctx context.Context, c cache.Cache, opts Options) (*Engine, error) {
	if opts.Scheme == nil {
		return nil, errors.New("manager.Options.Scheme is nil")
	}
	if len(opts.Kinds) == 0 {
		return nil, errors.New("manager.Options.Kinds is empty: the engine needs at least one kind to route")
	}
	if opts.Workers <= 0 {
		opts.Workers = 1
	}
	if opts.NewRateLimiter == nil {
		opts.NewRateLimiter = workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	if err := validateWatches(opts); err != nil {
		return nil, err
	}
	e := &Engine{
		cache:    c,
		opts:     opts,
		kinds:    map[string]*Kind{},
		lists:    map[string]client.ObjectList{},
		log:      opts.Logger,
		ready:    make(chan struct{}),
		stopped:  make(chan struct{}),
		routes:   map[string]map[string]*controller{},
		profiles: map[string]*profileRun{},
	}
	for i := range opts.Kinds {
		k := &opts.Kinds[i]
		switch {
		case k.Name == "":
			return nil, fmt.Errorf("manager.Options.Kinds[%d].Name is empty", i)
		case k.Object == nil || k.Key == nil:
			return nil, fmt.Errorf("manager.Options.Kinds[%d] (%s) needs Object and Key", i, k.Name)
		case e.kinds[k.Name] != nil:
			return nil, fmt.Errorf("manager.Options.Kinds[%d]: kind %q is registered twice", i, k.Name)
		}
		list, err := newList(opts.Scheme, k.Object)
		if err != nil {
			return nil, fmt.Errorf("manager.Options.Kinds[%d] (%s): %w", i, k.Name, err)
		}
		e.kinds[k.Name] = k
		e.lists[k.Name] = list
		e.routes[k.Name] = map[string]*controller{}
		key := k.Key
		if err := c.IndexField(ctx, k.Object, indexName(k.Name), func(o client.Object) []string {
			if v := key(o); v != "" {
				return []string{v}
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("adding the routing index of %s: %w", k.Name, err)
		}
	}
	return e, nil
}

// validateWatches checks the watches before New changes anything (the cache's indexes).
func validateWatches(opts Options) error {
	for i, w := range opts.Watches {
		routed := slices.ContainsFunc(opts.Kinds, func(k Kind) bool { return k.Name == w.Kind })
		switch {
		case w.Object == nil || w.Map == nil:
			return fmt.Errorf("manager.Options.Watches[%d] (%s) needs Object and Map", i, w.Name)
		case !routed:
			return fmt.Errorf("manager.Options.Watches[%d] (%s) maps to kind %q, which the engine does not route", i, w.Name, w.Kind)
		}
	}
	return nil
}

func indexName(kind string) string { return "manager.routing-key." + kind }

// NeedLeaderElection makes the manager start the engine only on the elected replica.
func (e *Engine) NeedLeaderElection() bool { return true }

// Start waits for the shared cache to sync, registers one routing handler per kind and serves
// StartProfile calls until ctx is done; then it stops every profile and removes its handlers.
// It may be called once.
func (e *Engine) Start(ctx context.Context) error {
	first := false
	e.startOnce.Do(func() { first = true })
	if !first {
		return errors.New("the controller engine was already started")
	}
	defer close(e.stopped)

	if !e.cache.WaitForCacheSync(ctx) {
		return fmt.Errorf("the shared cache did not sync: %w", context.Cause(ctx))
	}
	var regs []func() error
	defer func() {
		for _, remove := range regs {
			if err := remove(); err != nil {
				e.log.Error(err, "Removing an event handler")
			}
		}
	}()
	for _, k := range e.opts.Kinds {
		inf, err := e.cache.GetInformer(ctx, k.Object)
		if err != nil {
			return fmt.Errorf("getting the shared informer of %s: %w", k.Name, err)
		}
		reg, err := inf.AddEventHandler(&router{engine: e, kind: e.kinds[k.Name]})
		if err != nil {
			return fmt.Errorf("adding the routing handler of %s: %w", k.Name, err)
		}
		regs = append(regs, func() error { return inf.RemoveEventHandler(reg) })
	}
	for i := range e.opts.Watches {
		w := &e.opts.Watches[i]
		inf, err := e.cache.GetInformer(ctx, w.Object)
		if err != nil {
			return fmt.Errorf("getting the shared informer of watch %s: %w", w.Name, err)
		}
		reg, err := inf.AddEventHandler(&watcher{ctx: ctx, engine: e, watch: w})
		if err != nil {
			return fmt.Errorf("adding the handler of watch %s: %w", w.Name, err)
		}
		regs = append(regs, func() error { return inf.RemoveEventHandler(reg) })
	}

	e.mu.Lock()
	e.runCtx = ctx
	e.mu.Unlock()
	close(e.ready)
	e.log.Info("Controller engine started", "kinds", len(e.opts.Kinds), "watches", len(e.opts.Watches))

	<-ctx.Done()
	e.stopAll()
	e.log.Info("Controller engine stopped")
	return nil
}

// Ready is closed once the engine routes events and accepts profiles.
func (e *Engine) Ready() <-chan struct{} { return e.ready }

// Done is closed once Start has returned: every profile is stopped and the handlers are removed.
// controller-runtime does not wait for runnables when the lease is lost, so callers that must
// know that everything stopped wait for Done.
func (e *Engine) Done() <-chan struct{} { return e.stopped }

// StartProfile runs p's controllers. It waits until the engine runs (this replica is leader and
// the cache synced). It is idempotent: a running profile with the same Hash is left alone; with
// another Hash it is stopped and started again.
func (e *Engine) StartProfile(ctx context.Context, p Profile) error {
	if p.Name == "" {
		return errors.New("a profile needs a name")
	}
	select {
	case <-e.ready:
	case <-e.stopped:
		return ErrStopped
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	unlock := e.keys.lock(p.Name)
	defer unlock()

	e.mu.RLock()
	cur, runCtx := e.profiles[p.Name], e.runCtx
	e.mu.RUnlock()
	if runCtx.Err() != nil {
		return ErrStopped
	}
	if cur != nil {
		if cur.hash == p.Hash {
			return nil
		}
		e.log.Info("Restarting profile: its configuration changed", "profile", p.Name)
		e.stopLocked(p.Name)
	}
	if err := e.startLocked(runCtx, p); err != nil {
		if !errors.Is(err, ErrStopped) {
			metricStartErrors.Inc()
		}
		return err
	}
	return nil
}

// StopProfile stops p's controllers and returns once none of their workers runs. Stopping a
// profile that does not run does nothing.
func (e *Engine) StopProfile(name string) {
	unlock := e.keys.lock(name)
	defer unlock()
	e.stopLocked(name)
}

// Running reports whether the named profile runs, and with which hash.
func (e *Engine) Running(name string) (hash string, ok bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if r := e.profiles[name]; r != nil {
		return r.hash, true
	}
	return "", false
}

// Profiles returns the names of the running profiles.
func (e *Engine) Profiles() []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	names := make([]string, 0, len(e.profiles))
	for n := range e.profiles {
		names = append(names, n)
	}
	return names
}

// profileRun is one running profile.
type profileRun struct {
	hash        string
	cancel      context.CancelFunc
	controllers []*controller
}

func (e *Engine) startLocked(runCtx context.Context, p Profile) error {
	for kind := range p.Reconcilers {
		if e.kinds[kind] == nil {
			return fmt.Errorf("profile %s has a reconciler for kind %q, which the engine does not route", p.Name, kind)
		}
	}
	ctx, cancel := context.WithCancel(runCtx)
	run := &profileRun{hash: p.Hash, cancel: cancel}
	for _, k := range e.opts.Kinds {
		rec := p.Reconcilers[k.Name]
		if rec == nil {
			continue
		}
		c := newController(p.Name, k.Name, rec, e.opts.NewRateLimiter(), e.log)
		workers := k.Workers
		if workers <= 0 {
			workers = e.opts.Workers
		}
		c.start(ctx, workers)
		run.controllers = append(run.controllers, c)
	}

	e.mu.Lock()
	if e.closing {
		e.mu.Unlock()
		cancel()
		for _, c := range run.controllers {
			c.stop()
		}
		return ErrStopped
	}
	e.profiles[p.Name] = run
	for _, c := range run.controllers {
		e.routes[c.kind][p.Name] = c
	}
	e.mu.Unlock()
	metricRunning.Inc()
	metricStarts.Inc()

	// Routes are published first, so an object created now is seen either by the list below or
	// by the handler (the queue merges duplicates).
	for _, c := range run.controllers {
		if err := e.enqueueExisting(ctx, c); err != nil {
			e.stopLocked(p.Name)
			return fmt.Errorf("starting profile %s: %w", p.Name, err)
		}
	}
	e.log.Info("Profile started", "profile", p.Name, "controllers", len(run.controllers))
	return nil
}

// enqueueExisting enqueues the profile's existing objects of c's kind, read from the cache index.
func (e *Engine) enqueueExisting(ctx context.Context, c *controller) error {
	list := e.lists[c.kind].DeepCopyObject().(client.ObjectList)
	if err := e.cache.List(ctx, list, MatchingKey(c.kind, c.profile), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing the %s objects of the profile from the cache: %w", c.kind, err)
	}
	return forEachKey(list, c.add)
}

func (e *Engine) stopLocked(name string) {
	e.mu.Lock()
	run := e.profiles[name]
	if run == nil {
		e.mu.Unlock()
		return
	}
	delete(e.profiles, name)
	for _, c := range run.controllers {
		delete(e.routes[c.kind], name)
	}
	e.mu.Unlock()

	run.cancel()
	for _, c := range run.controllers {
		c.stop()
	}
	deleteProfileSeries(name)
	metricRunning.Dec()
	metricStops.Inc()
	e.log.Info("Profile stopped", "profile", name)
}

func (e *Engine) stopAll() {
	e.mu.Lock()
	e.closing = true
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, name := range e.Profiles() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.StopProfile(name)
		}()
	}
	wg.Wait()
}

// Enqueue asks the profile's reconciler of kind to reconcile req. The routing handler calls it
// for informer events; others call it for changes the informer cannot see (a cluster process that
// became healthy or crashed). It reports whether the profile runs; if not, nothing happens. It
// holds the read lock while adding, so once stopLocked has removed a route nothing gets through,
// and it never blocks.
func (e *Engine) Enqueue(kind, profile string, req reconcile.Request) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	c := e.routes[kind][profile]
	if c != nil {
		c.add(req)
	}
	return c != nil
}

// MatchingKey is a list option that selects, from the shared cache, the objects of kind whose
// routing key is key: the objects the profile named key owns. It uses the engine's index, so
// callers do not register a second one.
func MatchingKey(kind, key string) client.MatchingFields {
	return client.MatchingFields{indexName(kind): key}
}
