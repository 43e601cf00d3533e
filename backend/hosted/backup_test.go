package hosted

import (
	"crypto/x509"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// snapshotCase is what the steps of TestSnapshotJobs share: the backend, the Cluster, its control
// plane's namespace and backup names, the certificate of its first Job, and its two snapshots.
type snapshotCase struct {
	h             *harness
	cl            *clustersv1alpha1.Cluster
	ns            string
	names         backupNames
	firstCert     *x509.Certificate
	first, second backend.Snapshot
}

// TestSnapshotJobs: a snapshot of a hosted control plane is a Job in BackupNamespace (envtest
// runs none: the test ends it as the Job controller and the kubelet would, with the tool's
// result as the pod's termination message); while it runs Snapshot says SnapshotInProgress; once
// it ended (which notifies the Cluster), the snapshot is listed in its ConfigMap, those it removed
// are not, and the Job goes.
// A failed Job is an error that says why; a control plane on an emptyDir has no snapshots. Each
// Job has an etcd client certificate made for it (valid for its deadline and a margin, in a
// Secret it owns) that goes with it; the long-lived one of an earlier version goes at the first.
func TestSnapshotJobs(t *testing.T) {
	h := startBackend(t)
	emptyDirHasNone(t, h)
	h.pc.Spec.Hosted.StorageClassName = "standard"
	cl := newCluster("snap")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	c := &snapshotCase{h: h, cl: cl, ns: ns, names: namesFor(ns)}
	c.firstJob(t)
	c.firstListed(t)
	c.second = c.taken("20261126T020000Z")
	t.Run("the next removes the first (keep), with a certificate of its own", c.nextRemovesFirst)
	t.Run("a failed one says why", c.failedSaysWhy)
	// A Cluster whose namespace is gone (envtest deletes none: one whose namespace never was).
	t.Run("Delete removes its Jobs' credentials (and an earlier version's); the snapshots of every Cluster stay", c.deleteRemovesCredentials)
}

// emptyDirHasNone: a control plane on an emptyDir has no snapshots.
func emptyDirHasNone(t *testing.T, h *harness) {
	empty := newCluster("snap-emptydir")
	h.ensure(t, empty)
	_, err := h.b.Snapshot(t.Context(), empty, backend.KeepNewest(3))
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonBackupUnavailable), "%v", err)
	assert.Contains(t, err.Error(), "emptyDir")
}

// taken is a snapshot of the Cluster called name, taken now, as its Job reports it.
func (c *snapshotCase) taken(name string) backend.Snapshot {
	return backend.Snapshot{Name: name, Cluster: c.cl.UID, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Revision: 7, Keys: 3, Version: "1.37.1", SHA256: "ab"}
}

// firstJob: a snapshot starts a Job with the control plane's image, on a claim of the storage
// class, with a certificate of its own (the long-lived one of an earlier version goes), let in by
// etcd's NetworkPolicy; while it runs, Snapshot says SnapshotInProgress.
func (c *snapshotCase) firstJob(t *testing.T) {
	h, ctx, cl, ns, names := c.h, t.Context(), c.cl, c.ns, c.names
	sharedCredential(t, h, ns)
	_, err := h.b.Snapshot(ctx, cl, backend.KeepNewest(3))
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	job := get(t, &batchv1.Job{}, BackupNamespace, names.job)
	assert.Equal(t, int64(snapshotDeadline.Seconds()), *job.Spec.ActiveDeadlineSeconds)
	ctr := job.Spec.Template.Spec.Containers[0]
	assert.Equal(t, image1, ctr.Image, "the control plane's own image runs it")
	assert.Equal(t, []string{"/usr/local/bin/etcd-snapshot"}, ctr.Command)
	assert.Contains(t, ctr.Args, "--keep=3")
	assert.Contains(t, ctr.Args, "--member=etcd-0=https://etcd."+ns+".svc:2379", "its member, which save checks is in the quorum")
	assert.Equal(t, string(cl.UID), job.Spec.Template.Labels[LabelClusterUID])
	assert.Equal(t, ComponentSnapshot, job.Spec.Template.Labels[LabelComponent], "the etcd NetworkPolicy lets these pods in")
	claim := get(t, &corev1.PersistentVolumeClaim{}, BackupNamespace, names.claim)
	assert.Equal(t, "standard", *claim.Spec.StorageClassName)
	assert.Equal(t, "4Gi", ptrTo(claim.Spec.Resources.Requests[corev1.ResourceStorage]).String())
	c.firstCert = jobCert(t, job, "pki", ns, x509.ExtKeyUsageClientAuth)
	assert.Equal(t, snapshotUser, c.firstCert.Subject.CommonName)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, c.firstCert.ExtKeyUsage)
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
	_, err = h.b.Snapshot(ctx, cl, backend.KeepNewest(3))
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "still running: %v", err)
}

// firstListed: once the Job ended (which notifies the Cluster), the snapshot is listed, in its
// ConfigMap too, and the Job goes with its certificate.
func (c *snapshotCase) firstListed(t *testing.T) {
	h, ctx, cl, names := c.h, t.Context(), c.cl, c.names
	c.first = c.taken("20261126T010000Z")
	for len(h.notified) > 0 {
		<-h.notified
	}
	h.endJob(t, names.job, batchv1.JobComplete, snapshotResultOf(t, c.first))
	awaitNotified(t, h, cl) // its end reconciles the Cluster: no one polls while it runs
	got, err := h.b.Snapshot(ctx, cl, backend.KeepNewest(3))
	require.NoError(t, err)
	c.first.Namespace = cl.Namespace // the Job does not know it; the backend records it
	assert.Equal(t, c.first, got)
	require.Eventually(t, func() bool {
		j := &batchv1.Job{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: names.job}, j)
		return apierrors.IsNotFound(err) || j.DeletionTimestamp != nil
	}, 10*time.Second, 20*time.Millisecond, "the Job goes once harvested")
	assertNoSecret(t, names.job, "its certificate goes with it")
	list, err := h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{c.first}, list)
	cm := get(t, &corev1.ConfigMap{}, BackupNamespace, names.catalog)
	assert.Contains(t, cm.Data[catalogKey], c.first.Name, "kubectl get configmap lists it")
}

// nextRemovesFirst: the next snapshot removes the first (keep), with a certificate of its own.
func (c *snapshotCase) nextRemovesFirst(t *testing.T) {
	h, ctx, cl, names := c.h, t.Context(), c.cl, c.names
	forceGone(t, names.job)
	_, err := h.b.Snapshot(ctx, cl, backend.KeepNewest(1))
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	job := get(t, &batchv1.Job{}, BackupNamespace, names.job)
	secondCert := jobCert(t, job, "pki", c.ns, x509.ExtKeyUsageClientAuth)
	assert.NotEqual(t, 0, c.firstCert.SerialNumber.Cmp(secondCert.SerialNumber), "a certificate of its own for the next Job")
	assert.NotEqual(t, c.firstCert.RawSubjectPublicKeyInfo, secondCert.RawSubjectPublicKeyInfo, "and a key of its own")
	h.endJob(t, names.job, batchv1.JobComplete, snapshotResultOf(t, c.second, c.first.Name))
	c.second.Namespace = cl.Namespace
	_, err = h.b.Snapshot(ctx, cl, backend.KeepNewest(1))
	require.NoError(t, err)
	list, err := h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{c.second}, list)
}

// failedSaysWhy: a failed Job is an error in the tool's own words, and changes no list.
func (c *snapshotCase) failedSaysWhy(t *testing.T) {
	h, ctx, cl, names := c.h, t.Context(), c.cl, c.names
	forceGone(t, names.job)
	_, err := h.b.Snapshot(ctx, cl, backend.KeepNewest(1))
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	h.endJob(t, names.job, batchv1.JobFailed, `{"error":"etcdctl snapshot save: exit status 1: context deadline exceeded"}`)
	_, err = h.b.Snapshot(ctx, cl, backend.KeepNewest(1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "context deadline exceeded", "the tool's own words")
	assertNoSecret(t, names.job, "a failed Job's certificate goes with it too")
	list, err := h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{c.second}, list, "a failure changes no list")
}

// deleteRemovesCredentials: Delete of a Cluster whose namespace is gone removes its Jobs'
// credentials (and an earlier version's); the snapshots of every Cluster stay.
func (c *snapshotCase) deleteRemovesCredentials(t *testing.T) {
	ctx := t.Context()
	ghost := newCluster("ghost")
	ghostNames := namesFor(NamespaceFor(ghost.UID))
	creds := []string{ghostNames.shared, ghostNames.job, ghostNames.maintain, serveName(NamespaceFor(ghost.UID))}
	for _, name := range creds {
		require.NoError(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: name}}))
	}
	gone, err := c.h.b.Delete(ctx, ghost)
	require.NoError(t, err)
	assert.True(t, gone)
	for _, name := range creds {
		assertNoSecret(t, name, "the credential goes with its Cluster")
	}
	get(t, &corev1.ConfigMap{}, BackupNamespace, c.names.catalog)
}

// snapshotResultOf is what a snapshot Job that took snap and removed removed writes as its result.
func snapshotResultOf(t *testing.T, snap backend.Snapshot, removed ...string) string {
	t.Helper()
	data, err := json.Marshal(snapshotResult{Snapshot: &snap, Removed: removed})
	require.NoError(t, err)
	return string(data)
}

// selects reports whether sel selects labels.
func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	require.NoError(t, err)
	return s.Matches(labels.Set(l))
}

// endJob finishes Job name of BackupNamespace as Kubernetes would, its pod having written result
// as its termination message, and waits until the backend's cache, which it reads Jobs from, has
// seen it.
func (h *harness) endJob(t *testing.T, name string, cond batchv1.JobConditionType, result string) {
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
	h.cached(t, name)
}

// cached waits until the backend's cache holds Job name of BackupNamespace as it is now.
func (h *harness) cached(t *testing.T, name string) {
	t.Helper()
	live := get(t, &batchv1.Job{}, BackupNamespace, name)
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		seen := &batchv1.Job{}
		if assert.NoError(c, hst.cache.Get(t.Context(), client.ObjectKeyFromObject(live), seen)) {
			assert.Equal(c, live.Status, seen.Status)
		}
	}, 10*time.Second, 20*time.Millisecond, "the backend's cache sees Job %s", name)
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
