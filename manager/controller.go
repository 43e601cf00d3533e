package manager

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// controller is one profile's reconciler of one kind: a rate-limited queue and its workers.
type controller struct {
	profile, kind string
	rec           reconcile.Reconciler
	queue         workqueue.TypedRateLimitingInterface[reconcile.Request]
	log           logr.Logger
	wg            sync.WaitGroup
}

func newController(profile, kind string, rec reconcile.Reconciler, rl workqueue.TypedRateLimiter[reconcile.Request], l logr.Logger) *controller {
	return &controller{
		profile: profile,
		kind:    kind,
		rec:     rec,
		// No Name: a named queue registers global metrics series that outlive the profile.
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(rl, workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{}),
		log:   l.WithValues("profile", profile, "kind", kind),
	}
}

func (c *controller) add(req reconcile.Request) { c.queue.Add(req) }

func (c *controller) start(ctx context.Context, workers int) {
	c.wg.Add(workers)
	for range workers {
		go func() {
			defer c.wg.Done()
			for c.processNext(ctx) {
			}
		}()
	}
}

// stop shuts the queue down and waits for the workers; the caller has cancelled their context.
func (c *controller) stop() {
	c.queue.ShutDown()
	c.wg.Wait()
}

func (c *controller) processNext(ctx context.Context) bool {
	req, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(req)
	if ctx.Err() != nil {
		// The profile is stopping: drop what is left.
		c.queue.Forget(req)
		return true
	}
	c.reconcile(ctx, req)
	return true
}

func (c *controller) reconcile(ctx context.Context, req reconcile.Request) {
	l := c.log.WithValues("namespace", req.Namespace, "name", req.Name)
	start := time.Now()
	res, err := c.safeReconcile(log.IntoContext(ctx, l), req)
	observeReconcile(c.profile, c.kind, time.Since(start), res, err)
	switch {
	case err != nil:
		if errors.Is(err, reconcile.TerminalError(nil)) {
			c.queue.Forget(req)
			l.Error(err, "Reconcile failed; not retrying (terminal error)")
			return
		}
		if ctx.Err() == nil {
			l.Error(err, "Reconcile failed; retrying")
		}
		c.queue.AddRateLimited(req)
	case res.RequeueAfter > 0:
		c.queue.Forget(req)
		c.queue.AddAfter(req, res.RequeueAfter)
	case res.Requeue: //nolint:staticcheck // honour the deprecated field for reconcilers that set it
		c.queue.AddRateLimited(req)
	default:
		c.queue.Forget(req)
	}
}

// errPanic marks a recovered panic of a reconciler.
var errPanic = errors.New("reconciler panicked")

func (c *controller) safeReconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.log.Error(fmt.Errorf("%v", r), "Recovered a panic in a reconciler", "namespace", req.Namespace, "name", req.Name, "stack", string(debug.Stack()))
			res, err = reconcile.Result{}, fmt.Errorf("%w: %v", errPanic, r)
		}
	}()
	return c.rec.Reconcile(ctx, req)
}
