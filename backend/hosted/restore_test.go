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
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// restoreCase is what the steps of TestRestoreSteps share: the backend, the Cluster, its control
// plane's namespace, its host and Spec, its snapshot and a later one, the name and Job of its
// serve, and a new Cluster made from a snapshot.
type restoreCase struct {
	h           *harness
	cl          *clustersv1alpha1.Cluster
	ns          string
	hst         *host
	s           *Spec
	snap, later backend.Snapshot
	name        string
	job         *batchv1.Job
	copyOf      *clustersv1alpha1.Cluster
}

// TestRestoreSteps: a restore names a snapshot of the Cluster's own list (others are refused,
// nothing changed); it is recorded and starts with a serve of the snapshot in BackupNamespace
// (its Service, its token in both namespaces, a certificate made for its Job, etcd's
// NetworkPolicy lets etcd reach it); a serve that refuses the snapshot (envtest runs no pod: the
// test ends the Job as Kubernetes would) ends the restore with Restored.Failed, nothing changed
// and the serve gone, its certificate with it. A new Cluster whose restore-from names no snapshot
// is refused before anything is made.
func TestRestoreSteps(t *testing.T) {
	c := startRestore(t)
	c.othersRefused(t)
	c.restoreStartsServe(t)
	t.Run("a serve that refuses the snapshot ends the restore, nothing changed", c.refusedServeEnds)

	// New Clusters made from a snapshot (backend.AnnotationRestoreFrom).
	c.copyOf = newCluster("copy")
	t.Run("from a snapshot that does not exist: refused, nothing made", c.fromMissingSnapshot)
	t.Run("from a snapshot of a Cluster of another namespace: not found, no name listed, its keys not adopted, nothing made", c.fromForeignNamespace)
	// Its etcd restores it from its first pod, and its API server reads with the keys kept beside
	// the snapshots (as a snapshot Job's start keeps them).
	t.Run("from a snapshot that exists", c.fromExistingSnapshot)
}

// startRestore starts a backend and a Cluster on storage class "standard" whose etcd is up, with
// one snapshot listed, as a snapshot Job's end would list it.
func startRestore(t *testing.T) *restoreCase {
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
	return &restoreCase{h: h, cl: cl, ns: ns, hst: hst, s: s, snap: snap}
}

// othersRefused: a snapshot not in the Cluster's list, a name that is none and a snapshot of a
// later version are refused.
func (c *restoreCase) othersRefused(t *testing.T) {
	h, ctx, cl := c.h, t.Context(), c.cl
	for _, tc := range []struct{ name, says string }{
		{"20261126T000000Z", `there is no snapshot "20261126T000000Z"`},
		{"../etc", "is not a snapshot name"},
	} {
		_, err := h.b.CheckRestore(ctx, cl, tc.name)
		require.Error(t, err)
		assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
		assert.Contains(t, err.Error(), tc.says)
	}
	c.later = c.snap
	c.later.Name, c.later.Version = "20261126T020000Z", "1.38.0"
	require.NoError(t, updateCatalog(ctx, c.hst, c.s, c.later, nil))
	_, err := h.b.CheckRestore(ctx, cl, c.later.Name)
	assert.ErrorContains(t, err, "a later version than the cluster's 1.37.1")
}

// restoreStartsServe: a restore of a listed snapshot is recorded and starts with a serve of the
// snapshot (its Service, its token in both namespaces, a certificate made for its Job, etcd's
// NetworkPolicy lets etcd reach it); etcd is left as it is meanwhile.
func (c *restoreCase) restoreStartsServe(t *testing.T) {
	h, ctx, cl, ns, snap := c.h, t.Context(), c.cl, c.ns, c.snap
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
	c.name, c.job = name, job
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
}

// refusedServeEnds: a serve that refuses the snapshot ends the restore with Restored.Failed,
// nothing changed and the serve gone, its certificate and token with it.
func (c *restoreCase) refusedServeEnds(t *testing.T) {
	h, ctx, cl, ns, name, job := c.h, t.Context(), c.cl, c.ns, c.name, c.job
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
	h.cached(t, name)
	st := h.ensure(t, cl)
	require.NotNil(t, st.Restored)
	assert.Contains(t, st.Restored.Failed, "is damaged")
	assert.Contains(t, st.Restored.Failed, "nothing changed")
	assert.NotEqual(t, backend.ReasonRestoring, st.Reason)
	rec := record(t, cl)
	assert.Nil(t, rec.Restore)
	assert.Empty(t, rec.EtcdDataDir, "etcd keeps its data folder")
	err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: SecretRestoreToken}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "the token goes with the serve: %v", err)
	assertNoSecret(t, name, "the serve's certificate and token go with it")
	assert.Empty(t, get(t, &appsv1.StatefulSet{}, ns, NameEtcd).Spec.Template.Spec.InitContainers)
}

// fromMissingSnapshot: a new Cluster from a snapshot that does not exist is refused, nothing made.
func (c *restoreCase) fromMissingSnapshot(t *testing.T) {
	ctx, copyOf := t.Context(), c.copyOf
	copyOf.Annotations = map[string]string{backend.AnnotationRestoreFrom: string(c.cl.UID) + "/20261126T030000Z"}
	_, err := c.h.b.Ensure(ctx, copyOf, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	err = env.Client.Get(ctx, client.ObjectKey{Name: NamespaceFor(copyOf.UID)}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "nothing made: %v", err)
}

// fromForeignNamespace: a new Cluster from a snapshot of a Cluster of another namespace is not
// found, no name listed, its keys not adopted, nothing made.
func (c *restoreCase) fromForeignNamespace(t *testing.T) {
	ctx := t.Context()
	foreign := newCluster("foreign")
	foreign.Namespace = "team-b"
	foreign.Annotations = map[string]string{backend.AnnotationRestoreFrom: c.snap.Ref()}
	_, err := c.h.b.Ensure(ctx, foreign, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	assert.Contains(t, err.Error(), "(it has none for a Cluster of namespace team-b)")
	assert.NotContains(t, err.Error(), c.later.Name)
	err = env.Client.Get(ctx, client.ObjectKey{Name: NamespaceFor(foreign.UID)}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "nothing made: %v", err)
}

// fromExistingSnapshot: a new Cluster from a snapshot that exists: its etcd restores it from its
// first pod, its API server reads with the keys kept beside the snapshots, and its serve having
// served the new etcd before the backend saw it ready is no failure.
func (c *restoreCase) fromExistingSnapshot(t *testing.T) {
	h, ctx, ns, snap, copyOf := c.h, t.Context(), c.ns, c.snap, c.copyOf
	_, err := h.b.keepKeys(ctx, c.hst, c.s)
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
	now := metav1.Now()
	cjob.Status.StartTime, cjob.Status.CompletionTime, cjob.Status.Succeeded = &now, &now, 1
	cjob.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	require.NoError(t, env.Client.Status().Update(ctx, cjob))
	h.cached(t, cjob.Name)
	st := h.ensure(t, copyOf)
	assert.Nil(t, st.Restored, "no failure: %+v", st.Restored)
	assert.Equal(t, restoreEtcd, record(t, copyOf).Restore.Phase, "on to etcd's pods")
}
