package cluster_test

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// gauge reads the series of the metric name whose labels include want, as a scrape would; ok is
// false when there is none.
func gauge(t assert.TestingT, name string, want map[string]string) (value float64, ok bool) {
	families, err := metrics.Registry.Gather()
	assert.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, want) {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// TestBackupSchedule: the ProviderConfig's schedule through the Cluster reconciler with a fake
// backend. The first snapshot is taken once the Cluster is Ready (condition BackedUp, the list in
// the status, the Event, the gauges); snapshots on demand beyond keep remove the oldest; turning
// the schedule off says so; the Cluster's deletion drops its gauges and keeps its snapshots.
// What the local backend writes (the files kept, removed and outliving the Cluster, the keys
// beside them) is tested in backend/local (TestBackupRestoreDrill, TestEncryptionAtRest).
func TestBackupSchedule(t *testing.T) {
	fake := startFake(t, backendtest.Options{})
	ctx := t.Context()
	ns := env.Namespace(t)
	pc := &providersv1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "backup-"},
		Spec: providersv1alpha1.ProviderConfigSpec{Backend: providersv1alpha1.BackendLocal,
			Backup: &providersv1alpha1.BackupPolicy{Interval: &metav1.Duration{Duration: time.Hour}, Keep: 2}},
	}
	require.NoError(t, env.Client.Create(ctx, pc))
	env.DeleteAtCleanup(t, pc)
	profileName := profile.Name(testEnvironment, testProvider, pc.Name)
	cl := newCluster(t, ns, "b1", profileName, "")
	key := client.ObjectKeyFromObject(cl)
	series := map[string]string{"cluster": key.String()}

	first := waitCluster(t, key, "Ready and backed up", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		isReady(c, cl)
		hasCondition(c, cl, cluster.ConditionBackedUp, metav1.ConditionTrue, cluster.ReasonSnapshotTaken)
	})
	cond := meta.FindStatusCondition(first.Status.Conditions, cluster.ConditionBackedUp)
	assert.Contains(t, cond.Message, "1 kept (a snapshot every 1h0m0s, the newest 2 kept)")
	assert.Contains(t, string(first.Status.ProviderStatus.Raw), `"backups":[{`)
	e := env.AwaitEvent(t, cl, cluster.ReasonSnapshotTaken)
	assert.Contains(t, e.Note, "Took snapshot")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		v, ok := gauge(c, "cluster_provider_backup_last_success_timestamp_seconds", series)
		assert.True(c, ok)
		assert.InDelta(c, float64(time.Now().Unix()), v, 300)
		size, ok := gauge(c, "cluster_provider_backup_last_size_bytes", series)
		assert.True(c, ok)
		assert.Positive(c, size)
		ready, ok := gauge(c, "cluster_provider_cluster_ready", map[string]string{"cluster": key.String(), "profile": profileName})
		assert.True(c, ok)
		assert.Equal(c, 1.0, ready)
	}, readyWithin, poll, "the gauges")

	// Two more on demand: the newest two are kept.
	for range 2 {
		cur := &clustersv1alpha1.Cluster{}
		require.NoError(t, env.Client.Get(ctx, key, cur))
		before := meta.FindStatusCondition(cur.Status.Conditions, cluster.ConditionBackedUp).Message
		testenv.Update(ctx, t, env.Client, cur, func(cur *clustersv1alpha1.Cluster) {
			cur.Annotations = map[string]string{backend.AnnotationSnapshot: "now"}
		})
		waitCluster(t, key, "a new snapshot", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			assert.NotContains(c, cl.Annotations, backend.AnnotationSnapshot)
			assert.NotEqual(c, before, meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionBackedUp).Message)
		})
	}
	kept := waitCluster(t, key, "two kept", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		assert.Contains(c, meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionBackedUp).Message, "2 kept")
	})
	snaps, err := fake.Snapshots(ctx, kept)
	require.NoError(t, err)
	assert.Len(t, snaps, 2, "the oldest was removed")
	for _, c := range fake.Calls(backendtest.MethodSnapshot, key) {
		assert.Equal(t, backend.KeepNewest(2), c.Retention, "the ProviderConfig's keep")
	}

	// The schedule turned off: said so; what was taken stays.
	testenv.Update(ctx, t, env.Client, pc, func(pc *providersv1alpha1.ProviderConfig) { pc.Spec.Backup.Disabled = true })
	waitCluster(t, key, "schedule off", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
		hasCondition(c, cl, cluster.ConditionBackedUp, metav1.ConditionTrue, cluster.ReasonSnapshotTaken)
		assert.Contains(c, meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionBackedUp).Message, "scheduled snapshots are off")
	})

	require.NoError(t, env.Client.Delete(ctx, kept))
	gone(t, kept)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, ok := gauge(c, "cluster_provider_backup_last_success_timestamp_seconds", series)
		assert.False(c, ok, "a deleted Cluster's gauges go")
		_, ok = gauge(c, "cluster_provider_cluster_ready", series)
		assert.False(c, ok)
	}, readyWithin, poll)
	snaps, err = fake.Snapshots(ctx, kept)
	require.NoError(t, err)
	assert.Len(t, snaps, 2, "its two snapshots outlive it")
	assert.GreaterOrEqual(t, fake.Count(backendtest.MethodDelete, key), 1, "its cluster is deleted (a reconcile on a stale cache may ask once more)")
}
