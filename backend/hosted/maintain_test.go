package hosted

import (
	"crypto/x509"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/etcdmaint"
)

// backdate moves the times of cl's etcd maintenance record back by d, as if that long had passed.
func backdate(t *testing.T, cl *clustersv1alpha1.Cluster, d time.Duration) {
	t.Helper()
	cm := get(t, &corev1.ConfigMap{}, NamespaceFor(cl.UID), NameRecord)
	var ps providerStatus
	require.NoError(t, json.Unmarshal([]byte(cm.Data[recordKey]), &ps))
	require.NotNil(t, ps.Etcd)
	for _, at := range []*time.Time{&ps.Etcd.Checked, &ps.Etcd.Tried, &ps.Etcd.Periodic} {
		if !at.IsZero() {
			*at = at.Add(-d)
		}
	}
	data, err := json.Marshal(ps)
	require.NoError(t, err)
	cm.Data[recordKey] = string(data)
	require.NoError(t, env.Client.Update(t.Context(), cm))
}

func report(t *testing.T, r etcdmaint.Report) string {
	t.Helper()
	data, err := json.Marshal(r)
	require.NoError(t, err)
	return string(data)
}

// maintenanceCase is what the steps of TestEtcdMaintenance share: the backend, the Cluster, its
// control plane's namespace, the name of its maintenance Job and the certificate of its first Job.
type maintenanceCase struct {
	h         *harness
	cl        *clustersv1alpha1.Cluster
	ns, name  string
	firstCert *x509.Certificate
	// pod is the etcd member's pod (envtest runs none: the test writes its status).
	pod *corev1.Pod
}

// TestEtcdMaintenance: once a control plane serves, a maintenance Job checks its etcd (the
// control plane's image, an etcd client certificate made for that Job, every member, etcd's
// NetworkPolicy lets it in) and its report is the EtcdHealthy part; a full etcd is not Ready (EtcdNoSpace), and is
// checked again a minute later until the alarm is gone; an etcd member that runs but is not ready
// is checked too; every six hours a pass defragments; a Job that fails changes nothing it knew,
// and the next waits twice as long.
func TestEtcdMaintenance(t *testing.T) {
	cl := newCluster("maint")
	ns := NamespaceFor(cl.UID)
	c := &maintenanceCase{h: startBackend(t), cl: cl, ns: ns, name: namesFor(ns).maintain}
	c.firstJobOnceServing(t)
	c.reportIsThePart(t)
	t.Run("a member that did not answer is checked again once every member is ready", c.memberDownCheckedAgain)
	t.Run("a full etcd is not Ready and is checked every minute until disarmed; a failed Job backs off", c.fullEtcd)
	t.Run("every six hours the periodic pass defragments", c.periodicDefrag)
	t.Run("deleting the Cluster takes its Jobs with it", c.deleteTakesJobs)
}

// assertNoJob checks that the Cluster has no maintenance Job.
func (c *maintenanceCase) assertNoJob(t *testing.T, msg string) {
	t.Helper()
	require.Error(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: BackupNamespace, Name: c.name}, &batchv1.Job{}), msg)
}

// firstJobOnceServing: no Job before the control plane serves; then one, with the control plane's
// image, a certificate of its own, let in by etcd's NetworkPolicy.
func (c *maintenanceCase) firstJobOnceServing(t *testing.T) {
	h, cl, ns := c.h, c.cl, c.ns
	s := h.ensure(t, cl)
	assert.Nil(t, s.Part(backend.PartEtcd), "not checked before it serves")
	c.assertNoJob(t, "no Job before the control plane serves")
	sharedCredential(t, h, ns)
	c.pod = etcdPod(t, cl, "etcd-0", readyStatus())
	h.cachedObject(t, c.pod)
	h.etcdUp(t, cl)
	rolledOutNow(t, cl)
	s = h.ensure(t, cl)
	require.True(t, s.Ready, "%s", s.Message)
	if p := s.Part(backend.PartEtcd); assert.NotNil(t, p, "from its first serve, from the members") {
		assert.True(t, p.Ready, p.Message)
		assert.Equal(t, "all 1 etcd members are ready (in the quorum: a leader, linearizable reads)", p.Message, "no report yet")
	}
	job := get(t, &batchv1.Job{}, BackupNamespace, c.name)
	ctr := job.Spec.Template.Spec.Containers[0]
	assert.Equal(t, image1, ctr.Image)
	assert.Equal(t, []string{"/usr/local/bin/etcd-snapshot"}, ctr.Command)
	assert.Contains(t, ctr.Args, "maintain")
	assert.Contains(t, ctr.Args, "--member=etcd-0=https://etcd."+ns+".svc:2379")
	assert.Contains(t, ctr.Args, "--quota=1073741824", "an emptyDir's quota")
	assert.NotContains(t, ctr.Args, "--defrag", "a new database needs none")
	np := get(t, &networkingv1.NetworkPolicy{}, ns, NameEtcd)
	admitted := false
	for _, r := range np.Spec.Ingress {
		for _, from := range r.From {
			admitted = admitted || (from.NamespaceSelector != nil && from.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == BackupNamespace &&
				selects(t, from.PodSelector, job.Spec.Template.Labels) && r.Ports[0].Port.IntVal == portEtcd)
		}
	}
	assert.True(t, admitted, "etcd's NetworkPolicy lets the maintenance Job in")
	assert.Equal(t, int64(maintainDeadline.Seconds()), *job.Spec.ActiveDeadlineSeconds)
	c.firstCert = jobCert(t, job, "pki", ns, x509.ExtKeyUsageClientAuth)
	assert.Equal(t, snapshotUser, c.firstCert.Subject.CommonName)
	assertNoSecret(t, namesFor(ns).shared, "the long-lived certificate of an earlier version is replaced by the Job's own")
	assert.LessOrEqual(t, s.RetryAfter, 5*time.Second, "looked at again soon")
}

// reportIsThePart: the report is the EtcdHealthy part, and the recorded state.
func (c *maintenanceCase) reportIsThePart(t *testing.T) {
	h, cl, name := c.h, c.cl, c.name
	h.endJob(t, name, batchv1.JobComplete, report(t, etcdmaint.Report{Quota: 1 << 30, Members: []etcdmaint.MemberReport{{Name: "etcd-0", DBSize: 3 << 20}},
		Message: "etcd takes writes: its database is 3.0 MiB of its 1024.0 MiB quota."}))
	s := h.ensure(t, cl)
	require.NotNil(t, s.Part(backend.PartEtcd))
	assert.True(t, s.Part(backend.PartEtcd).Ready)
	assert.Equal(t, "all 1 etcd members are ready (in the quorum: a leader, linearizable reads); etcd takes writes: its database is 3.0 MiB of its 1024.0 MiB quota.",
		s.Part(backend.PartEtcd).Message, "the members' state, and the report beside")
	assert.Equal(t, int64(3<<20), record(t, cl).Etcd.DBSize)
	assertNoSecret(t, name, "the Job's certificate goes once its report is read")
	forceGone(t, name)
	s = h.ensure(t, cl)
	c.assertNoJob(t, "none due")
	assert.Greater(t, s.RetryAfter, 5*time.Hour, "the next, periodic, in six hours")
}

// memberDownCheckedAgain: a member that did not answer (one still starting when the check ran):
// checked again once every member is ready and a minute has passed since the last Job, not six
// hours later.
func (c *maintenanceCase) memberDownCheckedAgain(t *testing.T) {
	h, cl, name := c.h, c.cl, c.name
	backdate(t, cl, maintainEvery+time.Minute)
	h.ensure(t, cl)
	secondCert := jobCert(t, get(t, &batchv1.Job{}, BackupNamespace, name), "pki", c.ns, x509.ExtKeyUsageClientAuth)
	assert.NotEqual(t, 0, c.firstCert.SerialNumber.Cmp(secondCert.SerialNumber), "a certificate of its own for the next Job")
	assert.NotEqual(t, c.firstCert.RawSubjectPublicKeyInfo, secondCert.RawSubjectPublicKeyInfo, "and a key of its own")
	h.endJob(t, name, batchv1.JobComplete, report(t, etcdmaint.Report{Quota: 1 << 30, Members: []etcdmaint.MemberReport{{Name: "etcd-0", Error: "context deadline exceeded"}},
		Message: "etcd takes writes: its database is 0.0 MiB of its 1024.0 MiB quota; member etcd-0 does not answer."}))
	s := h.ensure(t, cl)
	require.NotNil(t, s.Part(backend.PartEtcd))
	// Its pod is ready now (its readiness is quorum-true): the condition does not repeat the
	// report's word, which is past; the record keeps it, so that it is checked again.
	assert.NotContains(t, s.Part(backend.PartEtcd).Message, "does not answer")
	assert.Equal(t, []string{"etcd-0"}, record(t, cl).Etcd.Down)
	forceGone(t, name)
	s = h.ensure(t, cl)
	c.assertNoJob(t, "not within a minute of the last Job")
	assert.LessOrEqual(t, s.RetryAfter, maintainAgain, "looked at again within a minute")
	backdate(t, cl, 2*time.Minute)
	h.ensure(t, cl)
	get(t, &batchv1.Job{}, BackupNamespace, name)
	h.endJob(t, name, batchv1.JobComplete, report(t, etcdmaint.Report{Quota: 1 << 30, Members: []etcdmaint.MemberReport{{Name: "etcd-0", DBSize: 3 << 20}},
		Message: "etcd takes writes: its database is 3.0 MiB of its 1024.0 MiB quota."}))
	s = h.ensure(t, cl)
	assert.NotContains(t, s.Part(backend.PartEtcd).Message, "does not answer")
	assert.Empty(t, record(t, cl).Etcd.Down)
	forceGone(t, name)
	s = h.ensure(t, cl)
	c.assertNoJob(t, "every member answered: none due")
	assert.Greater(t, s.RetryAfter, 5*time.Hour, "the next, periodic, in six hours")
}

// fullEtcd: a member that runs but is not ready is checked; its report of a full etcd makes the
// Cluster not Ready (EtcdNoSpace); a failed Job then backs off until a report says disarmed.
func (c *maintenanceCase) fullEtcd(t *testing.T) {
	pod := c.fullIsNotReady(t)
	c.failedJobBacksOff(t, pod)
}

// fullIsNotReady: an etcd member that runs but has not been ready for a while (a NOSPACE alarm
// fails etcd's readiness check): checked, once a minute has passed since the last Job; its report
// of a full etcd is what keeps the Cluster from Ready. It returns the member's pod.
func (c *maintenanceCase) fullIsNotReady(t *testing.T) *corev1.Pod {
	h, cl, ns, name := c.h, c.cl, c.ns, c.name
	pod := c.pod
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning,
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Minute))}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: containerEtcd, Image: image1, Started: ptr.To(true), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}
	require.NoError(t, env.Client.Status().Update(t.Context(), pod))
	require.Eventually(t, func() bool { // the backend's cache sees the pod
		h.ensure(t, cl)
		return env.Client.Get(t.Context(), client.ObjectKey{Namespace: BackupNamespace, Name: name}, &batchv1.Job{}) == nil ||
			record(t, cl).Etcd.Tried.After(time.Now().Add(-maintainAgain))
	}, 10*time.Second, 50*time.Millisecond)
	c.assertNoJob(t, "not within a minute of the last Job")
	backdate(t, cl, 2*time.Minute)
	require.Eventually(t, func() bool {
		h.ensure(t, cl)
		return env.Client.Get(t.Context(), client.ObjectKey{Namespace: BackupNamespace, Name: name}, &batchv1.Job{}) == nil
	}, 10*time.Second, 50*time.Millisecond, "a suspect member is checked")
	full := etcdmaint.Report{Quota: 1 << 30, NoSpace: true, Revision: 900, FreedAt: 900, Members: []etcdmaint.MemberReport{{Name: "etcd-0", DBSize: 1 << 30}},
		Message: "etcd's database reached its quota (…): the cluster serves reads and deletes but takes no writes. Delete objects you do not need (kubectl delete)"}
	h.endJob(t, name, batchv1.JobComplete, report(t, full))
	// etcd's readiness check fails on the alarm: the StatefulSet has no ready member.
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	sts.Status.ReadyReplicas = 0
	require.NoError(t, env.Client.Status().Update(t.Context(), sts))
	var s backend.State
	require.Eventually(t, func() bool {
		s = h.ensure(t, cl)
		return s.Part(backend.PartEtcd) != nil && !s.Part(backend.PartEtcd).Ready && !s.Ready
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, backend.ReasonEtcdNoSpace, s.Part(backend.PartEtcd).Reason)
	assert.Equal(t, backend.ReasonEtcdNoSpace, s.Reason, "what keeps it from Ready")
	assert.Contains(t, s.Message, "Delete objects")
	assert.LessOrEqual(t, s.RetryAfter, maintainAgain, "checked again within a minute")
	return pod
}

// failedJobBacksOff: a minute later, a Job again, with the revision it was freed at; one that
// fails changes nothing known and the next waits twice as long; a report that says disarmed
// makes etcd Ready and ends the backoff. pod is the member's pod fullIsNotReady made.
func (c *maintenanceCase) failedJobBacksOff(t *testing.T, pod *corev1.Pod) {
	h, cl, name := c.h, c.cl, c.name
	forceGone(t, name)
	backdate(t, cl, 2*time.Minute)
	h.ensure(t, cl)
	job := get(t, &batchv1.Job{}, BackupNamespace, name)
	assert.Contains(t, job.Spec.Template.Spec.Containers[0].Args, "--freed-at=900")
	// A Job that fails changes nothing known.
	h.endJob(t, name, batchv1.JobFailed, "")
	s := h.ensure(t, cl)
	require.NotNil(t, s.Part(backend.PartEtcd))
	assert.False(t, s.Part(backend.PartEtcd).Ready, "still full, as far as is known")
	assert.Equal(t, 1, record(t, cl).Etcd.Failures)
	assertNoSecret(t, name, "a failed Job's certificate goes too")
	forceGone(t, name)
	backdate(t, cl, 90*time.Second)
	h.ensure(t, cl)
	c.assertNoJob(t, "after a failed Job, the next waits twice as long")
	backdate(t, cl, time.Minute)
	h.ensure(t, cl)
	h.endJob(t, name, batchv1.JobComplete, report(t, etcdmaint.Report{Quota: 1 << 30, Disarmed: true, Revision: 950, FreedAt: 950,
		Members: []etcdmaint.MemberReport{{Name: "etcd-0", DBSize: 40 << 20}}, Message: "etcd's database was full; the provider freed space and disarmed its NOSPACE alarm"}))
	pod.Status = readyStatus() // etcd's readiness check passes again
	require.NoError(t, env.Client.Status().Update(t.Context(), pod))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		s = h.ensure(t, cl)
		if p := s.Part(backend.PartEtcd); assert.NotNil(ct, p) {
			assert.True(ct, p.Ready, "disarmed: %s", p.Message)
		}
	}, 10*time.Second, 50*time.Millisecond)
	assert.Zero(t, record(t, cl).Etcd.Failures, "a report ends the backoff")
	forceGone(t, name)
}

// periodicDefrag: six hours on, the periodic pass defragments.
func (c *maintenanceCase) periodicDefrag(t *testing.T) {
	h, cl, name := c.h, c.cl, c.name
	backdate(t, cl, maintainEvery+time.Minute)
	h.ensure(t, cl)
	job := get(t, &batchv1.Job{}, BackupNamespace, name)
	assert.Contains(t, job.Spec.Template.Spec.Containers[0].Args, "--defrag")
	h.endJob(t, name, batchv1.JobComplete, report(t, etcdmaint.Report{Quota: 1 << 30, Defragmented: []string{"etcd-0"},
		Members: []etcdmaint.MemberReport{{Name: "etcd-0", DBSize: 20 << 20}}, Message: "etcd takes writes; defragmented etcd-0."}))
	h.ensure(t, cl)
	rec := record(t, cl).Etcd
	assert.Equal(t, []string{"etcd-0"}, rec.Defragmented)
	assert.WithinDuration(t, time.Now(), rec.Periodic, time.Minute, "the next periodic pass in six hours")
}

// deleteTakesJobs: deleting the Cluster takes its Jobs and their certificates with it.
func (c *maintenanceCase) deleteTakesJobs(t *testing.T) {
	h, cl, name := c.h, c.cl, c.name
	forceGone(t, name)
	backdate(t, cl, maintainEvery+time.Minute)
	h.ensure(t, cl)
	get(t, &batchv1.Job{}, BackupNamespace, name)
	platform, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	_, err = h.b.gone(t.Context(), platform, cl)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		j := &batchv1.Job{}
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: BackupNamespace, Name: name}, j)
		return err != nil || j.DeletionTimestamp != nil
	}, 10*time.Second, 50*time.Millisecond, "the Job goes with its Cluster")
	assertNoSecret(t, name, "and its certificate")
}
