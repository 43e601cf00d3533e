package accessrequest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/test/operator"
)

// TestGrantFollowsCluster: a Granted request whose ServiceAccount or binding is gone from its
// cluster (a cluster restored from an older state, replaced, or changed by hand) is granted again
// at its next check, without any change of the request: a Warning Event GrantLost names what was
// gone, the kubeconfig in its Secret works again (with a new token where the ServiceAccount was
// made anew), and the request stays Granted. The cluster is one of the fake backend: its API
// server has no controller manager to fill in the stock role view, so the request asks for the
// rule it needs (TestAccessRequestWithLocalBackend binds view in a real local cluster).
func TestGrantFollowsCluster(t *testing.T) {
	fake := startFake(t, operator.Options{Access: accessrequest.Options{GrantCheck: time.Second}})
	ns := env.Namespace(t)
	cl := newCluster(t, ns, "c1", newProviderConfig(t))
	ar := newRequest(t, ns, "viewer", cl.Name, clustersv1alpha1.TokenConfig{
		Permissions: []clustersv1alpha1.PermissionsRequest{{Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"configmaps"}, []string{"list"})}}},
	})
	key := client.ObjectKeyFromObject(ar)
	got := waitRequest(t, key, "Granted", isGranted)
	s := secretOf(t, got)
	user := kubeconfigClient(t, s)
	readConfigMaps := func() error {
		_, err := user.CoreV1().ConfigMaps("default").List(t.Context(), metav1.ListOptions{})
		return err
	}
	awaitStatus(t, 200, "the permission, bound", readConfigMaps)
	admin := adminClient(t, fake, cl)

	t.Run("the binding is deleted in the cluster: made again, the kubeconfig issued before works again", func(t *testing.T) {
		crbs, err := admin.RbacV1().ClusterRoleBindings().List(t.Context(), metav1.ListOptions{LabelSelector: accessrequest.LabelRequestName + "=viewer"})
		require.NoError(t, err)
		require.Len(t, crbs.Items, 1)
		require.NoError(t, admin.RbacV1().ClusterRoleBindings().Delete(t.Context(), crbs.Items[0].Name, metav1.DeleteOptions{}))
		e := env.AwaitEvent(t, ar, accessrequest.ReasonGrantLost)
		assert.Contains(t, e.Note, "ClusterRoleBinding "+crbs.Items[0].Name)
		// user holds the first kubeconfig: its ServiceAccount was never gone, so it works again
		// (the Secret may hold a newer token by now: a grant made again issues one).
		awaitStatus(t, 200, "bound again, for the kubeconfig issued before", readConfigMaps)
		waitRequest(t, key, "still Granted", isGranted)
	})

	t.Run("the ServiceAccount is deleted in the cluster: made again, with a new token in the Secret", func(t *testing.T) {
		sas, err := admin.CoreV1().ServiceAccounts(accessrequest.DefaultNamespace).List(t.Context(), metav1.ListOptions{LabelSelector: accessrequest.LabelRequestName + "=viewer"})
		require.NoError(t, err)
		require.Len(t, sas.Items, 1)
		before := string(secretOf(t, got).Data[clustersv1alpha1.SecretKeyToken])
		require.NoError(t, admin.CoreV1().ServiceAccounts(accessrequest.DefaultNamespace).Delete(t.Context(), sas.Items[0].Name, metav1.DeleteOptions{}))
		awaitStatus(t, 401, "the kubeconfig issued before names a ServiceAccount that is gone", readConfigMaps)
		require.Eventually(t, func() bool {
			return string(secretOf(t, got).Data[clustersv1alpha1.SecretKeyToken]) != before
		}, 60*time.Second, 100*time.Millisecond, "a new token in the Secret")
		awaitStatus(t, 200, "the new kubeconfig works", func() error {
			_, err := kubeconfigClient(t, secretOf(t, got)).CoreV1().ConfigMaps("default").List(t.Context(), metav1.ListOptions{})
			return err
		})
		waitRequest(t, key, "still Granted", isGranted)
	})
}
