package local

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend"
)

// retryCapacity is the safety net of a Cluster refused for capacity: a freed place notifies it at
// once (freedLocked), but a notification can be lost (its profile restarting at that moment), and
// a lost one must not strand it.
const retryCapacity = 30 * time.Second

// waiter is a Cluster refused for capacity, and its rank: the order in which the waiters came.
type waiter struct {
	ref  backend.Ref
	rank uint64
}

// usedLocked is how many places of --local-max-clusters are taken: the clusters that run and the
// ones being made from a snapshot (they have no processes until the snapshot is restored, and
// then they run).
func (b *Backend) usedLocked() int {
	n := 0
	for _, in := range b.instances {
		in.mu.Lock()
		if !in.asleepLocked() { // a hibernated cluster holds no place (hibernate.go)
			n++
		}
		in.mu.Unlock()
	}
	for uid := range b.restores {
		if b.instances[uid] == nil {
			n++
		}
	}
	return n
}

// refuseLocked records that ref's Cluster waits for a place and returns the error it reports.
func (b *Backend) refuseLocked(uid types.UID, ref backend.Ref) error {
	if _, ok := b.waiting[uid]; !ok {
		b.waited++
		b.waiting[uid] = waiter{ref: ref, rank: b.waited}
	}
	return &backend.Error{Reason: backend.ReasonCapacityExhausted, RetryAfter: retryCapacity, Err: fmt.Errorf(
		"this operator already runs %d local clusters, the most --local-max-clusters allows; the cluster starts by itself once another Cluster is deleted, or raise --local-max-clusters",
		b.usedLocked())}
}

// freedLocked notifies the Clusters waiting for a place, the longest waiting first, if a place is
// free: the caller has just given one back (a cluster deleted, or one that failed to start or to
// be made from a snapshot). The first of them whose reconcile comes takes it; the others are
// refused again and stay waiting. Notify does not block, so b.mu may be held.
func (b *Backend) freedLocked() {
	if b.placeFreed != nil { // the wakes waiting for a place (hibernate.go)
		close(b.placeFreed)
		b.placeFreed = nil
	}
	if len(b.waiting) == 0 {
		b.fillLocked() // no Cluster waits: the pools may refill (pool.go)
		return
	}
	if b.opts.Notify == nil || b.usedLocked() >= b.opts.MaxClusters {
		return
	}
	ws := slices.SortedFunc(maps.Values(b.waiting), func(x, y waiter) int { return cmp.Compare(x.rank, y.rank) })
	for _, w := range ws {
		b.opts.Notify(w.ref)
	}
}

// placeFreedLocked returns a channel closed when a place is next freed (freedLocked).
func (b *Backend) placeFreedLocked() <-chan struct{} {
	if b.placeFreed == nil {
		b.placeFreed = make(chan struct{})
	}
	return b.placeFreed
}
