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
)

// TestHostedBackupOnKind: snapshots of a hosted control plane on the kind platform (issue 32): the
// first is taken once the Cluster serves, another on demand (kubectl annotate), each by a Job of
// the control-plane image onto a claim in namespace cluster-provider-backups, checked by etcdutl,
// listed in the Cluster's status and in a ConfigMap (kubectl get), the oldest beyond keep removed;
// they outlive the Cluster, whose snapshot credential goes with it.
func TestHostedBackupOnKind(t *testing.T) {
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
		_ = c.DeleteAllOf(context.Background(), &corev1.PersistentVolumeClaim{}, client.InNamespace(hosted.BackupNamespace),
			client.MatchingLabels{hosted.LabelClusterUID: string(cl.UID)})
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		assert.Equal(ct, common.PhaseReady, cl.Status.Phase)
	}, 5*time.Minute, poll, "Ready")
	admin := hostedAdmin(t, c, cl)
	_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"written": "before the snapshots"}}, metav1.CreateOptions{})
	require.NoError(t, err)

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
	require.Eventually(t, func() bool {
		err := c.Get(ctx, client.ObjectKey{Namespace: hosted.BackupNamespace, Name: "etcd-client-" + hosted.NamespaceFor(cl.UID)}, &corev1.Secret{})
		return apierrors.IsNotFound(err)
	}, time.Minute, poll, "the snapshot Jobs' etcd certificate goes with the Cluster")
}
