package accessrequest_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/test/operator"
)

// TestAccessRequestWithLocalBackend is the AccessRequest reconciler's integration test with the
// real local backend (the other token tests use a fake one). It grants what users ask for most,
// the stock ClusterRole view (filled in by the cluster's kube-controller-manager, which the fake's
// API server does not run), and then loses the cluster's folder while the operator is down (a
// lost volume): the restarted operator creates the cluster anew, says so on the Cluster
// (condition and Warning Event), and grants the request again with a kubeconfig for the new CA,
// which works, while the old one stops working.
func TestAccessRequestWithLocalBackend(t *testing.T) {
	stateDir := t.TempDir()
	ns := env.Namespace(t)
	var (
		cl  *clustersv1alpha1.Cluster
		ar  *clustersv1alpha1.AccessRequest
		old *corev1.Secret
	)
	cl = newCluster(t, ns, "lossy", newProviderConfig(t)) // made here: they outlive the subtest's operator
	t.Run("view: the kubeconfig lists pods and writes nothing", func(t *testing.T) {
		// This operator stops when the subtest ends, as if its pod were deleted.
		operator.Start(t, env, operator.Options{ProviderName: testProvider, Labeller: true, StateDir: stateDir})
		ar = newRequest(t, ns, "viewer", cl.Name, clustersv1alpha1.TokenConfig{
			RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "view"}},
		})
		got := waitRequest(t, client.ObjectKeyFromObject(ar), "Granted", isGranted)
		old = secretOf(t, got)
		user := kubeconfigClient(t, old)
		ctx := t.Context()
		awaitStatus(t, 200, "view lists pods everywhere", func() error {
			_, err := user.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		})
		_, err := user.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		assert.EqualValues(t, 403, status(err), "view writes nothing: %v", err)
	})
	require.NotNil(t, old, "the first subtest granted the request")

	dir := filepath.Join(stateDir, string(cl.UID))
	require.DirExists(t, dir)
	require.NoError(t, os.RemoveAll(dir), "the volume is lost")
	op := operator.Start(t, env, operator.Options{ProviderName: testProvider, Labeller: true, StateDir: stateDir})

	t.Run("the Cluster says its data was lost", func(t *testing.T) {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := &clustersv1alpha1.Cluster{}
			require.NoError(c, env.Client.Get(t.Context(), client.ObjectKeyFromObject(cl), got))
			p := meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned)
			if assert.NotNil(c, p) {
				assert.Equal(c, cluster.ReasonDataLost, p.Reason)
				assert.Contains(c, p.Message, "EMPTY")
			}
			assert.Equal(c, common.PhaseReady, got.Status.Phase)
		}, within, poll)
		e := env.AwaitEvent(t, cl, cluster.ReasonDataLost)
		assert.Equal(t, corev1.EventTypeWarning, e.Type)
	})

	t.Run("the request is granted again, with the new CA", func(t *testing.T) {
		var s *corev1.Secret
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			s = &corev1.Secret{}
			require.NoError(c, env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: accessrequest.SecretName(ar.Name)}, s))
			assert.False(c, bytes.Equal(old.Data[clustersv1alpha1.SecretKeyCACert], s.Data[clustersv1alpha1.SecretKeyCACert]), "a new CA")
		}, within, poll)
		waitRequest(t, client.ObjectKeyFromObject(ar), "Granted", isGranted)
		e := env.AwaitEvent(t, ar, accessrequest.ReasonClusterRecreated)
		assert.Equal(t, corev1.EventTypeWarning, e.Type)

		ctx := t.Context()
		user := kubeconfigClient(t, s)
		awaitStatus(t, 200, "the new kubeconfig lists pods", func() error {
			_, err := user.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		})
		assert.Equal(t, string(old.Data[clustersv1alpha1.SecretKeyHost]), string(s.Data[clustersv1alpha1.SecretKeyHost]), "the same endpoint")
		_, err := kubeconfigClient(t, old).CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		require.Error(t, err, "the old kubeconfig trusts the old CA")
		assert.Contains(t, err.Error(), "certificate signed by unknown authority")
	})

	require.NoError(t, env.Client.Delete(t.Context(), cl))
	gone(t, cl)
	_ = op
}
