package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// awaitPool waits until the pool of profile in b has ready spares (and none starting), setting p
// again at each look as the ProviderConfig reconciler does.
func awaitPool(t *testing.T, b *Backend, profile string, p backend.Pool, ready int) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s := b.SetPool(profile, p)
		assert.Equal(c, backend.PoolState{Ready: ready}, s)
	}, readyWithin, 100*time.Millisecond, "the pool of %s has %d ready spare(s)", profile, ready)
}

// spares lists the spare folders of stateDir (real folders and the links left by claims).
func spares(t *testing.T, stateDir string) (dirs, links []string) {
	t.Helper()
	entries, err := os.ReadDir(stateDir)
	require.NoError(t, err)
	for _, e := range entries {
		switch {
		case !strings.HasPrefix(e.Name(), spareDirPrefix):
		case e.Type()&os.ModeSymlink != 0:
			links = append(links, e.Name())
		default:
			dirs = append(dirs, e.Name())
		}
	}
	return dirs, links
}

// adminClient is a clientset of the admin of cl's cluster.
func adminClient(t *testing.T, b *Backend, cl *clustersv1alpha1.Cluster) kubernetes.Interface {
	t.Helper()
	cfg, err := b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	cfg.Timeout = wakeTimeout
	return kubernetes.NewForConfigOrDie(cfg)
}

// TestPool runs a profile's pool of spare clusters with real processes: a new Cluster claims a
// ready spare and is complete at its first Ensure, in its own folder; the pool refills, and a
// second Cluster gets another control plane (another CA, not the first one's data); a Cluster
// that finds no place takes a running spare's; a hibernated pool keeps its spare without a process
// and a claim wakes it; a restarted operator removes the spares left and adopts the claimed
// clusters from their own folders.
func TestPool(t *testing.T) {
	stateDir := t.TempDir()
	const profile = "default.test.local"
	want := backend.Want{Version: "1.37.1"}
	p := backend.Pool{Size: 1, Version: want.Version}
	a, b, c := newCluster("a"), newCluster("b"), newCluster("c")
	h := startBackend(t, stateDir, 3, a, b, c)
	claimed := func() float64 { return backend.Claims(Name, backend.ClaimClaimed) }

	awaitPool(t, h.b, profile, p, 1)
	before := claimed()
	s, err := h.b.Ensure(t.Context(), a, want)
	require.NoError(t, err)
	require.True(t, complete(s), "a claimed spare is complete at the Cluster's first Ensure: %+v", s)
	assert.Equal(t, before+1, claimed())
	fi, err := os.Lstat(h.b.Dir(a.UID))
	require.NoError(t, err)
	assert.True(t, fi.IsDir(), "the Cluster's own folder, not a link")
	m, err := readMeta(h.b.Dir(a.UID))
	require.NoError(t, err)
	assert.Equal(t, a.UID, m.UID)
	assert.Equal(t, "a", m.Name)
	assert.Empty(t, m.Spare)
	csA := adminClient(t, h.b, a)
	_, err = csA.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "only-in-a"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	t.Run("the pool refills; a second claim gets another control plane", func(t *testing.T) {
		awaitPool(t, h.b, profile, p, 1)
		sb, err := h.b.Ensure(t.Context(), b, want)
		require.NoError(t, err)
		require.True(t, complete(sb), "claimed: %+v", sb)
		assert.NotEqual(t, s.CABundle, sb.CABundle, "a CA of its own")
		assert.NotEqual(t, s.Endpoint, sb.Endpoint)
		_, err = adminClient(t, h.b, b).CoreV1().ConfigMaps("default").Get(t.Context(), "only-in-a", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "not the first Cluster's data: %v", err)
	})

	t.Run("a Cluster that finds no place takes a running spare's", func(t *testing.T) {
		awaitPool(t, h.b, profile, p, 1) // a, b and the spare: every place taken
		other := newCluster("other")
		other.Spec.Profile = "default.test.nopool"
		h.await(other, "complete, in the spare's place", complete)
		assert.Equal(t, backend.PoolState{}, h.b.SetPool(profile, p), "no place left for a spare")
		gone, err := h.b.Delete(t.Context(), other)
		require.NoError(t, err)
		require.True(t, gone)
	})

	t.Run("a hibernated pool; a claim wakes its spare", func(t *testing.T) {
		p := p
		p.Hibernated = true
		awaitPool(t, h.b, profile, p, 1)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Equal(c, 2, h.b.usedNow(), "a and b hold places; the hibernated spare none")
		}, readyWithin, 100*time.Millisecond)
		wakes, before := backend.Wakes(Name, triggerClaim), claimed()
		h.await(c, "complete: the claimed spare woke", complete)
		assert.Equal(t, before+1, claimed())
		require.EventuallyWithT(t, func(c *assert.CollectT) { // recorded by the waking goroutine
			assert.Equal(c, wakes+1, backend.Wakes(Name, triggerClaim))
		}, readyWithin, 50*time.Millisecond)
		_, err := adminClient(t, h.b, c).CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
	})

	t.Run("a restarted operator removes the spares and adopts the claimed clusters", func(t *testing.T) {
		_, links := spares(t, stateDir)
		assert.Len(t, links, 3, "the old names of the claimed spares, for their running processes")
		h.stop()
		h2 := startBackend(t, stateDir, 3, a, b, c)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			h2.b.mu.Lock()
			started := h2.b.started
			h2.b.mu.Unlock()
			assert.True(c, started)
		}, readyWithin, 50*time.Millisecond)
		dirs, links := spares(t, stateDir)
		assert.Empty(t, dirs, "spares of the earlier run removed")
		assert.Empty(t, links, "links removed")
		sa := h2.await(a, "adopted", complete)
		assert.Equal(t, s.CABundle, sa.CABundle)
		_, err := adminClient(t, h2.b, a).CoreV1().ConfigMaps("default").Get(t.Context(), "only-in-a", metav1.GetOptions{})
		require.NoError(t, err, "its data")
		gone, err := h2.b.Delete(t.Context(), a)
		require.NoError(t, err)
		require.True(t, gone)
		_, err = os.Stat(filepath.Join(stateDir, string(a.UID)))
		assert.True(t, os.IsNotExist(err), "its folder removed")
	})
}

// usedNow is usedLocked.
func (b *Backend) usedNow() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.usedLocked()
}
