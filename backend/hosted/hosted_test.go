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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend"
)

// TestSnapshotJobs: a snapshot of a hosted control plane is a Job in BackupNamespace (envtest
// runs none: the test ends it as the Job controller and the kubelet would, with the tool's
// result as the pod's termination message); while it runs Snapshot says SnapshotInProgress; once
// it ended, the snapshot is listed in its ConfigMap, those it removed are not, and the Job goes.
// A failed Job is an error that says why; a control plane on an emptyDir has no snapshots. Each
// Job has an etcd client certificate made for it (valid for its deadline and a margin, in a
// Secret it owns) that goes with it; the long-lived one of an earlier version goes at the first.
func TestSnapshotJobs(t *testing.T) {
	h := startBackend(t)
	ctx := t.Context()
	empty := newCluster("snap-emptydir")
	h.ensure(t, empty)
	_, err := h.b.Snapshot(ctx, empty, 3)
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonBackupUnavailable), "%v", err)
	assert.Contains(t, err.Error(), "emptyDir")

	h.pc.Spec.Hosted.StorageClassName = "standard"
	cl := newCluster("snap")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	names := namesFor(ns)
	sharedCredential(t, h, ns)
	_, err = h.b.Snapshot(ctx, cl, 3)
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	job := get(t, &batchv1.Job{}, BackupNamespace, names.job)
	assert.Equal(t, int64(snapshotDeadline.Seconds()), *job.Spec.ActiveDeadlineSeconds)
	ctr := job.Spec.Template.Spec.Containers[0]
	assert.Equal(t, image1, ctr.Image, "the control plane's own image runs it")
	assert.Equal(t, []string{"/usr/local/bin/etcd-snapshot"}, ctr.Command)
	assert.Contains(t, ctr.Args, "--keep=3")
	assert.Contains(t, ctr.Args, "--endpoints=https://etcd."+ns+".svc:2379")
	assert.Equal(t, string(cl.UID), job.Spec.Template.Labels[LabelClusterUID])
	assert.Equal(t, ComponentSnapshot, job.Spec.Template.Labels[LabelComponent], "the etcd NetworkPolicy lets these pods in")
	claim := get(t, &corev1.PersistentVolumeClaim{}, BackupNamespace, names.claim)
	assert.Equal(t, "standard", *claim.Spec.StorageClassName)
	assert.Equal(t, "4Gi", ptrTo(claim.Spec.Resources.Requests[corev1.ResourceStorage]).String())
	firstCert := jobCert(t, job, "pki", ns, x509.ExtKeyUsageClientAuth)
	assert.Equal(t, snapshotUser, firstCert.Subject.CommonName)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, firstCert.ExtKeyUsage)
	assertNoSecret(t, names.shared, "the long-lived certificate of an earlier version is replaced by the Job's own")
	np := get(t, &networkingv1.NetworkPolicy{}, ns, NameEtcd)
	found := false
	for _, r := range np.Spec.Ingress {
		for _, from := range r.From {
			found = found || (from.NamespaceSelector != nil && from.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == BackupNamespace &&
				selects(t, from.PodSelector, job.Spec.Template.Labels))
		}
	}
	assert.True(t, found, "the etcd NetworkPolicy lets in this Cluster's snapshot Jobs: %+v", np.Spec.Ingress)
	_, err = h.b.Snapshot(ctx, cl, 3)
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "still running: %v", err)

	end := func(cond batchv1.JobConditionType, result string) {
		t.Helper()
		endJob(t, names.job, cond, result)
	}
	taken := func(name string) backend.Snapshot {
		return backend.Snapshot{Name: name, Cluster: cl.UID, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Revision: 7, Keys: 3, Version: "1.37.1", SHA256: "ab"}
	}
	result := func(s backend.Snapshot, removed ...string) string {
		data, err := json.Marshal(snapshotResult{Snapshot: &s, Removed: removed})
		require.NoError(t, err)
		return string(data)
	}
	first := taken("20261126T010000Z")
	end(batchv1.JobComplete, result(first))
	got, err := h.b.Snapshot(ctx, cl, 3)
	require.NoError(t, err)
	first.Namespace = cl.Namespace // the Job does not know it; the backend records it
	assert.Equal(t, first, got)
	require.Eventually(t, func() bool {
		j := &batchv1.Job{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: names.job}, j)
		return apierrors.IsNotFound(err) || j.DeletionTimestamp != nil
	}, 10*time.Second, 20*time.Millisecond, "the Job goes once harvested")
	assertNoSecret(t, names.job, "its certificate goes with it")
	list, err := h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{first}, list)
	cm := get(t, &corev1.ConfigMap{}, BackupNamespace, names.catalog)
	assert.Contains(t, cm.Data[catalogKey], first.Name, "kubectl get configmap lists it")

	// The next one removes the first (keep); a failed one says why.
	forceGone(t, names.job)
	_, err = h.b.Snapshot(ctx, cl, 1)
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	job = get(t, &batchv1.Job{}, BackupNamespace, names.job)
	secondCert := jobCert(t, job, "pki", ns, x509.ExtKeyUsageClientAuth)
	assert.NotEqual(t, 0, firstCert.SerialNumber.Cmp(secondCert.SerialNumber), "a certificate of its own for the next Job")
	assert.NotEqual(t, firstCert.RawSubjectPublicKeyInfo, secondCert.RawSubjectPublicKeyInfo, "and a key of its own")
	second := taken("20261126T020000Z")
	end(batchv1.JobComplete, result(second, first.Name))
	second.Namespace = cl.Namespace
	_, err = h.b.Snapshot(ctx, cl, 1)
	require.NoError(t, err)
	list, err = h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{second}, list)

	forceGone(t, names.job)
	_, err = h.b.Snapshot(ctx, cl, 1)
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	end(batchv1.JobFailed, `{"error":"etcdctl snapshot save: exit status 1: context deadline exceeded"}`)
	_, err = h.b.Snapshot(ctx, cl, 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "context deadline exceeded", "the tool's own words")
	assertNoSecret(t, names.job, "a failed Job's certificate goes with it too")
	list, err = h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{second}, list, "a failure changes no list")

	// A Cluster whose namespace is gone (envtest deletes none: one whose namespace never was):
	// Delete removes its Jobs' credentials (and an earlier version's); the snapshots of every
	// Cluster stay.
	ghost := newCluster("ghost")
	ghostNames := namesFor(NamespaceFor(ghost.UID))
	creds := []string{ghostNames.shared, ghostNames.job, ghostNames.maintain, serveName(NamespaceFor(ghost.UID))}
	for _, name := range creds {
		require.NoError(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: name}}))
	}
	gone, err := h.b.Delete(ctx, ghost)
	require.NoError(t, err)
	assert.True(t, gone)
	for _, name := range creds {
		assertNoSecret(t, name, "the credential goes with its Cluster")
	}
	get(t, &corev1.ConfigMap{}, BackupNamespace, names.catalog)
}

// selects reports whether sel selects labels.
func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	require.NoError(t, err)
	return s.Matches(labels.Set(l))
}

// endJob finishes Job name of BackupNamespace as Kubernetes would, its pod having written result
// as its termination message.
func endJob(t *testing.T, name string, cond batchv1.JobConditionType, result string) {
	t.Helper()
	ctx := t.Context()
	job := get(t, &batchv1.Job{}, BackupNamespace, name)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, GenerateName: name + "-",
		Labels: map[string]string{batchv1.JobNameLabel: name, batchv1.ControllerUidLabel: string(job.UID)}}, Spec: job.Spec.Template.Spec}
	require.NoError(t, env.Client.Create(ctx, pod))
	ctr := job.Spec.Template.Spec.Containers[0]
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ctr.Name, Image: ctr.Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: result}}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, Reason: "Test", Message: "as the Job controller says"}}
	if cond == batchv1.JobComplete {
		job.Status.Succeeded, job.Status.CompletionTime = 1, &now
		job.Status.Conditions = append([]batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}}, job.Status.Conditions...)
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = append([]batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "Test"}}, job.Status.Conditions...)
	}
	require.NoError(t, env.Client.Status().Update(ctx, job))
}

// forceGone removes a Job envtest keeps (no garbage collector) so that the next can be made.
func forceGone(t *testing.T, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		j := &batchv1.Job{}
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: BackupNamespace, Name: name}, j)
		if apierrors.IsNotFound(err) {
			return true
		}
		if len(j.Finalizers) > 0 {
			j.Finalizers = nil
			_ = env.Client.Update(t.Context(), j)
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
}

// TestRestoreSteps: a restore names a snapshot of the Cluster's own list (others are refused,
// nothing changed); it is recorded and starts with a serve of the snapshot in BackupNamespace
// (its Service, its token in both namespaces, a certificate made for its Job, etcd's
// NetworkPolicy lets etcd reach it); a serve that refuses the snapshot (envtest runs no pod: the
// test ends the Job as Kubernetes would) ends the restore with Restored.Failed, nothing changed
// and the serve gone, its certificate with it. A new Cluster whose restore-from names no snapshot
// is refused before anything is made.
func TestRestoreSteps(t *testing.T) {
	h := startBackend(t)
	ctx := t.Context()
	h.pc.Spec.Hosted.StorageClassName = "standard"
	cl := newCluster("restored")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	hst, err := h.b.hostFor(ctx, nil)
	require.NoError(t, err)
	s := &Spec{Namespace: ns, Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, UID: cl.UID}}
	snap := backend.Snapshot{Name: "20261126T010000Z", Cluster: cl.UID, Namespace: cl.Namespace, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Revision: 9, Keys: 3, Version: "1.37.1", SHA256: "ab"}
	require.NoError(t, hst.apply(ctx, s.BackupNamespaceObject()))
	require.NoError(t, updateCatalog(ctx, hst, s, snap, nil)) // as a snapshot Job's end would

	for _, tc := range []struct{ name, says string }{
		{"20261126T000000Z", `there is no snapshot "20261126T000000Z"`},
		{"../etc", "is not a snapshot name"},
	} {
		_, err := h.b.CheckRestore(ctx, cl, tc.name)
		require.Error(t, err)
		assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
		assert.Contains(t, err.Error(), tc.says)
	}
	later := snap
	later.Name, later.Version = "20261126T020000Z", "1.38.0"
	require.NoError(t, updateCatalog(ctx, hst, s, later, nil))
	_, err = h.b.CheckRestore(ctx, cl, later.Name)
	assert.ErrorContains(t, err, "a later version than the cluster's 1.37.1")

	got, err := h.b.CheckRestore(ctx, cl, snap.Name)
	require.NoError(t, err)
	assert.Equal(t, snap, got)
	require.NoError(t, h.b.Restore(ctx, cl, snap.Name))
	rec := record(t, cl)
	require.NotNil(t, rec.Restore)
	assert.Equal(t, restoreServe, rec.Restore.Phase)
	assert.Equal(t, "data", rec.Restore.PreviousDataDir)
	st := h.ensure(t, cl)
	assert.False(t, st.Ready)
	assert.Equal(t, backend.ReasonRestoring, st.Reason)
	assert.Contains(t, st.Message, "its snapshot is checked and served")
	name := serveName(ns)
	job := get(t, &batchv1.Job{}, BackupNamespace, name)
	assert.Contains(t, job.Spec.Template.Spec.Containers[0].Args, "--name="+snap.Name)
	assert.Equal(t, namesFor(ns).claim, job.Spec.Template.Spec.Volumes[len(job.Spec.Template.Spec.Volumes)-2].PersistentVolumeClaim.ClaimName, "the claim of the snapshot's Cluster")
	get(t, &corev1.Service{}, BackupNamespace, name)
	serveSecret := get(t, &corev1.Secret{}, BackupNamespace, name)
	serveCert := jobCert(t, job, "serve", ns, x509.ExtKeyUsageServerAuth)
	assert.NoError(t, serveCert.VerifyHostname(name+"."+BackupNamespace+".svc"), "what the etcd pods dial")
	token := get(t, &corev1.Secret{}, ns, SecretRestoreToken)
	assert.Equal(t, serveSecret.Data["token"], token.Data["token"])
	assert.Len(t, token.Data["token"], 64)
	egress := get(t, &networkingv1.NetworkPolicy{}, ns, NameEtcd).Spec.Egress
	require.NotEmpty(t, egress, "etcd reaches the serve while the restore runs")
	assert.Equal(t, map[string]string{corev1.LabelMetadataName: BackupNamespace}, egress[0].To[0].NamespaceSelector.MatchLabels)
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	assert.Empty(t, sts.Spec.Template.Spec.InitContainers, "nothing changes before the serve has checked the snapshot")

	// The serve refuses the snapshot (damaged): the restore ends, nothing changed.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, GenerateName: name + "-",
		Labels: map[string]string{batchv1.ControllerUidLabel: string(job.UID)}}, Spec: job.Spec.Template.Spec}
	require.NoError(t, env.Client.Create(ctx, pod))
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ComponentServe, Image: image1, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 1, Message: `{"error":"restore refused, nothing changed: snapshot \"20261126T010000Z\" is damaged","refused":true}`}}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.Failed = 1
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}}
	require.NoError(t, env.Client.Status().Update(ctx, job))
	st = h.ensure(t, cl)
	require.NotNil(t, st.Restored)
	assert.Contains(t, st.Restored.Failed, "is damaged")
	assert.Contains(t, st.Restored.Failed, "nothing changed")
	assert.NotEqual(t, backend.ReasonRestoring, st.Reason)
	rec = record(t, cl)
	assert.Nil(t, rec.Restore)
	assert.Empty(t, rec.EtcdDataDir, "etcd keeps its data folder")
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: SecretRestoreToken}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "the token goes with the serve: %v", err)
	assertNoSecret(t, name, "the serve's certificate and token go with it")
	assert.Empty(t, get(t, &appsv1.StatefulSet{}, ns, NameEtcd).Spec.Template.Spec.InitContainers)

	// A new Cluster from a snapshot that does not exist: refused, nothing made.
	copyOf := newCluster("copy")
	copyOf.Annotations = map[string]string{backend.AnnotationRestoreFrom: string(cl.UID) + "/20261126T030000Z"}
	_, err = h.b.Ensure(ctx, copyOf, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	err = env.Client.Get(ctx, client.ObjectKey{Name: NamespaceFor(copyOf.UID)}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "nothing made: %v", err)

	// From one that exists, for a Cluster of another namespace: not found, no name listed, its
	// keys not adopted, nothing made.
	foreign := newCluster("foreign")
	foreign.Namespace = "team-b"
	foreign.Annotations = map[string]string{backend.AnnotationRestoreFrom: snap.Ref()}
	_, err = h.b.Ensure(ctx, foreign, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	assert.Contains(t, err.Error(), "(it has none for a Cluster of namespace team-b)")
	assert.NotContains(t, err.Error(), later.Name)
	err = env.Client.Get(ctx, client.ObjectKey{Name: NamespaceFor(foreign.UID)}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "nothing made: %v", err)

	// From one that exists: its etcd restores it from its first pod, and its API server reads
	// with the keys kept beside the snapshots (as a snapshot Job's start keeps them).
	_, err = h.b.keepKeys(ctx, hst, s)
	require.NoError(t, err)
	source, _ := keysIn(t, ns)
	copyOf.Annotations[backend.AnnotationRestoreFrom] = snap.Ref()
	h.ensure(t, copyOf)
	adopted, _ := keysIn(t, NamespaceFor(copyOf.UID))
	require.Len(t, adopted.Keys, 2)
	assert.Equal(t, source.Keys[0], adopted.Keys[1], "the snapshot's key reads")
	assert.NotEqual(t, source.Writer(), adopted.Writer(), "a key of its own writes")
	assert.False(t, adopted.Done(), "the restored Secrets are rewritten with it")
	csts := get(t, &appsv1.StatefulSet{}, NamespaceFor(copyOf.UID), NameEtcd)
	require.Len(t, csts.Spec.Template.Spec.InitContainers, 1)
	init := csts.Spec.Template.Spec.InitContainers[0]
	assert.Contains(t, init.Args, "--sha256="+snap.SHA256)
	assert.Contains(t, init.Args, "--url="+serveURL(NamespaceFor(copyOf.UID)))
	assert.Equal(t, flags(t, init.Args[1:])["--data-dir"], flags(t, csts.Spec.Template.Spec.Containers[0].Args)["--data-dir"], "etcd starts on what the init container restored")
	cjob := get(t, &batchv1.Job{}, BackupNamespace, serveName(NamespaceFor(copyOf.UID)))

	// Its serve served the new etcd before the backend saw it ready: that is no failure.
	cpod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, GenerateName: cjob.Name + "-",
		Labels: map[string]string{batchv1.ControllerUidLabel: string(cjob.UID)}}, Spec: cjob.Spec.Template.Spec}
	require.NoError(t, env.Client.Create(ctx, cpod))
	served, err := json.Marshal(snapshotResult{Snapshot: &snap})
	require.NoError(t, err)
	cpod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ComponentServe, Image: image1, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(served)}}}}
	require.NoError(t, env.Client.Status().Update(ctx, cpod))
	cjob.Status.StartTime, cjob.Status.CompletionTime, cjob.Status.Succeeded = &now, &now, 1
	cjob.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	require.NoError(t, env.Client.Status().Update(ctx, cjob))
	st = h.ensure(t, copyOf)
	assert.Nil(t, st.Restored, "no failure: %+v", st.Restored)
	assert.Equal(t, restoreEtcd, record(t, copyOf).Restore.Phase, "on to etcd's pods")
}
