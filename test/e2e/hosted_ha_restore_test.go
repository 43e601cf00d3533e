package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestHostedHARestoreCordonedOnKind is the all-or-nothing drill of a highly available restore
// (issue 42) on the kind platform: an HA hosted Cluster, data, a snapshot, more data; one etcd
// member's node cordoned and that member's pod deleted (its volume is bound to that node: it
// cannot start anywhere); the restore. The Cluster says Restoring, naming the member not done,
// its API servers stay at zero replicas and no request is answered (never a mix of old and
// restored members); on uncordon the restore completes, the data is the snapshot's, a watch from
// before the restore ends in 410 Gone, and writes after the restore stay, also after a member is
// replaced (the restored members are one new etcd cluster that no old member joins).
func TestHostedHARestoreCordonedOnKind(t *testing.T) {
	c, kubeconfig, pc := hostedTarget(t)
	ctx := context.Background()
	cl := hostedHACluster(t, c, pc, "hosted-ha-restore-", "ha-restore")
	ready := func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		assert.Equal(ct, common.PhaseReady, cl.Status.Phase, "conditions: %+v", cl.Status.Conditions)
	}
	hns := hosted.NamespaceFor(cl.UID)
	admin := hostedAdmin(t, c, cl)
	write := func(name string) {
		t.Helper()
		_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	write("before")
	annotate := func(key, value string) {
		out, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "-n", cl.Namespace, "annotate", "cluster", cl.Name, key+"="+value, "--overwrite").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	annotate(backend.AnnotationSnapshot, "now")
	snap := awaitBackups(t, c, cl, 1)[0]
	write("after")
	seen := testenv.SeenBeforeRestore(t, admin, snap.Revision)

	// One member's node cordoned, the member's pod deleted: it cannot start anywhere. Not the
	// node of the snapshots' claim (node-bound): the restore's serve must start there, and a
	// restore whose serve cannot start is another drill (docs/backups.md).
	claim := &corev1.PersistentVolumeClaim{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: hosted.BackupNamespace, Name: "snapshots-" + hns}, claim))
	claimNode := volumeNode(t, c, claim.Spec.VolumeName)
	member := &corev1.Pod{}
	for i := 2; i >= 0; i-- {
		require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: hns, Name: fmt.Sprintf("%s-%d", hosted.NameEtcd, i)}, member))
		if member.Spec.NodeName != claimNode {
			break
		}
	}
	require.NotEqual(t, claimNode, member.Spec.NodeName, "a member away from the snapshots' claim on %s", claimNode)
	node := member.Spec.NodeName
	kubectl := func(args ...string) {
		t.Helper()
		out, err := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
	}
	uncordoned := false
	t.Cleanup(func() {
		if !uncordoned {
			_, _ = exec.Command("kubectl", "--kubeconfig", kubeconfig, "uncordon", node).CombinedOutput()
		}
	})
	kubectl("cordon", node)
	require.NoError(t, c.Delete(ctx, member))

	start := time.Now()
	annotate(backend.AnnotationRestore, snap.Name)
	restoring(t, c, cl, member.Name)
	t.Logf("FIGURE hosted HA restore with member %s's node %s cordoned: Restoring, the API servers at zero, after %.1f s", member.Name, node, time.Since(start).Seconds())
	neverAnswers(t, c, admin, cl, 30*time.Second)

	kubectl("uncordon", node)
	uncordoned = true
	start = time.Now()
	awaitCondition(t, c, cl, cluster.ConditionRestored, cluster.ReasonRestoreDone)
	require.EventuallyWithT(t, ready, 6*time.Minute, poll, "Ready after the restore")
	t.Logf("FIGURE hosted HA restore: done %.1f s after the node was uncordoned", time.Since(start).Seconds())
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		assert.NoError(ct, err, "before the snapshot: there")
		_, err = admin.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "after the snapshot: gone: %v", err)
	}, 2*time.Minute, poll, "the snapshot's data")
	t.Run("a watch from before the restore ends in 410 Gone", func(t *testing.T) { testenv.WatchFromBeforeRestoreGone(t, admin, seen) })

	// Writes after the restore stay, also once a member is replaced.
	write("post-restore")
	etcdReady(t, c, hns)
	require.NoError(t, c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: hns, Name: hosted.NameEtcd + "-0"}}))
	etcdReady(t, c, hns)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "post-restore", metav1.GetOptions{})
		assert.NoError(ct, err, "written after the restore: stays")
		_, err = admin.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "after the snapshot: still gone: %v", err)
	}, 2*time.Minute, poll, "writes after the restore stay")
}

// restoring waits until cl's condition Restored says Restoring and names member as not done, the
// Cluster not Ready and its API servers' Deployment at zero replicas, none left.
func restoring(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster, member string) {
	t.Helper()
	hns := hosted.NamespaceFor(cl.UID)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cur := &clustersv1alpha1.Cluster{}
		require.NoError(ct, c.Get(t.Context(), client.ObjectKeyFromObject(cl), cur))
		cond := meta.FindStatusCondition(cur.Status.Conditions, cluster.ConditionRestored)
		require.NotNil(ct, cond)
		assert.Equal(ct, backend.ReasonRestoring, cond.Reason, cond.Message)
		assert.Contains(ct, cond.Message, member+" (", "names the member not done")
		assert.NotEqual(ct, common.PhaseReady, cur.Status.Phase)
		dep := &appsv1.Deployment{}
		require.NoError(ct, c.Get(t.Context(), client.ObjectKey{Namespace: hns, Name: hosted.NameAPIServer}, dep))
		if assert.NotNil(ct, dep.Spec.Replicas) {
			assert.Zero(ct, *dep.Spec.Replicas, "the API servers are stopped")
		}
		pods := &corev1.PodList{}
		require.NoError(ct, c.List(t.Context(), pods, client.InNamespace(hns), client.MatchingLabels{hosted.LabelComponent: hosted.ComponentAPIServer}))
		assert.Empty(ct, pods.Items, "no API server left")
	}, 5*time.Minute, poll, "the Cluster says Restoring, naming %s", member)
}

// neverAnswers checks, over window, that the Cluster stays Restoring with its API servers at zero
// and that no request of admin is answered: a restore that cannot finish serves nothing, never a
// mix of old and restored data.
func neverAnswers(t *testing.T, c client.Client, admin kubernetes.Interface, cl *clustersv1alpha1.Cluster, window time.Duration) {
	t.Helper()
	ctx := t.Context()
	end := time.Now().Add(window)
	for n := 0; time.Now().Before(end); n++ {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := admin.CoreV1().ConfigMaps("default").Get(rctx, "before", metav1.GetOptions{})
		cancel()
		require.Error(t, err, "request %d answered while the restore cannot finish", n)
		cur := &clustersv1alpha1.Cluster{}
		require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cl), cur))
		cond := meta.FindStatusCondition(cur.Status.Conditions, cluster.ConditionRestored)
		require.NotNil(t, cond)
		require.Equal(t, backend.ReasonRestoring, cond.Reason, "still restoring, never reverted: %s", cond.Message)
		<-time.After(time.Second) // the pace of the checks, not a wait for anything
	}
}

// etcdReady waits until the three etcd members of the control plane in hns run, ready.
func etcdReady(t *testing.T, c client.Client, hns string) {
	t.Helper()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		for i := range 3 {
			p := &corev1.Pod{}
			name := fmt.Sprintf("%s-%d", hosted.NameEtcd, i)
			if !assert.NoError(ct, c.Get(t.Context(), client.ObjectKey{Namespace: hns, Name: name}, p)) {
				continue
			}
			assert.Nil(ct, p.DeletionTimestamp, "%s is not terminating", name)
			isReady := false
			for _, cond := range p.Status.Conditions {
				isReady = isReady || (cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue)
			}
			assert.True(ct, isReady, "%s is ready", name)
		}
	}, 5*time.Minute, poll, "every etcd member is ready")
}
