package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestHostedBackupOnKind: snapshots of a hosted control plane on the kind platform (issue 32): the
// first is taken once the Cluster serves, another on demand (kubectl annotate), each by a Job of
// the control-plane image onto a claim in namespace cluster-provider-backups, checked by etcdutl,
// listed in the Cluster's status and in a ConfigMap (kubectl get), the oldest beyond keep removed;
// they outlive the Cluster, whose snapshot credential goes with it.
func TestHostedBackupOnKind(t *testing.T) {
	t.Parallel() // its own Cluster only: beside the others (doc.go)
	c, kubeconfig, pc := hostedTarget(t)
	ctx := context.Background()
	pc = pc.DeepCopy()
	pc.Spec.Backup = &providersv1alpha1.BackupPolicy{Keep: 2}
	profile, ns := hostedProfile(t, c, pc, "hosted-backup-")
	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "backed-up"},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyExclusive},
	}
	require.NoError(t, c.Create(ctx, cl))
	gone := false
	t.Cleanup(func() {
		if !gone {
			_ = c.Delete(context.Background(), cl)
			hostedGone(t, c, cl.UID)
		}
		dropSnapshots(c, cl)
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		assert.Equal(ct, common.PhaseReady, cl.Status.Phase)
	}, 5*time.Minute, poll, "Ready")
	admin := hostedAdmin(t, c, cl)
	_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"written": "before the snapshots"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Logf("etcd checked: %s", awaitEtcdHealthy(t, c, cl, false))
	checkPolicies(t, c, cl)
	checkSealed(t, c, kubeconfig, cl)
	checkExposure(t, c, cl, pc.Name)

	start := time.Now()
	first := awaitBackups(t, c, cl, 1)[0]
	t.Logf("FIGURE hosted snapshot (a Job of the control-plane image onto its claim), the first after Ready: listed %.1f s after the Cluster was Ready at the latest, %d bytes", time.Since(start).Seconds(), first.Size)

	// On demand, twice: keep 2 removes the first.
	for i := range 2 {
		start = time.Now()
		out, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "-n", ns, "annotate", "cluster", cl.Name, backend.AnnotationSnapshot+"=now", "--overwrite").CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			cur := &clustersv1alpha1.Cluster{}
			require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cur))
			_, asked := cur.Annotations[backend.AnnotationSnapshot]
			assert.False(ct, asked, "the annotation goes once the snapshot is taken")
			got := backupsOf(ct, cur)
			if assert.NotEmpty(ct, got) {
				assert.True(ct, got[0].Taken.After(start.Add(-time.Second)), "a new snapshot: %+v", got)
			}
		}, 3*time.Minute, poll, "snapshot %d on demand", i+1)
		t.Logf("FIGURE hosted snapshot on demand %d: listed %.1f s after kubectl annotate", i+1, time.Since(start).Seconds())
	}
	kept := awaitBackups(t, c, cl, 2)
	for _, s := range kept {
		assert.NotEqual(t, first.Name, s.Name, "the oldest beyond keep 2 is removed")
	}

	// kubectl get lists them in the ConfigMap; the claim holds them.
	names := "snapshots-" + hosted.NamespaceFor(cl.UID)
	out, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "-n", hosted.BackupNamespace, "get", "configmap", names, "-o", "jsonpath={.data.snapshots\\.json}").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var listedThere []backend.Snapshot
	require.NoError(t, json.Unmarshal(out, &listedThere))
	require.Len(t, listedThere, 2)
	for _, s := range listedThere {
		assert.Len(t, s.SHA256, 64, "checked and recorded: %+v", s)
		assert.Positive(t, s.Revision)
		assert.Equal(t, cl.UID, s.Cluster)
	}
	claim := &corev1.PersistentVolumeClaim{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: hosted.BackupNamespace, Name: names}, claim))
	assert.Equal(t, corev1.ClaimBound, claim.Status.Phase)

	// The snapshots outlive the Cluster; its snapshot credential does not.
	require.NoError(t, c.Delete(ctx, cl))
	hostedGone(t, c, cl.UID)
	gone = true
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: hosted.BackupNamespace, Name: names}, &corev1.ConfigMap{}), "the list stays")
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: hosted.BackupNamespace, Name: names}, &corev1.PersistentVolumeClaim{}), "the claim stays")
	for _, name := range []string{"snapshot-", "maintain-", "etcd-client-"} {
		require.Eventually(t, func() bool {
			err := c.Get(ctx, client.ObjectKey{Namespace: hosted.BackupNamespace, Name: name + hosted.NamespaceFor(cl.UID)}, &corev1.Secret{})
			return apierrors.IsNotFound(err)
		}, time.Minute, poll, "the etcd certificates of the Cluster's Jobs (%s…) go with the Cluster", name)
	}
}

// TestHostedRestoreDrill is the restore drill of a hosted control plane on the kind platform
// (issue 32): data written, a snapshot on demand, more data; etcd's data destroyed (its claim and
// pod deleted: the StatefulSet makes a new, empty one); a restore of a snapshot that does not
// exist is refused; the restore (kubectl annotate) brings back what was written before the
// snapshot and not after, on the same endpoint, and the kubeconfig issued before works again; a
// watch from a resourceVersion handed out before the restore ends in 410 Gone; a new Cluster
// made from the snapshot has the data too.
func TestHostedRestoreDrill(t *testing.T) {
	t.Parallel() // its own Cluster only: beside the others (doc.go)
	c, kubeconfig, pc := hostedTarget(t)
	ctx := context.Background()
	profile, ns := hostedProfile(t, c, pc.DeepCopy(), "hosted-restore-")
	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "restored"},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyExclusive},
	}
	require.NoError(t, c.Create(ctx, cl))
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), cl)
		hostedGone(t, c, cl.UID)
		dropSnapshots(c, cl)
	})
	ready := func(cl *clustersv1alpha1.Cluster) func(ct *assert.CollectT) {
		return func(ct *assert.CollectT) {
			require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
			assert.Equal(ct, common.PhaseReady, cl.Status.Phase)
		}
	}
	require.EventuallyWithT(t, ready(cl), 5*time.Minute, poll, "Ready")
	endpoint := cl.Status.APIServer
	admin := hostedAdmin(t, c, cl)
	write := func(name string) {
		_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	write("before")
	user := tokenClient(t, c, cl)

	annotate := func(key, value string) {
		out, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "-n", ns, "annotate", "cluster", cl.Name, key+"="+value, "--overwrite").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	annotate(backend.AnnotationSnapshot, "now")
	snap := awaitBackups(t, c, cl, 1)[0]
	write("after")

	// etcd's data destroyed: its claim and its pod deleted.
	hns := hosted.NamespaceFor(cl.UID)
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: hns, Name: "data-etcd-0"}}
	require.NoError(t, c.Delete(ctx, claim))
	require.NoError(t, c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: hns, Name: "etcd-0"}}))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		require.NoError(ct, err, "the API answers again, on an empty etcd (which has not even namespace default)")
		_, err = admin.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "the data is gone: %v", err)
	}, 5*time.Minute, poll, "etcd's data destroyed")
	_, err := user.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.Error(t, err, "the kubeconfig issued before does not work on the empty etcd (its ServiceAccount is gone)")

	// A snapshot that does not exist is refused; nothing changes.
	annotate(backend.AnnotationRestore, "20200101T000000Z")
	cond := awaitCondition(t, c, cl, cluster.ConditionRestored, backend.ReasonRestoreRefused)
	assert.Contains(t, cond.Message, "there is no snapshot")

	// A client lists (and would watch) the data etcd has before the restore, past the snapshot's
	// revision.
	seen := testenv.SeenBeforeRestore(t, admin, snap.Revision)
	start := time.Now()
	annotate(backend.AnnotationRestore, snap.Name)
	cond = awaitCondition(t, c, cl, cluster.ConditionRestored, cluster.ReasonRestoreDone)
	require.EventuallyWithT(t, ready(cl), 5*time.Minute, poll, "Ready after the restore")
	took := time.Since(start)
	t.Logf("FIGURE hosted restore in place of a %d-byte snapshot: Ready %.1f s after kubectl annotate; %s", snap.Size, took.Seconds(), cond.Message)
	assert.Equal(t, endpoint, cl.Status.APIServer, "the same endpoint")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		assert.NoError(ct, err, "written before the snapshot: back")
		_, err = admin.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "written after the snapshot: not there: %v", err)
		_, err = user.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		assert.NoError(ct, err, "the kubeconfig issued before the snapshot works again")
	}, 2*time.Minute, poll, "the snapshot's data, through the same kubeconfigs")
	t.Run("a watch from before the restore ends in 410 Gone", func(t *testing.T) { testenv.WatchFromBeforeRestoreGone(t, admin, seen) })

	// A new Cluster from the snapshot.
	copyOf := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "copy", Annotations: map[string]string{backend.AnnotationRestoreFrom: string(cl.UID) + "/" + snap.Name}},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyExclusive},
	}
	start = time.Now()
	require.NoError(t, c.Create(ctx, copyOf))
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), copyOf)
		hostedGone(t, c, copyOf.UID)
	})
	require.EventuallyWithT(t, ready(copyOf), 5*time.Minute, poll, "the copy is Ready")
	t.Logf("FIGURE hosted Cluster made from a snapshot: Ready %.1f s after it was created", time.Since(start).Seconds())
	copyAdmin := hostedAdmin(t, c, copyOf)
	_, err = copyAdmin.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
	require.NoError(t, err, "the copy has the snapshot's data")
}

// dropSnapshots deletes the snapshots of cl (they outlive it), for the test's own tidiness.
func dropSnapshots(c client.Client, cl *clustersv1alpha1.Cluster) {
	for _, obj := range []client.Object{&corev1.PersistentVolumeClaim{}, &corev1.ConfigMap{}} {
		_ = c.DeleteAllOf(context.Background(), obj, client.InNamespace(hosted.BackupNamespace),
			client.MatchingLabels{hosted.LabelClusterUID: string(cl.UID)})
	}
}
