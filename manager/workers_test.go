package manager

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// concurrency records how many reconciles run at once, in all and per object.
type concurrency struct {
	mu           sync.Mutex
	now, max     int
	perKey       map[string]int
	maxPerKey    int
	release      chan struct{}
	reconcilesOf map[string]int
}

func (c *concurrency) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	k := req.String()
	c.mu.Lock()
	c.now++
	c.max = max(c.max, c.now)
	c.perKey[k]++
	c.maxPerKey = max(c.maxPerKey, c.perKey[k])
	c.reconcilesOf[k]++
	c.mu.Unlock()
	<-c.release
	c.mu.Lock()
	c.now--
	c.perKey[k]--
	c.mu.Unlock()
	return reconcile.Result{}, nil
}

func (c *concurrency) running() int { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

// TestWorkers: a kind's workers reconcile different objects at once, up to their number, and
// never one object twice at once, however often it is enqueued meanwhile.
func TestWorkers(t *testing.T) {
	c := &concurrency{perKey: map[string]int{}, reconcilesOf: map[string]int{}, release: make(chan struct{})}
	ctl := newController("p", "k", c, workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](), logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	ctl.start(ctx, 4)
	defer func() { cancel(); ctl.stop() }()

	same := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "same"}}
	ctl.add(same)
	for i := range 7 {
		ctl.add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprint(i)}})
	}
	require.Eventually(t, func() bool { return c.running() == 4 }, 10*time.Second, 10*time.Millisecond, "4 workers busy")
	for range 10 { // enqueued again while it may be running: held back until it is done
		ctl.add(same)
	}
	// Release one reconcile at a time; the rest of the queue follows.
	go func() {
		for {
			select {
			case c.release <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
	}()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.now == 0 && len(c.reconcilesOf) == 8 && ctl.queue.Len() == 0
	}, 10*time.Second, 10*time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Equal(t, 4, c.max, "at most the workers at once")
	assert.Equal(t, 1, c.maxPerKey, "one object never by two workers at once")
	assert.LessOrEqual(t, c.reconcilesOf[same.String()], 2, "the repeated adds collapse into one more pass")
}
