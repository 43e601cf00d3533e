package scheduler

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// assumeTTL bounds how long the book trusts a write the cache has not shown yet: an entry the
// cache never catches up with (the object was deleted meanwhile) is dropped after it.
const assumeTTL = time.Minute

// book is the scheduler's view of the Clusters: the shared cache plus its own writes that the
// cache does not show yet (kube-scheduler's "assume cache"). Decisions are taken one at a time
// under the scheduler's lock and each one reads the book, so a decision always sees the previous
// one's finalizer even when the watch event has not arrived: Balanced spreads exactly, and a
// Cluster is never chosen past its tenancyCount on stale data. Every write is still optimistically
// locked, so a change by someone else is never overwritten. The book is not safe for concurrent
// use: hold the scheduler's lock.
type book struct {
	reader client.Reader
	// assumed holds the Clusters as the scheduler last wrote them, by key.
	assumed map[types.NamespacedName]assumed
	// deleted holds the UIDs of Clusters the scheduler deleted, until the cache shows it.
	deleted map[types.UID]time.Time
	// pending holds, by Cluster, the request finalizers decided but not written yet: decisions
	// count them as taken seats.
	pending map[types.NamespacedName]map[string]bool
	now     func() time.Time
}

type assumed struct {
	cluster *clustersv1alpha1.Cluster
	at      time.Time
	// created: the scheduler created it, so the cache may not have it yet.
	created bool
}

func newBook(reader client.Reader) *book {
	return &book{reader: reader, assumed: map[types.NamespacedName]assumed{}, deleted: map[types.UID]time.Time{}, pending: map[types.NamespacedName]map[string]bool{}, now: time.Now}
}

// clusters lists every Cluster of the cache, each replaced by the scheduler's own newer write and
// marked deleting if the scheduler deleted it; Clusters the scheduler created that the cache does
// not have yet are added. The objects are shared: copy one before changing it.
func (b *book) clusters(ctx context.Context) ([]*clustersv1alpha1.Cluster, error) {
	list := &clustersv1alpha1.ClusterList{}
	if err := b.reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	now := b.now()
	out := make([]*clustersv1alpha1.Cluster, 0, len(list.Items)+len(b.assumed))
	seen := make(map[types.NamespacedName]bool, len(b.assumed))
	for i := range list.Items {
		cl := &list.Items[i]
		key := client.ObjectKeyFromObject(cl)
		if a, ok := b.assumed[key]; ok {
			seen[key] = true
			if a.cluster.UID == cl.UID && newer(a.cluster.ResourceVersion, cl.ResourceVersion) && now.Sub(a.at) < assumeTTL {
				cl = a.cluster
			} else {
				delete(b.assumed, key) // the cache caught up, or the object was replaced
			}
		}
		if at, ok := b.deleted[cl.UID]; ok {
			if !cl.DeletionTimestamp.IsZero() || now.Sub(at) >= assumeTTL {
				delete(b.deleted, cl.UID)
			} else {
				cl = cl.DeepCopy()
				cl.DeletionTimestamp = &metav1.Time{Time: at}
			}
		}
		out = append(out, cl)
	}
	for key, a := range b.assumed {
		if seen[key] {
			continue
		}
		if !a.created || now.Sub(a.at) >= assumeTTL {
			delete(b.assumed, key) // written, then deleted: the cache no longer has it
			continue
		}
		out = append(out, a.cluster)
	}
	for uid, at := range b.deleted {
		if now.Sub(at) >= assumeTTL {
			delete(b.deleted, uid)
		}
	}
	for i, cl := range out {
		if fs := b.pending[client.ObjectKeyFromObject(cl)]; len(fs) > 0 {
			cl = cl.DeepCopy()
			for f := range fs {
				if !slices.Contains(cl.Finalizers, f) {
					cl.Finalizers = append(cl.Finalizers, f)
				}
			}
			out[i] = cl
		}
	}
	return out, nil
}

// latest is the newest version of the Cluster key the scheduler knows, without pending
// finalizers: the cache's, or its own later write. It reads the cache, never the API server.
func (b *book) latest(ctx context.Context, key types.NamespacedName) (*clustersv1alpha1.Cluster, error) {
	cl := &clustersv1alpha1.Cluster{}
	err := b.reader.Get(ctx, key, cl)
	a, ok := b.assumed[key]
	switch {
	case ok && (apierrors.IsNotFound(err) && a.created || err == nil && a.cluster.UID == cl.UID && newer(a.cluster.ResourceVersion, cl.ResourceVersion)):
		return a.cluster, nil
	case err != nil:
		return nil, err
	}
	return cl, nil
}

// pend books finalizer f as decided for cl, not written yet.
func (b *book) pend(cl *clustersv1alpha1.Cluster, f string) {
	key := client.ObjectKeyFromObject(cl)
	if b.pending[key] == nil {
		b.pending[key] = map[string]bool{}
	}
	b.pending[key][f] = true
}

// pendingOf returns the pending finalizers of the Cluster key.
func (b *book) pendingOf(key types.NamespacedName) []string {
	return slices.Collect(maps.Keys(b.pending[key]))
}

// unpend removes finalizers from the pending ones of the Cluster key: written, or given up.
func (b *book) unpend(key types.NamespacedName, fs ...string) {
	for _, f := range fs {
		delete(b.pending[key], f)
	}
	if len(b.pending[key]) == 0 {
		delete(b.pending, key)
	}
}

// assume records cl as the scheduler just wrote it (the API server's answer).
func (b *book) assume(cl *clustersv1alpha1.Cluster, created bool) {
	b.assumed[client.ObjectKeyFromObject(cl)] = assumed{cluster: cl, at: b.now(), created: created}
}

// forget records that the scheduler deleted cl.
func (b *book) forget(cl *clustersv1alpha1.Cluster) {
	delete(b.assumed, client.ObjectKeyFromObject(cl))
	b.deleted[cl.UID] = b.now()
}

// newer reports whether resource version a is newer than b. Resource versions are opaque to
// clients, but the API server's are etcd revisions; when either is not a number the cache wins.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	return errA == nil && errB == nil && x > y
}
