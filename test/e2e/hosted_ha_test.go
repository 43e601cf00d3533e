package e2e

import (
	"context"
	"fmt"
	"os/exec"
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
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
)

// TestHostedHAOnKind is the drill of a highly available hosted control plane (issue 32) on the kind
// platform (three workers): three etcd members and two API servers, each on its own node, with the
// PriorityClass; a client polling every 200 ms with an issued kubeconfig sees no failed request
// (1) while one etcd pod and one API server pod are deleted together, and (2) while a worker that
// runs a member and an API server is drained (kubectl drain: evictions under the budgets; the
// member, its volume on that node, waits there until the node is uncordoned). The data written
// before is there after; (3) a snapshot restored in place brings every member back to it. Figures
// of the windows and of the pods' memory.
func TestHostedHAOnKind(t *testing.T) {
	c, kubeconfig, pc := hostedTarget(t)
	ctx := context.Background()
	start := time.Now()
	cl := hostedHACluster(t, c, pc, "hosted-ha-", "ha")
	ready := func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		assert.Equal(ct, common.PhaseReady, cl.Status.Phase, "conditions: %+v", cl.Status.Conditions)
	}
	t.Logf("FIGURE hosted HA create→Ready: %.1f s", time.Since(start).Seconds())
	hns := hosted.NamespaceFor(cl.UID)
	// etcd's first check (a maintenance Job over the three members, TLS with the Jobs' client
	// certificate). The Cluster is Ready with a quorum, so a member may still be starting when it
	// runs and the first report may say it does not answer; once every member is ready it is
	// checked again, and the condition says every member answers.
	start = time.Now()
	first := awaitEtcdHealthy(t, c, cl, false)
	firstAt := time.Since(start)
	msg := awaitEtcdHealthy(t, c, cl, true)
	t.Logf("FIGURE hosted HA etcd's first check (a maintenance Job over three members): EtcdHealthy %.1f s after Ready: %s; every member answers after %.1f s: %s",
		firstAt.Seconds(), first, time.Since(start).Seconds(), msg)

	// Placement: one member and one API server per node, the PriorityClass (never preempting),
	// memory as limited.
	placed := func(ct require.TestingT) (etcd, api []corev1.Pod) {
		pods := &corev1.PodList{}
		require.NoError(ct, c.List(ctx, pods, client.InNamespace(hns)))
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			switch p.Labels[hosted.LabelComponent] {
			case hosted.ComponentEtcd:
				etcd = append(etcd, p)
			case hosted.ComponentAPIServer:
				api = append(api, p)
			}
		}
		return etcd, api
	}
	etcdPods, apiPods := placed(t)
	require.Len(t, etcdPods, 3)
	require.Len(t, apiPods, 2)
	for _, group := range [][]corev1.Pod{etcdPods, apiPods} {
		nodes := map[string]bool{}
		for _, p := range group {
			assert.False(t, nodes[p.Spec.NodeName], "two %s pods on node %s", p.Labels[hosted.LabelComponent], p.Spec.NodeName)
			nodes[p.Spec.NodeName] = true
			assert.Equal(t, hosted.PriorityClassControlPlane, p.Spec.PriorityClassName)
			if assert.NotNil(t, p.Spec.PreemptionPolicy, "set from the PriorityClass at admission") {
				assert.Equal(t, corev1.PreemptNever, *p.Spec.PreemptionPolicy, "never preempts another tenant's pods")
			}
			for _, ctr := range p.Spec.Containers {
				assert.Equal(t, ctr.Resources.Limits.Memory().String(), ctr.Resources.Requests.Memory().String(), "%s/%s", p.Name, ctr.Name)
			}
		}
	}

	admin := hostedAdmin(t, c, cl)
	_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"written": "before the drills"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	user := tokenClient(t, c, cl)

	// healed waits until three members and two API servers run and are ready again, none of olds
	// among them.
	healed := func(olds ...corev1.Pod) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			etcd, api := placed(ct)
			for _, group := range []struct {
				pods []corev1.Pod
				want int
			}{{etcd, 3}, {api, 2}} {
				ready := 0
				for _, p := range group.pods {
					for _, old := range olds {
						assert.NotEqual(ct, old.UID, p.UID, "pod %s replaced", p.Name)
					}
					for _, cond := range p.Status.Conditions {
						if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
							ready++
						}
					}
				}
				assert.Equal(ct, group.want, ready, "ready pods")
			}
		}, 5*time.Minute, poll, "the control plane healed")
		require.EventuallyWithT(t, ready, time.Minute, poll)
	}

	// (1) One etcd member and one API server deleted together.
	polled := startPollers([]kubernetes.Interface{user}, 200*time.Millisecond)
	start = time.Now()
	victims := []corev1.Pod{etcdPods[0], apiPods[0]}
	for i := range victims {
		require.NoError(t, c.Delete(ctx, &victims[i]))
	}
	healed(victims...)
	took := time.Since(start)
	during := summarize(polled.stop())
	t.Logf("FIGURE hosted HA: etcd pod %s and API server pod %s deleted together, healed after %.1f s; a client polling every 200 ms: %s",
		victims[0].Name, victims[1].Name, took.Seconds(), during)
	assert.Empty(t, during.errors, "no failed request while a member and an API server are replaced")

	// (2) A worker with a member and an API server drained, then uncordoned.
	etcdPods, apiPods = placed(t)
	node := apiPods[0].Spec.NodeName
	var onNode []corev1.Pod
	for _, p := range append(etcdPods, apiPods...) {
		if p.Spec.NodeName == node {
			onNode = append(onNode, p)
		}
	}
	require.Len(t, onNode, 2, "node %s runs a member and an API server", node)
	polled = startPollers([]kubernetes.Interface{user}, 200*time.Millisecond)
	start = time.Now()
	uncordoned := false
	t.Cleanup(func() {
		if !uncordoned {
			_, _ = exec.Command("kubectl", "--kubeconfig", kubeconfig, "uncordon", node).CombinedOutput()
		}
	})
	out, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "drain", node,
		"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m").CombinedOutput()
	require.NoError(t, err, "kubectl drain %s: %s", node, out)
	drained := time.Since(start)
	// Drained: the API server runs on another node; the member waits for its node (its volume).
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		dep := &appsv1.Deployment{}
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: hns, Name: hosted.NameAPIServer}, dep))
		assert.Equal(ct, int32(2), dep.Status.AvailableReplicas)
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		assert.Equal(ct, common.PhaseReady, cl.Status.Phase)
	}, 5*time.Minute, poll, "two API servers on the nodes left")
	mid := summarize(polled.stop())
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
	t.Logf("FIGURE hosted HA: node %s drained in %.1f s (a member and an API server evicted); a client polling every 200 ms until two API servers ran elsewhere: %s; the Cluster says: %s",
		node, drained.Seconds(), mid, apiServerMessage(cl))
	assert.Empty(t, mid.errors, "no failed request while a node is drained")

	polled = startPollers([]kubernetes.Interface{user}, 200*time.Millisecond)
	start = time.Now()
	out, err = exec.Command("kubectl", "--kubeconfig", kubeconfig, "uncordon", node).CombinedOutput()
	require.NoError(t, err, "kubectl uncordon %s: %s", node, out)
	uncordoned = true
	healed(onNode...)
	after := summarize(polled.stop())
	t.Logf("FIGURE hosted HA: node %s uncordoned, the member back after %.1f s; a client polling every 200 ms: %s", node, time.Since(start).Seconds(), after)
	assert.Empty(t, after.errors, "no failed request while the member rejoins")

	// Memory, idle, once the kubelets report every pod of the control plane.
	etcdPods, apiPods = placed(t)
	var memTotal float64
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		mem := podMemory(t, kubeconfig)
		memTotal = 0
		for _, p := range append(etcdPods, apiPods...) {
			mib := mem[p.Namespace+"/"+p.Name]
			assert.Positive(ct, mib, "the kubelet reports pod %s", p.Name)
			memTotal += mib
		}
	}, 2*time.Minute, poll, "the kubelets report the control plane's pods")
	t.Logf("FIGURE hosted HA memory (working set) of the idle control plane (3 etcd members, 2 API servers with controller managers): %.0f MiB", memTotal)

	kept, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	require.NoError(t, err, "the data written before the drills")
	assert.Equal(t, "before the drills", kept.Data["written"])
	_, err = user.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err, "the kubeconfig issued before the drills works")

	// (3) A restore in place restores all three members together.
	annotate := func(key, value string) {
		out, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "-n", cl.Namespace, "annotate", "cluster", cl.Name, key+"="+value, "--overwrite").CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	annotate(backend.AnnotationSnapshot, "now")
	snap := awaitBackups(t, c, cl, 1)[0]
	_, err = admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-the-snapshot"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	etcdPods, _ = placed(t)
	start = time.Now()
	annotate(backend.AnnotationRestore, snap.Name)
	awaitCondition(t, c, cl, cluster.ConditionRestored, cluster.ReasonRestoreDone)
	healed(etcdPods...)
	t.Logf("FIGURE hosted HA restore in place (three members): Ready %.1f s after kubectl annotate", time.Since(start).Seconds())
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
		assert.NoError(ct, err, "before the snapshot: there")
		_, err = admin.CoreV1().ConfigMaps("default").Get(ctx, "after-the-snapshot", metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "after the snapshot: gone: %v", err)
	}, 2*time.Minute, poll, "the snapshot's data on every member")
}

// awaitEtcdHealthy waits for cl's EtcdHealthy condition to be True after a maintenance Job
// checked its etcd, and returns its message; with all, for a report in which every member answered.
func awaitEtcdHealthy(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster, all bool) string {
	t.Helper()
	var msg string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cur := &clustersv1alpha1.Cluster{}
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(cl), cur))
		cond := meta.FindStatusCondition(cur.Status.Conditions, cluster.ConditionEtcdHealthy)
		if assert.NotNil(ct, cond, "conditions: %+v", cur.Status.Conditions) {
			assert.Equal(ct, metav1.ConditionTrue, cond.Status, "%s: %s", cond.Reason, cond.Message)
			assert.Contains(ct, cond.Message, "etcd takes writes")
			if all {
				assert.NotContains(ct, cond.Message, "does not answer")
			}
			msg = cond.Message
		}
	}, 3*time.Minute, poll, "etcd checked by a maintenance Job")
	return msg
}

// apiServerMessage is the message of cl's APIServerReady condition.
func apiServerMessage(cl *clustersv1alpha1.Cluster) string {
	if c := meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionAPIServerReady); c != nil {
		return fmt.Sprintf("%q (%s)", c.Message, c.Reason)
	}
	return "no APIServerReady condition"
}

// hostedHACluster makes a highly available hosted Cluster name in a new profile and namespace
// (prefix) of pc, deleted with its snapshots at the end of t, and waits until it is Ready.
func hostedHACluster(t *testing.T, c client.Client, pc *providersv1alpha1.ProviderConfig, prefix, name string) *clustersv1alpha1.Cluster {
	t.Helper()
	pc = pc.DeepCopy()
	pc.Spec.Hosted.HighAvailability = true
	return readyHostedCluster(t, c, pc, prefix, name)
}

// readyHostedCluster makes a hosted Cluster name in a new profile and namespace (prefix) of pc,
// deleted with its snapshots at the end of t, and waits until it is Ready.
func readyHostedCluster(t *testing.T, c client.Client, pc *providersv1alpha1.ProviderConfig, prefix, name string) *clustersv1alpha1.Cluster {
	t.Helper()
	ctx := context.Background()
	profile, ns := hostedProfile(t, c, pc.DeepCopy(), prefix)
	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyExclusive},
	}
	require.NoError(t, c.Create(ctx, cl))
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), cl)
		hostedGone(t, c, cl.UID)
		dropSnapshots(c, cl)
	})
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		assert.Equal(ct, common.PhaseReady, cl.Status.Phase, "conditions: %+v", cl.Status.Conditions)
	}, 6*time.Minute, poll, "Cluster %s is Ready", name)
	return cl
}
