package accessrequest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/test/operator"
)

// TestSecretsNotWatched: an operator that may not list and watch Secrets (deploy/rbac grants
// neither) has no Secret informer; it still grants, and a kubeconfig Secret that is deleted or
// edited is written again at the request's next grant check.
func TestSecretsNotWatched(t *testing.T) {
	const check = 2 * time.Second
	startFake(t, operator.Options{NoSecretWatch: true, Access: accessrequest.Options{GrantCheck: check}})
	ns := env.Namespace(t)
	cl := newCluster(t, ns, "unwatched", newProviderConfig(t))
	ar := newRequest(t, ns, "unwatched", cl.Name, clustersv1alpha1.TokenConfig{
		Permissions: []clustersv1alpha1.PermissionsRequest{{Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"namespaces"}, []string{"get"})}}}})
	waitRequest(t, client.ObjectKeyFromObject(ar), "Granted", isGranted)

	s := secretOf(t, ar)
	require.NoError(t, env.Client.Delete(t.Context(), s))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &corev1.Secret{}
		require.NoError(c, env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), got))
		assert.NotEqual(c, s.UID, got.UID)
	}, within+check, poll, "the deleted Secret is written again")
	_, err := kubeconfigClient(t, secretOf(t, ar)).CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{})
	assert.NoError(t, err, "the kubeconfig written again works")

	s = secretOf(t, ar)
	base := s.DeepCopy()
	s.Data[clustersv1alpha1.SecretKeyToken] = []byte("edited")
	require.NoError(t, env.Client.Patch(t.Context(), s, client.MergeFrom(base)))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NotEqual(c, "edited", string(secretOf(t, ar).Data[clustersv1alpha1.SecretKeyToken]))
	}, within+check, poll, "the edited Secret is written again")
}
