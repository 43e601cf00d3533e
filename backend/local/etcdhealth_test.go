package local

import (
	"fmt"
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
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestEtcdNoSpace fills a cluster whose etcd has a 24 MiB quota until etcd refuses writes
// (NOSPACE): the state says so (not restarted: a full etcd is not a hung one), and reads still
// work. Once the objects are deleted, the backend compacts, defragments and disarms the alarm by
// itself, and writes work again.
func TestEtcdNoSpace(t *testing.T) {
	tuning := DefaultTuning
	tuning.EtcdQuotaBytes = 24 << 20
	h := startBackendOptions(t, Options{StateDir: t.TempDir(), MaxClusters: 1, Tuning: &tuning, Logger: testenv.Logger(t)})
	cl := newCluster("full")
	s := h.await(cl, "Ready", complete)
	require.NotNil(t, s.Part(backend.PartEtcd))
	assert.True(t, s.Part(backend.PartEtcd).Ready)
	admin, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	cs := kubernetes.NewForConfigOrDie(admin)
	pids := h.b.PIDs(cl.UID)

	payload := strings.Repeat("x", 900<<10)
	// etcd applies the write that takes it over its quota and answers NOSPACE all the same: a
	// refused create may have made its object, and the next try finds it.
	create := func(i int) error {
		_, err := cs.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%d", i)}, Data: map[string]string{"v": payload}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	written, refusals := fillEtcd(t, h, cl, create)
	t.Logf("%d ConfigMaps of 900 KiB written, %d refusals, until etcd stayed full", written, refusals)

	full := h.await(cl, "EtcdNoSpace", func(s backend.State) bool { return s.Part(backend.PartEtcd) != nil && !s.Part(backend.PartEtcd).Ready })
	assert.Equal(t, ReasonEtcdNoSpace, full.Part(backend.PartEtcd).Reason)
	assert.Contains(t, full.Part(backend.PartEtcd).Message, "reached its quota")
	assert.Contains(t, full.Part(backend.PartEtcd).Message, "Delete objects")
	assert.True(t, full.Ready, "it serves reads")
	_, err = cs.CoreV1().ConfigMaps("default").Get(t.Context(), "big-0", metav1.GetOptions{})
	require.NoError(t, err, "reads work")

	for i := range written {
		require.NoError(t, cs.CoreV1().ConfigMaps("default").Delete(t.Context(), fmt.Sprintf("big-%d", i), metav1.DeleteOptions{}), "deletes work on a full etcd")
	}
	freed := h.await(cl, "etcd takes writes again", func(s backend.State) bool { return s.Part(backend.PartEtcd) != nil && s.Part(backend.PartEtcd).Ready })
	assert.True(t, freed.Ready)
	_, err = cs.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, pids, h.b.PIDs(cl.UID), "no process was restarted")
}

// fillEtcd creates ConfigMaps with create until etcd stays full; it returns how many it wrote and
// how many writes etcd refused.
func fillEtcd(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster, create func(int) error) (written, refusals int) {
	// Filled until etcd refuses; while what the quota holds is history, the backend frees it
	// (compaction, defragmentation, alarm disarmed) and the write works again; once it is live
	// data, the alarm stays and the state says so.
	for full := false; !full; {
		require.Less(t, written, 60, "24 MiB cannot hold 60 ConfigMaps of 900 KiB")
		err := create(written)
		if err == nil {
			written++
			continue
		}
		require.ErrorContains(t, err, "database space exceeded")
		refusals++
		// Polled until the backend has freed space (the write works) or says it is full.
		tick := time.NewTicker(200 * time.Millisecond)
		deadline := time.After(readyWithin)
	poll:
		for {
			s, err := h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
			require.NoError(t, err)
			if full = s.Part(backend.PartEtcd) != nil && !s.Part(backend.PartEtcd).Ready; full {
				break
			}
			werr := create(written)
			if werr == nil { // freed and disarmed
				written++
				break
			}
			select {
			case <-tick.C:
			case <-deadline:
				t.Fatalf("etcd refused write %d and within %s the backend neither freed space nor said it is full; last state: ready %v %s: %s; etcd %+v; the write: %v",
					written, readyWithin, s.Ready, s.Reason, s.Message, s.Part(backend.PartEtcd), werr)
				break poll
			}
		}
		tick.Stop()
	}
	return written, refusals
}
