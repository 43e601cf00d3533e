package hosted

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// Pod statuses of an etcd member, as a kubelet and a scheduler write them.
func readyStatus() corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: containerEtcd, Image: image1, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
}

// noLeaderStatus: etcd runs and started (its serializable startup check passes) but its readiness
// check, linearizable, fails.
func noLeaderStatus() corev1.PodStatus {
	s := readyStatus()
	s.Conditions[0].Status = corev1.ConditionFalse
	s.ContainerStatuses[0].Ready = false
	return s
}

// unschedulableStatus: the member's node is cordoned, its volume bound to it.
func unschedulableStatus() corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: corev1.PodReasonUnschedulable, Message: "0/4 nodes are available: 1 node(s) were unschedulable, 3 node(s) didn't match pod anti-affinity rules."}}}
}

func crashingStatus() corev1.PodStatus {
	s := noLeaderStatus()
	s.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	s.ContainerStatuses[0].RestartCount = 4
	return s
}

// TestQuorumPart: EtcdHealthy from the members' pods: all ready, True; one not ready or missing
// of three, False and degraded (the quorum holds); two, False, quorum lost; each member that is
// not ready named with what its pod shows; a full etcd (the maintenance report) comes first; the
// report's message beside a True one; before the first serve (no report record), no part.
func TestQuorumPart(t *testing.T) {
	pod := func(s corev1.PodStatus) *corev1.Pod { return &corev1.Pod{Status: s} }
	gone := pod(readyStatus())
	gone.DeletionTimestamp = ptr.To(metav1.Now())
	checked := &etcdHealth{Checked: time.Now(), Message: "etcd takes writes: its database is 3.0 MiB of its 1024.0 MiB quota."}
	full := &etcdHealth{Checked: time.Now(), NoSpace: true, Message: "etcd's database reached its quota"}
	for _, tc := range []struct {
		name       string
		pods       []*corev1.Pod
		e          *etcdHealth
		wantNil    bool
		wantReady  bool
		wantReason string
		wantMsg    []string
		notMsg     string
	}{
		{name: "all ready", pods: []*corev1.Pod{pod(readyStatus()), pod(readyStatus()), pod(readyStatus())}, e: checked,
			wantReady: true, wantReason: backend.ReasonRunning, wantMsg: []string{"all 3 etcd members are ready", "etcd takes writes: its database is 3.0 MiB"}},
		{name: "all ready, not checked by a Job yet", pods: []*corev1.Pod{pod(readyStatus())}, e: &etcdHealth{Running: true},
			wantReady: true, wantReason: backend.ReasonRunning, wantMsg: []string{"all 1 etcd members are ready"}},
		{name: "one of three without a leader: degraded", pods: []*corev1.Pod{pod(readyStatus()), pod(readyStatus()), pod(noLeaderStatus())}, e: checked,
			wantReason: backend.ReasonEtcdDegraded, wantMsg: []string{"1 of 3 etcd members not ready: etcd-2 (not ready: no leader", "the quorum holds (2 of 3 ready)"}},
		{name: "one of three missing: degraded", pods: []*corev1.Pod{pod(readyStatus()), nil, pod(readyStatus())}, e: checked,
			wantReason: backend.ReasonEtcdDegraded, wantMsg: []string{"1 of 3 etcd members not ready: etcd-1 (no pod)"}},
		{name: "two of three: quorum lost", pods: []*corev1.Pod{pod(readyStatus()), pod(unschedulableStatus()), pod(noLeaderStatus())}, e: checked,
			wantReason: backend.ReasonEtcdQuorumLost, wantMsg: []string{"2 of 3 etcd members not ready",
				"etcd-1 (pod Pending: not scheduled: 0/4 nodes are available: 1 node(s) were unschedulable", "etcd-2 (not ready: no leader",
				"quorum lost (1 ready, 2 needed): the API server can neither write nor read"}},
		{name: "terminating and crashing: quorum lost", pods: []*corev1.Pod{gone, pod(crashingStatus()), pod(readyStatus())}, e: checked,
			wantReason: backend.ReasonEtcdQuorumLost, wantMsg: []string{"etcd-0 (pod terminating)", "etcd-1 (not ready: container etcd waits: CrashLoopBackOff (4 restarts))"}},
		{name: "the single member not ready: quorum lost", pods: []*corev1.Pod{pod(noLeaderStatus())}, e: checked,
			wantReason: backend.ReasonEtcdQuorumLost, wantMsg: []string{"1 of 1 etcd members not ready: etcd-0", "quorum lost (0 ready, 1 needed)"}},
		{name: "full: the report's reason first", pods: []*corev1.Pod{pod(noLeaderStatus()), pod(noLeaderStatus()), pod(noLeaderStatus())}, e: full,
			wantReason: backend.ReasonEtcdNoSpace, wantMsg: []string{"reached its quota"}},
		{name: "all ready since a report in which some did not answer: that is not repeated", pods: []*corev1.Pod{pod(readyStatus()), pod(readyStatus()), pod(readyStatus())},
			e:         &etcdHealth{Checked: time.Now(), Down: []string{"etcd-1", "etcd-2"}, Message: "etcd takes writes: its database is 0.3 MiB of its 768.0 MiB quota; member etcd-1, etcd-2 does not answer."},
			wantReady: true, wantReason: backend.ReasonRunning, wantMsg: []string{"all 3 etcd members are ready", "its database is 0.3 MiB of its 768.0 MiB quota."}, notMsg: "does not answer"},
		{name: "members not read (a restore): the report alone", e: checked, wantReady: true, wantReason: backend.ReasonRunning, wantMsg: []string{"etcd takes writes"}},
		{name: "never served: none", pods: []*corev1.Pod{pod(noLeaderStatus())}, wantNil: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var members []memberState
			for i, p := range tc.pods {
				members = append(members, memberOf(fmt.Sprintf("etcd-%d", i), p))
			}
			part := etcdPart(members, tc.e)
			if tc.wantNil {
				assert.Nil(t, part)
				return
			}
			require.NotNil(t, part)
			assert.Equal(t, tc.wantReady, part.Ready, part.Message)
			assert.Equal(t, tc.wantReason, part.Reason)
			for _, w := range tc.wantMsg {
				assert.Contains(t, part.Message, w)
			}
			if tc.notMsg != "" {
				assert.NotContains(t, part.Message, tc.notMsg)
			}
		})
	}
}

// TestSnapshotJobMembers: the snapshot Job names every member, by its own DNS name when highly
// available, with the Job's client certificate: cmd/etcd-snapshot save takes the snapshot from
// the one in the quorum.
func TestSnapshotJobMembers(t *testing.T) {
	for _, ha := range []bool{false, true} {
		t.Run(fmt.Sprintf("highly available %t", ha), func(t *testing.T) {
			cp := testSpec()
			cp.HighAvailability = ha
			args := cp.backupSpec().SnapshotJob(cp, "1.37.1", backend.KeepNewest(3)).Spec.Template.Spec.Containers[0].Args
			assert.Equal(t, "save", args[0])
			want := []string{fmt.Sprintf("--member=etcd-0=https://etcd.%s.svc:2379", cp.Namespace)}
			if ha {
				want = nil
				for i := range 3 {
					want = append(want, fmt.Sprintf("--member=etcd-%d=https://etcd-%d.etcd-peer.%s.svc:2379", i, i, cp.Namespace))
				}
			}
			var members []string
			for _, a := range args {
				if strings.HasPrefix(a, "--member=") {
					members = append(members, a)
				}
				assert.NotContains(t, a, "--endpoints", "no Service that routes to any member")
			}
			assert.Equal(t, want, members)
			for _, f := range []string{"--cacert=/etc/etcd/pki/ca.crt", "--cert=/etc/etcd/pki/tls.crt", "--key=/etc/etcd/pki/tls.key"} {
				assert.Contains(t, args, f)
			}
		})
	}
}

// TestEtcdHealthyFollowsTheQuorum: a highly available control plane that serves reports
// EtcdHealthy from its members' pods at every Ensure: True with all three ready; False
// (EtcdDegraded) with one not ready, the quorum kept, the Cluster still Ready; False
// (EtcdQuorumLost) with two, each named; True again once they are back. A pod's readiness
// changing notifies the Cluster (the reconcile that brings the condition along).
func TestEtcdHealthyFollowsTheQuorum(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.StorageClassName = "standard"
	h.pc.Spec.Hosted.HighAvailability = true
	cl := newCluster("quorum")
	servesHighlyAvailable(t, h, cl)
	pods := make([]*corev1.Pod, 3)
	for i := range pods {
		pods[i] = etcdPod(t, cl, fmt.Sprintf("%s-%d", NameEtcd, i), corev1.PodStatus{})
	}
	set := func(i int, status corev1.PodStatus) {
		t.Helper()
		pods[i].Status = status
		require.NoError(t, env.Client.Status().Update(t.Context(), pods[i]))
	}
	await := func(ready bool, reason string, msg ...string) backend.State {
		t.Helper()
		var s backend.State
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			s = h.ensure(t, cl)
			p := s.Part(backend.PartEtcd)
			if assert.NotNil(c, p) {
				assert.Equal(c, ready, p.Ready, p.Message)
				assert.Equal(c, reason, p.Reason, p.Message)
				for _, m := range msg {
					assert.Contains(c, p.Message, m)
				}
			}
		}, 10*time.Second, 50*time.Millisecond)
		return s
	}
	for i := range pods {
		set(i, readyStatus())
	}
	await(true, backend.ReasonRunning, "all 3 etcd members are ready")

	drain(h.notified)
	set(2, noLeaderStatus())
	awaitNotified(t, h, cl)
	s := await(false, backend.ReasonEtcdDegraded, "1 of 3 etcd members not ready: etcd-2 (not ready: no leader", "the quorum holds")
	assert.True(t, s.Ready, "a quorum serves: %s", s.Message)

	set(1, unschedulableStatus())
	await(false, backend.ReasonEtcdQuorumLost, "2 of 3 etcd members not ready", "etcd-1 (pod Pending: not scheduled: 0/4 nodes are available",
		"etcd-2 (not ready: no leader", "quorum lost")

	require.NoError(t, env.Client.Delete(t.Context(), pods[1]))
	await(false, backend.ReasonEtcdQuorumLost, "etcd-1 (no pod)")

	pods[1].ResourceVersion = ""
	require.NoError(t, env.Client.Create(t.Context(), pods[1]))
	set(1, readyStatus())
	set(2, readyStatus())
	await(true, backend.ReasonRunning, "all 3 etcd members are ready")
}

// etcdPod makes member name's pod of cl's etcd as the StatefulSet controller would (its template,
// its claim) with status (envtest runs no kubelet: the test writes what one would).
func etcdPod(t *testing.T, cl *clustersv1alpha1.Cluster, name string, status corev1.PodStatus) *corev1.Pod {
	t.Helper()
	ns := NamespaceFor(cl.UID)
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	spec := *sts.Spec.Template.Spec.DeepCopy()
	if len(sts.Spec.VolumeClaimTemplates) > 0 {
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data-" + name}}})
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: sts.Spec.Template.Labels,
		Annotations: sts.Spec.Template.Annotations}, Spec: spec}
	require.NoError(t, env.Client.Create(t.Context(), pod))
	if status.Phase != "" {
		pod.Status = status
		require.NoError(t, env.Client.Status().Update(t.Context(), pod))
	}
	return pod
}

// cachedObject waits until the backend's cache holds obj as it is now (its resourceVersion).
func (h *harness) cachedObject(t *testing.T, obj client.Object) {
	t.Helper()
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cur := obj.DeepCopyObject().(client.Object)
		if assert.NoError(c, hst.cache.Get(t.Context(), client.ObjectKeyFromObject(obj), cur)) {
			assert.Equal(c, obj.GetResourceVersion(), cur.GetResourceVersion())
		}
	}, 10*time.Second, 20*time.Millisecond)
}

// servesHighlyAvailable makes cl's highly available control plane serve, as far as envtest can
// (its workloads' statuses, as the controllers of a real cluster would write them), until its
// first maintenance Job started: EtcdHealthy is reported from then on.
func servesHighlyAvailable(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	ns := NamespaceFor(cl.UID)
	h.ensure(t, cl)
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3, CurrentReplicas: 3,
		CurrentRevision: "r", UpdateRevision: "r"}
	require.NoError(t, env.Client.Status().Update(t.Context(), sts))
	require.Eventually(t, func() bool {
		h.ensure(t, cl)
		return env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: NameAPIServer}, &appsv1.Deployment{}) == nil
	}, 10*time.Second, 20*time.Millisecond, "the API servers are made once etcd has a quorum")
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, ReadyReplicas: 2}
	require.NoError(t, env.Client.Status().Update(t.Context(), dep))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s := h.ensure(t, cl)
		assert.True(c, s.Ready, s.Message)
		assert.NotNil(c, record(t, cl).Etcd, "the first maintenance Job started")
	}, 10*time.Second, 50*time.Millisecond)
}

// drain empties ch of the notifications so far.
func drain(ch chan backend.Ref) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}
