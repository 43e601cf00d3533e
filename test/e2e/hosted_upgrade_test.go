package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestHostedUpgradeOnKind upgrades a hosted control plane in place on the kind platform (issue 31):
// a Cluster made at the previous minor (control-plane image E2E_CONTROLPLANE_PREV_IMAGE), etcd on
// a claim, with data and a token AccessRequest, moved to the current minor by
// spec.kubernetes.version while a client polls it every 200 ms with the kubeconfig issued before:
// the Cluster says Upgrading, then runs the new version (label, condition, /version), the data and
// the kubeconfig still work; then a downgrade is refused and the cluster keeps serving. Its pods
// are watched throughout (orderWatch): no controller manager on the new image while an etcd or API
// server pod runs the old one, and the Cluster's version moves only once every pod runs the new
// image.
func TestHostedUpgradeOnKind(t *testing.T) {
	t.Parallel() // its own Cluster only: beside the others (doc.go)
	c, _, pc := hostedTarget(t)
	prevImage := os.Getenv("E2E_CONTROLPLANE_PREV_IMAGE")
	if prevImage == "" {
		testenv.MissingTool(t, "the previous minor's control-plane image (E2E_CONTROLPLANE_PREV_IMAGE, set by make e2e-kind)", os.ErrNotExist)
	}
	ctx := context.Background()
	versionOf := func(image string) string { return strings.TrimPrefix(image[strings.LastIndex(image, ":")+1:], "v") }
	prev, cur := versionOf(prevImage), versionOf(os.Getenv("E2E_CONTROLPLANE_IMAGE"))
	pc = pc.DeepCopy()
	pc.Spec.Hosted.Images[prev] = prevImage
	profile, ns := hostedProfile(t, c, pc, "hosted-upgrade-")

	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "upgraded"},
		Spec: clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyExclusive,
			Kubernetes: clustersv1alpha1.K8sConfiguration{Version: prev}},
	}
	require.NoError(t, c.Create(ctx, cl))
	t.Cleanup(func() {
		_ = c.Delete(context.Background(), cl)
		hostedGone(t, c, cl.UID)
	})
	runs := func(version string) func(ct *assert.CollectT) {
		return func(ct *assert.CollectT) {
			require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
			assert.Equal(ct, common.PhaseReady, cl.Status.Phase)
			assert.Equal(ct, cl.Generation, cl.Status.ObservedGeneration)
			assert.Equal(ct, version, cl.Labels[clustersv1alpha1.K8sVersionLabel])
			if cond := meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionVersionUpToDate); assert.NotNil(ct, cond) {
				assert.Equal(ct, metav1.ConditionTrue, cond.Status, cond.Message)
			}
		}
	}
	require.EventuallyWithT(t, runs(prev), 5*time.Minute, poll, "Ready at %s", prev)

	admin := hostedAdmin(t, c, cl)
	_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"written-at": prev}}, metav1.CreateOptions{})
	require.NoError(t, err)
	user := tokenClient(t, c, cl)

	// The upgrade, polled.
	polled := startPollers([]kubernetes.Interface{user}, 200*time.Millisecond)
	order := watchUpgradeOrder(c, cl, prevImage, pc.Spec.Hosted.Images[cur], cur)
	t.Cleanup(func() { order.end() })
	start := time.Now()
	testenv.Update(ctx, t, c, cl, func(cl *clustersv1alpha1.Cluster) { cl.Spec.Kubernetes.Version = cur })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		cond := meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionVersionUpToDate)
		if assert.NotNil(ct, cond) && cond.Status == metav1.ConditionFalse {
			assert.Equal(ct, backend.ReasonUpgrading, cond.Reason, cond.Message)
		}
	}, 2*time.Minute, poll, "no refusal: the upgrade is allowed")
	require.EventuallyWithT(t, runs(cur), 10*time.Minute, poll, "Ready at %s", cur)
	took := time.Since(start)
	broken, looks, held := order.end()
	assert.Empty(t, broken, "the order of the upgrade: etcd, the API servers, then the controller manager; the upgrade is done (VersionUpToDate True) once every pod runs the new image")
	assert.Positive(t, held, "an API server on the new image beside a controller manager of the old one was seen (%d looks)", looks)
	t.Logf("upgrade order: %d looks at the pods, %d with the controller manager held behind new API servers", looks, held)
	during := summarize(polled.stop())
	t.Logf("FIGURE hosted upgrade %s -> %s in place (etcd on a claim): Ready at %s after %.1f s; a client polling every 200 ms with the kubeconfig issued before: %s",
		prev, cur, cur, took.Seconds(), during)
	version, err := admin.Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, "v"+cur, version.GitVersion)
	kept, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
	require.NoError(t, err, "the data written before the upgrade")
	assert.Equal(t, prev, kept.Data["written-at"])
	_, err = user.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err, "the kubeconfig issued before the upgrade works after it")

	// A downgrade is refused; the cluster keeps serving its version.
	testenv.Update(ctx, t, c, cl, func(cl *clustersv1alpha1.Cluster) { cl.Spec.Kubernetes.Version = prev })
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
		assert.Equal(ct, cl.Generation, cl.Status.ObservedGeneration)
		cond := meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionVersionUpToDate)
		if assert.NotNil(ct, cond) {
			assert.Equal(ct, backend.ReasonVersionChangeRefused, cond.Reason)
			assert.Contains(ct, cond.Message, "downgrade from "+cur+" to "+prev+" is refused")
		}
		assert.Equal(ct, common.PhaseReady, cl.Status.Phase)
		assert.Equal(ct, cur, cl.Labels[clustersv1alpha1.K8sVersionLabel])
	}, 2*time.Minute, poll, "the downgrade refused")
	_, err = user.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
	require.NoError(t, err, "still serving")
}
