package backendtest_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
)

func cluster(name, uid string) *clustersv1alpha1.Cluster {
	return &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(uid)}}
}

func want(requested string) backend.Want {
	offer := backend.Offer{Versions: []clustersv1alpha1.SupportedK8sVersion{{Version: "1.37.1"}, {Version: "1.36.3"}, {Version: "1.35.0"}}, Default: "1.36.3"}
	return backend.WantOf(offer, requested)
}

// TestVersionContract: the fake keeps the contract of backend.Resolve and adds a scripted refusal.
func TestVersionContract(t *testing.T) {
	f := backendtest.New(backendtest.Options{Versions: []string{"1.37.1", "1.36.3", "1.35.0"}, Server: &rest.Config{Host: "https://127.0.0.1:1", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}})
	ctx := t.Context()
	cl := cluster("c", "u1")
	s, err := f.Ensure(ctx, cl, want(""))
	require.NoError(t, err)
	assert.True(t, s.Ready)
	assert.Equal(t, backend.ReasonRunning, s.Reason)
	assert.Equal(t, "1.36.3", s.Runs, "the profile's default")
	assert.Equal(t, "https://127.0.0.1:1", s.Endpoint)
	assert.Equal(t, []byte("ca"), s.CABundle)
	assert.Nil(t, s.VersionChange)

	s, err = f.Ensure(ctx, cl, want("1.35.0"))
	require.NoError(t, err)
	require.NotNil(t, s.VersionChange)
	assert.True(t, s.VersionChange.Refused, "a downgrade of the minor")
	assert.Equal(t, "1.36.3", s.Runs)

	f.Set(client(cl), func(c *backendtest.Cluster) { c.HoldUpgrade = true })
	s, err = f.Ensure(ctx, cl, want("1.37.1"))
	require.NoError(t, err)
	require.NotNil(t, s.VersionChange)
	assert.False(t, s.VersionChange.Refused)
	assert.Equal(t, "1.37.1", s.Runs, "Runs is where it moves")
	assert.Equal(t, "1.36.3", s.Version, "the API server still reports the old one")
	f.Set(client(cl), func(c *backendtest.Cluster) { c.Version = c.Runs })
	s, err = f.Ensure(ctx, cl, want("1.37.1"))
	require.NoError(t, err)
	assert.Nil(t, s.VersionChange)
	assert.Equal(t, "1.37.1", s.Version)

	other := cluster("k", "u2")
	f.Set(client(other), func(c *backendtest.Cluster) { c.RefuseVersionChange = "kind cannot change a node's version" })
	_, err = f.Ensure(ctx, other, want("1.36.3"))
	require.NoError(t, err)
	s, err = f.Ensure(ctx, other, want("1.37.1"))
	require.NoError(t, err)
	require.NotNil(t, s.VersionChange)
	assert.True(t, s.VersionChange.Refused)
	assert.Equal(t, "kind cannot change a node's version", s.VersionChange.Message)

	_, err = f.Ensure(ctx, cluster("new", "u3"), want("1.20.0"))
	assert.True(t, backend.IsReason(err, backend.ReasonVersionNotSupported), "%v", err)
}

func client(cl *clustersv1alpha1.Cluster) types.NamespacedName {
	return types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}
}

// TestScriptsAndCalls: a scripted failure, a notification per change, the call log, capacity.
func TestScriptsAndCalls(t *testing.T) {
	var mu sync.Mutex
	var notified []string
	f := backendtest.New(backendtest.Options{MaxClusters: 1, Notify: func(r backend.Ref) {
		mu.Lock()
		defer mu.Unlock()
		notified = append(notified, r.Name)
	}})
	ctx := t.Context()
	a, b := cluster("a", "ua"), cluster("b", "ub")
	f.Set(client(a), func(c *backendtest.Cluster) {
		c.EnsureError = backend.Errorf(backend.ReasonStateDamaged, "damaged")
	})
	_, err := f.Ensure(ctx, a, want(""))
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged))
	f.Set(client(a), func(c *backendtest.Cluster) { c.EnsureError, c.Ready = nil, false })
	s, err := f.Ensure(ctx, a, want(""))
	require.NoError(t, err)
	assert.Equal(t, backend.ReasonStarting, s.Reason)

	_, err = f.Ensure(ctx, b, want(""))
	assert.True(t, backend.IsReason(err, backend.ReasonCapacityExhausted), "%v", err)
	gone, err := f.Delete(ctx, a)
	require.NoError(t, err)
	assert.True(t, gone)
	s, err = f.Ensure(ctx, b, want(""))
	require.NoError(t, err)
	assert.True(t, s.Ready)
	assert.Equal(t, []string{"a", "b"}, notified, "a's script changed after its first Ensure; b is told its place is free")
	assert.Equal(t, 2, f.Count(backendtest.MethodEnsure, client(a)))
	assert.Equal(t, 1, f.Count(backendtest.MethodDelete, client(a)))
	assert.Equal(t, "1.36.3", f.Calls(backendtest.MethodEnsure, client(b))[0].Want.Version)
	assert.False(t, f.Running(a.UID))
	_, err = f.AdminConfig(ctx, b)
	assert.ErrorContains(t, err, "Options.Server")
}

// TestSnapshots: kept up to keep, newest first, restore of an unknown one refused, outliving the
// cluster.
func TestSnapshots(t *testing.T) {
	f := backendtest.New(backendtest.Options{})
	ctx := t.Context()
	cl := cluster("c", "u")
	_, err := f.Ensure(ctx, cl, want(""))
	require.NoError(t, err)
	var taken []string
	for range 3 {
		s, err := f.Snapshot(ctx, cl, backend.KeepNewest(2))
		require.NoError(t, err)
		taken = append(taken, s.Name)
	}
	list, err := f.Snapshots(ctx, cl)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, taken[2], list[0].Name)
	_, err = f.CheckRestore(ctx, cl, taken[0])
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused))
	require.NoError(t, f.Restore(ctx, cl, taken[2]))
	f.Set(client(cl), func(c *backendtest.Cluster) { c.HoldRestore = true })
	s, err := f.Ensure(ctx, cl, want(""))
	require.NoError(t, err)
	assert.Equal(t, backend.ReasonRestoring, s.Reason)
	f.Set(client(cl), func(c *backendtest.Cluster) { c.HoldRestore = false })
	s, err = f.Ensure(ctx, cl, want(""))
	require.NoError(t, err)
	require.NotNil(t, s.Restored)
	assert.Equal(t, taken[2], s.Restored.Snapshot.Name)
	assert.True(t, s.Ready)
	_, err = f.Delete(ctx, cl)
	require.NoError(t, err)
	list, err = f.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Len(t, list, 2, "snapshots outlive the cluster")
}
