package cluster_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// backupConfig is a ProviderConfig offering versions with backup policy p; its profile's name.
func backupConfig(t *testing.T, p *providersv1alpha1.BackupPolicy, versions ...string) string {
	t.Helper()
	pc := &providersv1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "before-"},
		Spec:       providersv1alpha1.ProviderConfigSpec{Backend: providersv1alpha1.BackendLocal, Backup: p},
	}
	for _, v := range versions {
		pc.Spec.SupportedVersions = append(pc.Spec.SupportedVersions, clustersv1alpha1.SupportedK8sVersion{Version: v})
	}
	require.NoError(t, env.Client.Create(t.Context(), pc))
	env.DeleteAtCleanup(t, pc)
	return profile.Name(testEnvironment, testProvider, pc.Name)
}

// firstEnsureOf is the index in log of the first Ensure asking for version, -1 if none.
func firstEnsureOf(log []backendtest.Call, version string) int {
	for i, c := range log {
		if c.Method == backendtest.MethodEnsure && c.Want.Requested == version {
			return i
		}
	}
	return -1
}

// TestSnapshotBeforeUpgrade: a Cluster asking for another version has a snapshot taken first
// (the backend's snapshot in the background is waited for, the cluster kept at its version),
// recorded (annotation, Event SnapshotBeforeUpgrade), and only then Ensure is asked for the new
// version. A failing snapshot holds the upgrade with a condition saying how to skip it; the skip
// annotation lets it go on.
func TestSnapshotBeforeUpgrade(t *testing.T) {
	fake := startFake(t, backendtest.Options{Versions: []string{"1.37.1", "1.36.3"}})
	ctx := t.Context()
	ns := env.Namespace(t)
	profileName := backupConfig(t, &providersv1alpha1.BackupPolicy{Disabled: true}, "1.37.1", "1.36.3")
	ready := func(name string) *clustersv1alpha1.Cluster {
		cl := newCluster(t, ns, name, profileName, "1.36.3")
		return waitCluster(t, client.ObjectKeyFromObject(cl), "Ready at 1.36.3", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			isReady(c, cl)
			assert.Equal(c, "1.36.3", cl.Labels[clustersv1alpha1.K8sVersionLabel])
		})
	}
	upgrade := func(cl *clustersv1alpha1.Cluster) {
		testenv.Update(ctx, t, env.Client, cl.DeepCopy(), func(cur *clustersv1alpha1.Cluster) { cur.Spec.Kubernetes.Version = "1.37.1" })
	}

	t.Run("waits for the snapshot, then upgrades", func(t *testing.T) {
		cl := ready("up-async")
		key := client.ObjectKeyFromObject(cl)
		fake.Set(key, func(c *backendtest.Cluster) {
			c.SnapshotError = backend.Errorf(backend.ReasonSnapshotInProgress, "the fake snapshot Job runs")
		})
		upgrade(cl)
		waitCluster(t, key, "the upgrade waits for the snapshot", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			assert.Equal(c, cl.Generation, cl.Status.ObservedGeneration)
			hasCondition(c, cl, cluster.ConditionVersionUpToDate, metav1.ConditionFalse, backend.ReasonSnapshotInProgress)
		})
		assert.Equal(t, -1, firstEnsureOf(fake.Log(key), "1.37.1"), "no Ensure of the new version while the snapshot runs")
		got, _ := fake.Get(key)
		assert.Equal(t, "1.36.3", got.Runs, "the cluster keeps its version")

		fake.Set(key, func(c *backendtest.Cluster) { c.SnapshotError = nil }) // the Job ended: notifies
		done := waitCluster(t, key, "upgraded after the snapshot", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			assert.True(c, strings.HasPrefix(cl.Annotations[backend.AnnotationSnapshotBeforeUpgrade], "1.37.1 "), "recorded")
			c2 := meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionVersionUpToDate)
			if assert.NotNil(c, c2) {
				assert.NotEqual(c, backend.ReasonSnapshotInProgress, c2.Reason)
			}
		})
		env.AwaitEvent(t, cl, cluster.ReasonSnapshotBeforeUpgrade)
		log := fake.Log(key)
		ensure := firstEnsureOf(log, "1.37.1")
		require.GreaterOrEqual(t, ensure, 0, "Ensure asked for 1.37.1")
		name := strings.TrimPrefix(done.Annotations[backend.AnnotationSnapshotBeforeUpgrade], "1.37.1 ")
		snaps, err := fake.Snapshots(ctx, done)
		require.NoError(t, err)
		require.NotEmpty(t, snaps)
		assert.Equal(t, name, snaps[0].Name)
		assert.Equal(t, "1.36.3", snaps[0].Version, "taken of the version before")
		lastSnapshot := -1
		for i, c := range log[:ensure] {
			if c.Method == backendtest.MethodSnapshot {
				lastSnapshot = i
			}
		}
		assert.GreaterOrEqual(t, lastSnapshot, 0, "a snapshot before the Ensure of the new version")
		snapshotsBefore := fake.Count(backendtest.MethodSnapshot, key)
		waitCluster(t, key, "upgraded", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionVersionUpToDate, metav1.ConditionTrue, cluster.ReasonVersionCurrent)
		})
		assert.Equal(t, snapshotsBefore, fake.Count(backendtest.MethodSnapshot, key), "one snapshot per upgrade")
	})

	t.Run("a failed snapshot holds the upgrade until skipped", func(t *testing.T) {
		cl := ready("up-fail")
		key := client.ObjectKeyFromObject(cl)
		fake.Set(key, func(c *backendtest.Cluster) { c.SnapshotError = errors.New("the fake disk is on fire") })
		upgrade(cl)
		held := waitCluster(t, key, "held", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			assert.Equal(c, cl.Generation, cl.Status.ObservedGeneration)
			hasCondition(c, cl, cluster.ConditionVersionUpToDate, metav1.ConditionFalse, cluster.ReasonSnapshotBeforeUpgradeFailed)
			isReady(c, cl)
		})
		msg := meta.FindStatusCondition(held.Status.Conditions, cluster.ConditionVersionUpToDate).Message
		assert.Contains(t, msg, "the fake disk is on fire")
		assert.Contains(t, msg, backend.AnnotationSkipSnapshotBeforeUpgrade)
		assert.Equal(t, -1, firstEnsureOf(fake.Log(key), "1.37.1"))
		env.AwaitEvent(t, cl, cluster.ReasonSnapshotBeforeUpgradeFailed)

		testenv.Update(ctx, t, env.Client, held, func(cur *clustersv1alpha1.Cluster) {
			cur.Annotations[backend.AnnotationSkipSnapshotBeforeUpgrade] = "yes"
		})
		waitCluster(t, key, "upgraded without the snapshot", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionVersionUpToDate, metav1.ConditionTrue, cluster.ReasonVersionCurrent)
			assert.Equal(c, "1.37.1", cl.Labels[clustersv1alpha1.K8sVersionLabel])
		})
	})
}

// TestSnapshotBeforeDelete: a Cluster's deletion takes a snapshot first (Event, then Delete),
// waiting for one the backend takes in the background; a failing snapshot blocks the deletion with a condition saying how to skip it; the ProviderConfig
// may turn it off.
func TestSnapshotBeforeDelete(t *testing.T) {
	fake := startFake(t, backendtest.Options{})
	ctx := t.Context()
	ns := env.Namespace(t)

	t.Run("blocked by a failing snapshot, then taken before Delete", func(t *testing.T) {
		cl := newCluster(t, ns, "del", backupConfig(t, &providersv1alpha1.BackupPolicy{Disabled: true}), "")
		key := client.ObjectKeyFromObject(cl)
		waitCluster(t, key, "Ready", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) { isReady(c, cl) })
		fake.Set(key, func(c *backendtest.Cluster) {
			c.SnapshotError = backend.Errorf(backend.ReasonSnapshotInProgress, "the fake snapshot Job runs")
		})
		require.NoError(t, env.Client.Delete(ctx, cl))
		waitCluster(t, key, "the deletion waits for the snapshot", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionDeleted, metav1.ConditionFalse, backend.ReasonSnapshotInProgress)
		})
		assert.Zero(t, fake.Count(backendtest.MethodDelete, key), "not deleted while the snapshot runs")
		fake.Set(key, func(c *backendtest.Cluster) { c.SnapshotError = errors.New("the fake disk is on fire") })
		blocked := waitCluster(t, key, "deletion blocked", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) {
			hasCondition(c, cl, cluster.ConditionDeleted, metav1.ConditionFalse, cluster.ReasonSnapshotBeforeDeleteFailed)
		})
		msg := meta.FindStatusCondition(blocked.Status.Conditions, cluster.ConditionDeleted).Message
		assert.Contains(t, msg, backend.AnnotationSkipSnapshotBeforeDelete)
		assert.Contains(t, msg, "spec.backup.snapshotBeforeDelete")
		env.AwaitEvent(t, cl, cluster.ReasonSnapshotBeforeDeleteFailed)
		assert.Zero(t, fake.Count(backendtest.MethodDelete, key), "not deleted")
		got, _ := fake.Get(key)
		assert.True(t, got.Ready, "the cluster keeps running")

		fake.Set(key, func(c *backendtest.Cluster) { c.SnapshotError = nil })
		gone(t, cl)
		env.AwaitEvent(t, cl, cluster.ReasonSnapshotBeforeDelete)
		log := fake.Log(key)
		snapshot, del := -1, -1
		for i, c := range log {
			if c.Method == backendtest.MethodSnapshot && snapshot < 0 {
				snapshot = i
			}
			if c.Method == backendtest.MethodDelete && del < 0 {
				del = i
			}
		}
		require.GreaterOrEqual(t, del, 0, "deleted")
		require.GreaterOrEqual(t, snapshot, 0, "a snapshot taken")
		assert.Less(t, snapshot, del, "the snapshot before Delete")
		snaps, err := fake.Snapshots(ctx, cl)
		require.NoError(t, err)
		assert.Len(t, snaps, 1, "the snapshot outlives the Cluster")
	})

	t.Run("turned off in the ProviderConfig", func(t *testing.T) {
		cl := newCluster(t, ns, "del-off", backupConfig(t, &providersv1alpha1.BackupPolicy{Disabled: true, SnapshotBeforeDelete: ptr.To(false)}), "")
		key := client.ObjectKeyFromObject(cl)
		waitCluster(t, key, "Ready", func(c *assert.CollectT, cl *clustersv1alpha1.Cluster) { isReady(c, cl) })
		require.NoError(t, env.Client.Delete(ctx, cl))
		gone(t, cl)
		assert.Zero(t, fake.Count(backendtest.MethodSnapshot, key), "no snapshot")
		assert.Positive(t, fake.Count(backendtest.MethodDelete, key))
	})
}
