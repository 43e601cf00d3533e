package hosted

import (
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestHARestoreAllOrNothing: a restore of a highly available control plane stops its API servers
// (Deployment at zero replicas, no API server pod left) before etcd's data is swapped; etcd's
// members restore the snapshot into a new etcd cluster (a token of their own: a new cluster ID);
// pods of the old data are replaced; while one member cannot start (its node cordoned: not
// scheduled) the restore goes on saying so, however long, the API servers stay at zero and
// nothing is reverted, even an hour after it started; a serve that ended before every member
// fetched the snapshot is made anew; once every member is ready, the API servers come back with
// their replicas, and once they serve the restore is done. envtest runs no pod: the test makes
// the pods and sets their statuses as the kubelet would.
func TestHARestoreAllOrNothing(t *testing.T) {
	fx := startHARestore(t)
	h, cl, ns := fx.h, fx.cl, fx.ns

	t.Run("the API servers stop before etcd's data is swapped", func(t *testing.T) { haRestoreStopsAPIServers(t, fx) })

	rec := record(t, cl)
	h.ensure(t, cl) // applies etcd's StatefulSet of the restored data
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	t.Run("every member restores into a new etcd cluster", func(t *testing.T) {
		require.Len(t, sts.Spec.Template.Spec.InitContainers, 1)
		init := flags(t, sts.Spec.Template.Spec.InitContainers[0].Args[1:])
		assert.Equal(t, ns+"-"+rec.Restore.DataDir, init["--initial-cluster-token"], "a token of this restore: a new cluster ID")
		assert.NotEqual(t, flags(t, sts.Spec.Template.Spec.Containers[0].Args)["--initial-cluster-token"], init["--initial-cluster-token"])
	})
	setStatus(t, sts, func() {
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 3, CurrentRevision: "old", UpdateRevision: "new"}
	})
	old := makeEtcdPod(t, sts, 2, "old", readyCond)
	makeEtcdPod(t, sts, 0, "new", readyCond)
	makeEtcdPod(t, sts, 1, "new", readyCond)

	t.Run("a member that cannot start keeps the cluster stopped on the restored data, however long", func(t *testing.T) {
		haRestoreMemberCannotStart(t, fx, sts, old)
	})
	t.Run("a serve that ended before every member fetched the snapshot is made anew", func(t *testing.T) { haRestoreServeAnew(t, fx) })
	t.Run("once every member runs the restored data, the API servers start and the restore ends", func(t *testing.T) {
		haRestoreEnds(t, fx)
	})
}

// haRestore is what the steps of TestHARestoreAllOrNothing share: the backend, the Cluster, its
// namespace and the API server pod that serves when the restore starts.
type haRestore struct {
	h      *harness
	cl     *clustersv1alpha1.Cluster
	ns     string
	apiPod *corev1.Pod
}

// readyCond is the Ready condition of a ready pod.
var readyCond = corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}

// startHARestore makes a highly available control plane with a snapshot in its catalog and an
// API server that serves, and starts a restore of the snapshot, its serve running.
func startHARestore(t *testing.T) *haRestore {
	t.Helper()
	h := startBackend(t)
	ctx := t.Context()
	h.pc.Spec.Hosted.StorageClassName, h.pc.Spec.Hosted.HighAvailability = "standard", true
	cl := newCluster("ha-restored")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	hst, err := h.b.hostFor(ctx, nil)
	require.NoError(t, err)
	s := &Spec{Namespace: ns, Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, UID: cl.UID}}
	snap := backend.Snapshot{Name: "20261126T010000Z", Cluster: cl.UID, Namespace: cl.Namespace, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Revision: 9, Keys: 3, Version: "1.37.1", SHA256: "ab"}
	require.NoError(t, hst.apply(ctx, s.BackupNamespaceObject()))
	require.NoError(t, updateCatalog(ctx, hst, s, snap, nil))
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	require.Equal(t, int32(haAPIServers), ptr.Deref(dep.Spec.Replicas, 0))
	setStatus(t, dep, func() {
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: haAPIServers, UpdatedReplicas: haAPIServers, AvailableReplicas: haAPIServers, ReadyReplicas: haAPIServers}
	})
	apiPod := makePod(t, ns, "apiserver-1", dep.Spec.Template.Labels, dep.Spec.Template.Spec)

	require.NoError(t, h.b.Restore(ctx, cl, snap.Name))
	h.ensure(t, cl)
	job := get(t, &batchv1.Job{}, BackupNamespace, serveName(ns))
	started := metav1.Now()
	setStatus(t, job, func() { job.Status.StartTime, job.Status.Active, job.Status.Ready = &started, 1, ptr.To[int32](1) })
	h.cached(t, job.Name)
	return &haRestore{h: h, cl: cl, ns: ns, apiPod: apiPod}
}

// makeEtcdPod makes the pod of etcd member i of sts at revision rev, on its claim, with conds.
func makeEtcdPod(t *testing.T, sts *appsv1.StatefulSet, i int, rev string, conds ...corev1.PodCondition) *corev1.Pod {
	t.Helper()
	labels := maps.Clone(sts.Spec.Template.Labels)
	labels[appsv1.StatefulSetRevisionLabel] = rev
	name := fmt.Sprintf("%s-%d", NameEtcd, i)
	spec := sts.Spec.Template.Spec.DeepCopy()
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + name}}})
	p := makePod(t, sts.Namespace, name, labels, *spec)
	setStatus(t, p, func() { p.Status.Conditions = conds })
	return p
}

// haRestoreStopsAPIServers: the API servers stop, and etcd's data is swapped only once no API
// server pod is left.
func haRestoreStopsAPIServers(t *testing.T, fx *haRestore) {
	h, cl, ns := fx.h, fx.cl, fx.ns
	ctx := t.Context()
	st := h.ensure(t, cl)
	assert.Equal(t, backend.ReasonRestoring, st.Reason)
	assert.Equal(t, restoreStop, record(t, cl).Restore.Phase)
	st = h.ensure(t, cl)
	assert.Contains(t, st.Message, "the API servers stop before etcd's data is swapped")
	assert.Equal(t, int32(0), ptr.Deref(get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Replicas, 1), "scaled to zero")
	assert.Empty(t, get(t, &appsv1.StatefulSet{}, ns, NameEtcd).Spec.Template.Spec.InitContainers, "etcd unchanged while an API server runs")
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	setStatus(t, dep, func() { dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation} })
	h.ensure(t, cl)
	assert.Equal(t, restoreStop, record(t, cl).Restore.Phase, "an API server pod is left: it still serves")
	require.NoError(t, env.Client.Delete(ctx, fx.apiPod))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(fx.apiPod), &corev1.Pod{}))
	}, 10*time.Second, 20*time.Millisecond)
	h.ensure(t, cl)
	rec := record(t, cl)
	assert.Equal(t, restoreEtcd, rec.Restore.Phase)
	assert.Equal(t, rec.Restore.DataDir, rec.EtcdDataDir)
}

// haRestoreMemberCannotStart: the pod old of the old data is replaced; while member 2 is not
// scheduled the restore says so, even an hour after it started, and nothing is reverted.
func haRestoreMemberCannotStart(t *testing.T, fx *haRestore, sts *appsv1.StatefulSet, old *corev1.Pod) {
	h, cl, ns := fx.h, fx.cl, fx.ns
	st := h.ensure(t, cl)
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(t.Context(), client.ObjectKeyFromObject(old), &corev1.Pod{}))
	},
		10*time.Second, 20*time.Millisecond, "the pod of the old data is replaced")
	assert.Contains(t, st.Message, NameEtcd+"-2 (its pod of the old data is replaced)")
	makeEtcdPod(t, sts, 2, "new", corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available: 1 node(s) were unschedulable."})
	// An hour went by (the operator was down, say): nothing is reverted.
	backdateRestore(t, cl, time.Hour)
	st = h.ensure(t, cl)
	assert.Equal(t, backend.ReasonRestoring, st.Reason)
	assert.Contains(t, st.Message, NameEtcd+"-2 (not scheduled: Unschedulable 0/3 nodes are available")
	assert.NotContains(t, st.Message, NameEtcd+"-0")
	assert.Contains(t, st.Message, "kubectl -n "+ns+" describe pod")
	assert.Contains(t, st.Message, "stays stopped on the restored data")
	assert.Nil(t, st.Restored, "no failure, no revert")
	rec := record(t, cl)
	require.NotNil(t, rec.Restore)
	assert.Equal(t, restoreEtcd, rec.Restore.Phase)
	assert.Equal(t, rec.Restore.DataDir, rec.EtcdDataDir, "etcd stays on the restored data")
	assert.Equal(t, int32(0), ptr.Deref(get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Replicas, 1), "the API servers stay stopped")
}

// haRestoreServeAnew: a serve that failed before every member fetched the snapshot is made anew.
func haRestoreServeAnew(t *testing.T, fx *haRestore) {
	h, cl := fx.h, fx.cl
	job := get(t, &batchv1.Job{}, BackupNamespace, serveName(fx.ns))
	setStatus(t, job, func() {
		job.Status.Failed, job.Status.Active, job.Status.Ready = 1, 0, ptr.To[int32](0)
		job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "2 of 3 clients fetched the snapshot"}}
	})
	h.cached(t, job.Name)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h.ensure(t, cl)
		again := &batchv1.Job{}
		if assert.NoError(c, env.Client.Get(t.Context(), client.ObjectKeyFromObject(job), again)) {
			assert.NotEqual(c, job.UID, again.UID, "a new serve")
		}
	}, 20*time.Second, 100*time.Millisecond)
}

// haRestoreEnds: once every member is ready the API servers come back with their replicas, and
// once they serve the restore is done.
func haRestoreEnds(t *testing.T, fx *haRestore) {
	h, cl, ns := fx.h, fx.cl, fx.ns
	p := get(t, &corev1.Pod{}, ns, NameEtcd+"-2")
	setStatus(t, p, func() { p.Status.Conditions = []corev1.PodCondition{readyCond} })
	h.ensure(t, cl)
	rec := record(t, cl)
	require.NotNil(t, rec.Restore)
	assert.Equal(t, restoreAPIServer, rec.Restore.Phase)
	h.ensure(t, cl)
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	assert.Equal(t, int32(haAPIServers), ptr.Deref(dep.Spec.Replicas, 0), "back to its replicas")
	assert.Equal(t, rec.Restore.DataDir, dep.Spec.Template.Annotations[AnnotationRestored])
	setStatus(t, dep, func() {
		dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: haAPIServers, UpdatedReplicas: haAPIServers, AvailableReplicas: haAPIServers, ReadyReplicas: haAPIServers}
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st := h.ensure(t, cl)
		if assert.NotNil(c, st.Restored) {
			assert.Empty(c, st.Restored.Failed)
		}
	}, 20*time.Second, 100*time.Millisecond)
	assert.Nil(t, record(t, cl).Restore)
}

// makePod creates pod name in ns with labels and spec, as its workload's controller would (envtest
// runs none, and no kubelet ever starts it).
func makePod(t *testing.T, ns, name string, labels map[string]string, spec corev1.PodSpec) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: spec}
	require.NoError(t, env.Client.Create(t.Context(), p))
	return p
}

// setStatus changes obj's status with change (which changes obj, read anew) and writes it,
// retrying on a conflict.
func setStatus[T client.Object](t *testing.T, obj T, change func()) {
	t.Helper()
	testenv.UpdateStatus(t.Context(), t, env.Client, obj, func(T) { change() })
}

// backdateRestore moves the start of cl's restore, and of its etcd step, by d into the past in its record.
func backdateRestore(t *testing.T, cl *clustersv1alpha1.Cluster, d time.Duration) {
	t.Helper()
	cm := get(t, &corev1.ConfigMap{}, NamespaceFor(cl.UID), NameRecord)
	var ps providerStatus
	require.NoError(t, json.Unmarshal([]byte(cm.Data[recordKey]), &ps))
	require.NotNil(t, ps.Restore)
	ps.Restore.Started, ps.Restore.EtcdStarted = ps.Restore.Started.Add(-d), ps.Restore.EtcdStarted.Add(-d)
	raw, err := json.Marshal(ps)
	require.NoError(t, err)
	cm.Data[recordKey] = string(raw)
	require.NoError(t, env.Client.Update(t.Context(), cm))
}

// TestRestoringMember: what a restore's state says of an etcd pod of the restored data.
func TestRestoringMember(t *testing.T) {
	ready := corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
	failed := corev1.ContainerStatus{Name: "restore", RestartCount: 3,
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Message: "fetching...\nflag provided but not defined: -initial-cluster-token\n"}},
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
	restored := corev1.ContainerStatus{Name: "restore", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}}
	now := metav1.Now()
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want string
	}{
		{"ready", corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{ready}}}, ""},
		{"terminating", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}, Status: corev1.PodStatus{Conditions: []corev1.PodCondition{ready}}}, "terminating"},
		{"not scheduled", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: "Unschedulable", Message: "0/3 nodes are available.\nmore"}}}}, "not scheduled: Unschedulable 0/3 nodes are available."},
		{"restoring", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{Name: "restore",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}}, "restoring the snapshot"},
		{"its restore fails", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{failed}}},
			"its restore failed 3 times, last: flag provided but not defined: -initial-cluster-token"},
		{"restored, etcd not ready", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning, InitContainerStatuses: []corev1.ContainerStatus{restored}}}, "not ready"},
		{"just made", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, "pending"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, restoringMember(&tc.pod)) })
	}
}
