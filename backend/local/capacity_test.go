package local

import (
	"context"
	"os"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// capacityBackend is a started Backend with no process: the places of --local-max-clusters are
// taken by placeholder instances (running) and restores (clusters being made from a snapshot), so
// that the accounting is checked without starting a control plane.
func capacityBackend(t *testing.T, maxClusters int, notified *[]string) *Backend {
	t.Helper()
	stateDir, err := os.MkdirTemp("", "cap") // t.TempDir is too long for etcd's sockets with these subtest names
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	b, err := New(Options{
		Binaries:     []Binaries{{Dir: t.TempDir(), Version: "1.37.1"}},
		StateDir:     stateDir,
		MaxClusters:  maxClusters,
		Notify:       func(r backend.Ref) { *notified = append(*notified, r.Name) },
		ListClusters: func(context.Context) ([]clustersv1alpha1.Cluster, error) { return nil, nil },
	})
	require.NoError(t, err)
	b.started = true
	return b
}

// running gives cl a placeholder instance: it takes a place, and stops at once.
func running(b *Backend, cl *clustersv1alpha1.Cluster) {
	done := make(chan struct{})
	close(done)
	b.instances[cl.UID] = &instance{b: b, cancel: func() {}, done: done, meta: meta{UID: cl.UID, Namespace: cl.Namespace, Name: cl.Name}}
}

func refused(t *testing.T, b *Backend, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	_, err := b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonCapacityExhausted), "%v", err)
	assert.Equal(t, retryCapacity, backend.RetryAfter(err), "a lost notification does not strand the Cluster")
	assert.Contains(t, err.Error(), "raise --local-max-clusters")
}

// TestCapacity: who holds a place of --local-max-clusters, and who is told when one frees.
// Issue 39: a freed place was announced only by Delete, to the waiters in no order, with no
// safety net, and a cluster being made from a snapshot held no place while it was restored.
func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
		// run take a place each (running), restoring too (made from a snapshot); wait are then
		// refused, in this order; del is deleted.
		run, restoring, wait []string
		del                  string
		notified             []string
	}{{
		name: "a deletion notifies every waiter, the longest waiting first",
		max:  1, run: []string{"a"}, wait: []string{"b", "c", "d"}, del: "a",
		notified: []string{"b", "c", "d"},
	}, {
		name: "a cluster made from a snapshot holds its place while it is restored",
		max:  1, restoring: []string{"r"}, wait: []string{"b"}, del: "r",
		notified: []string{"b"},
	}, {
		name: "no place is free after the deletion (the limit was lowered): nobody is told",
		max:  1, run: []string{"a", "x"}, wait: []string{"b"}, del: "a",
	}, {
		name: "a waiter deleted is not told",
		max:  1, run: []string{"a"}, wait: []string{"b"}, del: "b",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var notified []string
			b := capacityBackend(t, tc.max, &notified)
			cls := map[string]*clustersv1alpha1.Cluster{}
			for _, n := range append(append(append([]string{}, tc.run...), tc.restoring...), tc.wait...) {
				cls[n] = newCluster(n)
			}
			for _, n := range tc.run {
				running(b, cls[n])
			}
			for _, n := range tc.restoring {
				b.restores[cls[n].UID] = &restore{}
			}
			for _, n := range tc.wait {
				refused(t, b, cls[n])
			}
			refused(t, b, cls[tc.wait[0]]) // refused again: it keeps its rank
			notified = nil

			gone, err := b.Delete(t.Context(), cls[tc.del])
			require.NoError(t, err)
			assert.True(t, gone)
			assert.Equal(t, tc.notified, notified)
		})
	}
}
