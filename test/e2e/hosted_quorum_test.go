package e2e

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
)

// TestHostedQuorumLossOnKind is the drill of a highly available hosted control plane that loses
// its etcd quorum (issue 42, point 3) on the kind platform: Ready and EtcdHealthy True; two of the
// three etcd members made gone (their nodes cordoned, their pods deleted: each waits, Pending,
// for its node, where its volume is); within a minute EtcdHealthy is False, EtcdQuorumLost,
// naming both, and the member left is not ready (its readiness check needs a leader: it has
// none); the nodes uncordoned, the members come back and EtcdHealthy is True again, the Cluster
// Ready. Figures: how soon the condition followed each way.
func TestHostedQuorumLossOnKind(t *testing.T) {
	c, kubeconfig, pc := hostedTarget(t)
	ctx := context.Background()
	cl := hostedHACluster(t, c, pc, "hosted-quorum-", "quorum")
	etcdHealthy := awaitEtcdCondition(t, c, cl, metav1.ConditionTrue, backend.ReasonRunning, 3*time.Minute, "all 3 etcd members are ready")
	t.Logf("EtcdHealthy: %s", etcdHealthy.Message)

	hns := hosted.NamespaceFor(cl.UID)
	members := &corev1.PodList{}
	require.NoError(t, c.List(ctx, members, client.InNamespace(hns), client.MatchingLabels{hosted.LabelComponent: hosted.ComponentEtcd}))
	require.Len(t, members.Items, 3)
	slices.SortFunc(members.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	gone, left := members.Items[1:], members.Items[0]

	// Two members gone: their nodes cordoned (undone at the end, or by the cleanup), their pods deleted.
	kubectl := func(args ...string) {
		t.Helper()
		out, err := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig}, args...)...).CombinedOutput()
		require.NoError(t, err, "kubectl %v: %s", args, out)
	}
	cordoned := map[string]bool{}
	t.Cleanup(func() {
		for node, still := range cordoned {
			if still {
				_, _ = exec.Command("kubectl", "--kubeconfig", kubeconfig, "uncordon", node).CombinedOutput()
			}
		}
	})
	for _, p := range gone {
		require.NotEqual(t, left.Spec.NodeName, p.Spec.NodeName, "one member per node")
		kubectl("cordon", p.Spec.NodeName)
		cordoned[p.Spec.NodeName] = true
	}
	start := time.Now()
	for i := range gone {
		require.NoError(t, c.Delete(ctx, &gone[i]))
	}
	lost := awaitEtcdCondition(t, c, cl, metav1.ConditionFalse, backend.ReasonEtcdQuorumLost, time.Minute, gone[0].Name+" (", gone[1].Name+" (", "quorum lost")
	lostAfter := time.Since(start)
	t.Logf("FIGURE hosted HA quorum lost (two of three etcd members' nodes cordoned, their pods deleted): EtcdHealthy False %.1f s after: %s",
		lostAfter.Seconds(), lost.Message)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		p := &corev1.Pod{}
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(&left), p))
		assert.False(ct, podIsReady(p), "the member left has no leader: not ready")
	}, time.Minute, poll, "member %s, alone, is not ready (its readiness check is linearizable)", left.Name)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		assert.NotEqual(ct, common.PhaseReady, cl.Status.Phase, "no quorum: not Ready")
	}, time.Minute, poll, "the Cluster without a quorum is not Ready")

	// Undone: the nodes uncordoned, the members start on them again (their volumes), the quorum is back.
	start = time.Now()
	for node := range cordoned {
		kubectl("uncordon", node)
		cordoned[node] = false
	}
	back := awaitEtcdCondition(t, c, cl, metav1.ConditionTrue, backend.ReasonRunning, 5*time.Minute, "all 3 etcd members are ready")
	t.Logf("FIGURE hosted HA quorum back (nodes uncordoned): EtcdHealthy True %.1f s after: %s", time.Since(start).Seconds(), back.Message)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		assert.Equal(ct, common.PhaseReady, cl.Status.Phase, "conditions: %+v", cl.Status.Conditions)
	}, 3*time.Minute, poll, "the Cluster is Ready again")
}

// awaitEtcdCondition waits, within d, for cl's EtcdHealthy condition to have status and reason
// and a message with each of msg, and returns it.
func awaitEtcdCondition(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster, status metav1.ConditionStatus, reason string,
	d time.Duration, msg ...string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cur := &clustersv1alpha1.Cluster{}
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(cl), cur))
		cond := meta.FindStatusCondition(cur.Status.Conditions, cluster.ConditionEtcdHealthy)
		require.NotNil(ct, cond, "conditions: %+v", cur.Status.Conditions)
		assert.Equal(ct, status, cond.Status, "%s: %s", cond.Reason, cond.Message)
		assert.Equal(ct, reason, cond.Reason, "%s", cond.Message)
		for _, m := range msg {
			assert.Contains(ct, cond.Message, m)
		}
		got = *cond
	}, d, poll, "EtcdHealthy %s (%s)", status, reason)
	return got
}

// podIsReady reports whether p's Ready condition is True.
func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
