package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// listReader is a client.Reader whose List returns a fixed set of Clusters.
type listReader struct {
	client.Reader
	items []clustersv1alpha1.Cluster
}

func (r *listReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	list.(*clustersv1alpha1.ClusterList).Items = r.items
	return nil
}

func versioned(name string, uid types.UID, rv string, finalizers ...string) clustersv1alpha1.Cluster {
	return clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: uid, ResourceVersion: rv, Finalizers: finalizers}}
}

// TestBook checks how the scheduler's own writes overlay the cache until it catches up.
func TestBook(t *testing.T) {
	now := time.Unix(1000, 0)
	type step struct {
		cache []clustersv1alpha1.Cluster
		after time.Duration // time passed since the writes
		want  []string      // name@rv, deleting marked with "!"
	}
	tests := []struct {
		name   string
		writes func(b *book)
		steps  []step
	}{
		{
			name:   "a patch shows until the cache catches up",
			writes: func(b *book) { c := versioned("a", "u", "5", "f"); b.assume(&c, false) },
			steps: []step{
				{cache: []clustersv1alpha1.Cluster{versioned("a", "u", "4")}, want: []string{"a@5"}},
				{cache: []clustersv1alpha1.Cluster{versioned("a", "u", "6")}, want: []string{"a@6"}},
				// the entry is gone once caught up: an older cache is believed again
				{cache: []clustersv1alpha1.Cluster{versioned("a", "u", "4")}, want: []string{"a@4"}},
			},
		},
		{
			name:   "a created Cluster shows before the cache has it, for a while",
			writes: func(b *book) { c := versioned("new", "n", "9"); b.assume(&c, true) },
			steps: []step{
				{cache: nil, want: []string{"new@9"}},
				{cache: nil, after: assumeTTL, want: nil},
			},
		},
		{
			name:   "a patched Cluster missing from the cache was deleted",
			writes: func(b *book) { c := versioned("a", "u", "5"); b.assume(&c, false) },
			steps:  []step{{cache: nil, want: nil}},
		},
		{
			name:   "a replaced object (other UID) is the cache's",
			writes: func(b *book) { c := versioned("a", "u", "5"); b.assume(&c, false) },
			steps:  []step{{cache: []clustersv1alpha1.Cluster{versioned("a", "other", "3")}, want: []string{"a@3"}}},
		},
		{
			name:   "resource versions that are not numbers: the cache wins",
			writes: func(b *book) { c := versioned("a", "u", "x5"); b.assume(&c, false) },
			steps:  []step{{cache: []clustersv1alpha1.Cluster{versioned("a", "u", "x4")}, want: []string{"a@x4"}}},
		},
		{
			name: "a deleted Cluster is deleting until the cache shows it",
			writes: func(b *book) {
				c := versioned("a", "u", "5")
				b.assume(&c, false)
				b.forget(&c)
			},
			steps: []step{
				{cache: []clustersv1alpha1.Cluster{versioned("a", "u", "4")}, want: []string{"a@4!"}},
				{cache: []clustersv1alpha1.Cluster{versioned("a", "u", "4")}, after: assumeTTL, want: []string{"a@4"}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &listReader{}
			b := newBook(r)
			b.now = func() time.Time { return now }
			tc.writes(b)
			for i, s := range tc.steps {
				r.items = s.cache
				b.now = func() time.Time { return now.Add(s.after) }
				got, err := b.clusters(context.Background())
				require.NoError(t, err)
				var names []string
				for _, cl := range got {
					n := cl.Name + "@" + cl.ResourceVersion
					if !cl.DeletionTimestamp.IsZero() {
						n += "!"
					}
					names = append(names, n)
				}
				assert.Equal(t, s.want, names, "step %d", i)
			}
		})
	}
}

// TestBookPending: a decided finalizer counts as taken in every view until it is written or given
// up; the base of a write is the latest version without it.
func TestBookPending(t *testing.T) {
	cached := versioned("a", "u", "4", "other")
	r := &fakeReader{listReader: listReader{items: []clustersv1alpha1.Cluster{cached}}}
	b := newBook(r)
	b.pend(&cached, "request.clusters.openmcp.cloud/r1")
	b.pend(&cached, "request.clusters.openmcp.cloud/r2")
	view, err := b.clusters(context.Background())
	require.NoError(t, err)
	require.Len(t, view, 1)
	assert.Equal(t, 3, len(view[0].Finalizers))
	assert.Equal(t, 2, TenancyCount(view[0]))
	assert.Equal(t, []string{"other"}, r.items[0].Finalizers, "the cache's object is not changed")

	key := client.ObjectKeyFromObject(&cached)
	base, err := b.latest(context.Background(), key)
	require.NoError(t, err)
	assert.Equal(t, []string{"other"}, base.Finalizers, "a write's base has no pending finalizer")
	written := versioned("a", "u", "5", "other", "request.clusters.openmcp.cloud/r1")
	b.assume(&written, false)
	base, err = b.latest(context.Background(), key)
	require.NoError(t, err)
	assert.Equal(t, "5", base.ResourceVersion, "the scheduler's own newer write")

	b.unpend(key, "request.clusters.openmcp.cloud/r1", "request.clusters.openmcp.cloud/r2")
	assert.Empty(t, b.pending)
	view, err = b.clusters(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 1, TenancyCount(view[0]), "only the written one")
}

// fakeReader adds Get to listReader.
type fakeReader struct{ listReader }

func (r *fakeReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	for i := range r.items {
		if client.ObjectKeyFromObject(&r.items[i]) == key {
			r.items[i].DeepCopyInto(obj.(*clustersv1alpha1.Cluster))
			return nil
		}
	}
	return apierrors.NewNotFound(clustersv1alpha1.GroupVersion.WithResource("clusters").GroupResource(), key.Name)
}
