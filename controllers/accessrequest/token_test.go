package accessrequest_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
	"github.com/openmcp-local/cluster-provider/test/operator"
)

// TestTokenAccess grants token AccessRequests in one cluster of the fake backend, a real API
// server (clusters) that authorizes by RBAC and authenticates service-account tokens, with the
// labeller preparing the requests as in production. The subtests run in order and share the
// cluster; the last one deletes it.
func TestTokenAccess(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Now())
	fake := startFake(t, operator.Options{Access: accessrequest.Options{TokenValidity: time.Hour, Clock: clock}})
	ns := env.Namespace(t)
	profileName := newProviderConfig(t)
	fake.Set(client.ObjectKey{Namespace: ns, Name: "c1"}, func(c *backendtest.Cluster) { c.Ready = false }) // it starts
	cl := newCluster(t, ns, "c1", profileName)

	// Created together with the Cluster: it waits for it, then is granted. ClusterRole
	// pod-reader is made in the cluster once it runs (below), for the roleRef.
	ar := newRequest(t, ns, "dev", cl.Name, clustersv1alpha1.TokenConfig{
		Permissions: []clustersv1alpha1.PermissionsRequest{
			{Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"namespaces"}, []string{"get", "list"})}},
			{Namespace: "team-a", Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"configmaps"}, []string{"*"})}},
		},
		RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "pod-reader", Namespace: "default"}},
	})
	key := client.ObjectKeyFromObject(ar)
	t.Run("waits for the Cluster to be Ready", func(t *testing.T) {
		waitRequest(t, key, "Pending until the Cluster is Ready", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, common.PhasePending, accessrequest.ReasonClusterNotReady)
		})
		assert.Zero(t, fake.Count(backendtest.MethodAdminConfig, client.ObjectKeyFromObject(cl)), "nothing is granted in a cluster that is not Ready")
		fake.Set(client.ObjectKeyFromObject(cl), func(c *backendtest.Cluster) { c.Ready = true })
	})

	var admin kubernetes.Interface
	var firstToken string
	t.Run("granted: what the rules allow works, the rest is Forbidden", func(t *testing.T) {
		got := waitRequest(t, key, "Granted", isGranted)
		admin = adminClient(t, fake, cl)
		// A ClusterRole made after the grant, bound by name before it exists (roleRefs need not
		// exist yet); the stock roles are tested in dataloss_test.go.
		_, err := admin.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader"},
			Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"pods"}, []string{"list"})}}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NotNil(t, got.Status.SecretRef)
		s := secretOf(t, got)
		for _, k := range []string{clustersv1alpha1.SecretKeyKubeconfig, clustersv1alpha1.SecretKeyHost, clustersv1alpha1.SecretKeyCACert,
			clustersv1alpha1.SecretKeyToken, clustersv1alpha1.SecretKeyCreationTimestamp, clustersv1alpha1.SecretKeyExpirationTimestamp} {
			assert.NotEmpty(t, s.Data[k], "key %s", k)
		}
		assert.Equal(t, corev1.SecretTypeOpaque, s.Type)
		if assert.Len(t, s.OwnerReferences, 1) {
			assert.Equal(t, got.UID, s.OwnerReferences[0].UID)
			assert.True(t, *s.OwnerReferences[0].Controller)
		}
		created, _ := strconv.ParseInt(string(s.Data[clustersv1alpha1.SecretKeyCreationTimestamp]), 10, 64)
		expires, _ := strconv.ParseInt(string(s.Data[clustersv1alpha1.SecretKeyExpirationTimestamp]), 10, 64)
		assert.InDelta(t, time.Hour.Seconds(), float64(expires-created), 60, "valid for --token-validity")
		firstToken = string(s.Data[clustersv1alpha1.SecretKeyToken])

		ctx := t.Context()
		user := kubeconfigClient(t, s)
		// What the request grants is awaited (awaitStatus): the cluster's RBAC authorizer may not
		// have seen the bindings yet, nor ClusterRole pod-reader, created just above.
		awaitStatus(t, 200, "the cluster-wide permission", func() error {
			_, err := user.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			return err
		})
		_, err = user.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "not-allowed"}}, metav1.CreateOptions{})
		assert.EqualValues(t, 403, status(err), "creating a namespace: %v", err)
		awaitStatus(t, 200, "the namespaced permission, in its namespace (created for it)", func() error {
			_, err := user.CoreV1().ConfigMaps("team-a").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		})
		_, err = user.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		assert.EqualValues(t, 403, status(err), "the namespaced permission, elsewhere: %v", err)
		awaitStatus(t, 200, "the roleRef binding of ClusterRole pod-reader in default", func() error {
			_, err := user.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			return err
		})
		_, err = user.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
		assert.EqualValues(t, 403, status(err), "ClusterRole pod-reader is bound in default only: %v", err)

		sas, err := admin.CoreV1().ServiceAccounts(accessrequest.DefaultNamespace).List(ctx, metav1.ListOptions{LabelSelector: accessrequest.LabelRequestName + "=dev"})
		require.NoError(t, err)
		assert.Len(t, sas.Items, 1)
		env.AwaitEvent(t, ar, accessrequest.ReasonGranted)
	})

	t.Run("a spec change removes what is no longer asked for", func(t *testing.T) {
		cur := &clustersv1alpha1.AccessRequest{}
		require.NoError(t, env.Client.Get(t.Context(), key, cur))
		base := cur.DeepCopy()
		cur.Spec.Token.Permissions = cur.Spec.Token.Permissions[:1]
		require.NoError(t, env.Client.Patch(t.Context(), cur, client.MergeFrom(base)))
		waitRequest(t, key, "Granted for the new generation", isGranted)
		roles, err := admin.RbacV1().Roles("team-a").List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		assert.Empty(t, roles.Items, "the Role of the removed permission")
		user := kubeconfigClient(t, secretOf(t, cur))
		awaitStatus(t, 403, "the removed permission", func() error {
			_, err := user.CoreV1().ConfigMaps("team-a").Create(t.Context(),
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "y"}}, metav1.CreateOptions{})
			return err
		})
	})

	t.Run("a deleted Secret is restored", func(t *testing.T) {
		s := secretOf(t, ar)
		require.NoError(t, env.Client.Delete(t.Context(), s))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := &corev1.Secret{}
			require.NoError(c, env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), got))
			assert.NotEqual(c, s.UID, got.UID)
		}, within, poll)
		_, err := kubeconfigClient(t, secretOf(t, ar)).CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		assert.NoError(t, err, "the restored kubeconfig works")
	})

	t.Run("an edited Secret is restored", func(t *testing.T) {
		s := secretOf(t, ar)
		base := s.DeepCopy()
		s.Data[clustersv1alpha1.SecretKeyToken] = []byte("edited")
		require.NoError(t, env.Client.Patch(t.Context(), s, client.MergeFrom(base)))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			got := secretOf(t, ar)
			assert.NotEqual(c, "edited", string(got.Data[clustersv1alpha1.SecretKeyToken]))
		}, within, poll)
	})

	t.Run("rotation at 80% of the validity", func(t *testing.T) {
		// Back to the real time at the end, for the TTL below, even if a check fails.
		defer func() { clock.SetTime(time.Now()) }()
		before := string(secretOf(t, ar).Data[clustersv1alpha1.SecretKeyToken])
		require.NotEqual(t, firstToken, before, "the restores above issued new tokens")
		touch := func(value string) {
			s := secretOf(t, ar)
			base := s.DeepCopy()
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, "test/touch", value)
			require.NoError(t, env.Client.Patch(t.Context(), s, client.MergeFrom(base)))
		}
		// At 70 % nothing rotates: a Secret event reconciles the request, which keeps the token.
		clock.SetTime(clock.Now().Add(42 * time.Minute))
		touch("70")
		waitSecretAnnotation(t, ar, "test/touch", "70")
		assert.Never(t, func() bool {
			return string(secretOf(t, ar).Data[clustersv1alpha1.SecretKeyToken]) != before
		}, 2*time.Second, 100*time.Millisecond, "rotated before 80 %")
		clock.SetTime(clock.Now().Add(8 * time.Minute)) // 83 % of the hour
		touch("83")
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NotEqual(c, before, string(secretOf(t, ar).Data[clustersv1alpha1.SecretKeyToken]))
		}, within, poll, "a new token")
		// The reconciler counts the rotation and emits its Event after it wrote the new token.
		assert.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.Positive(c, counterValue(c, "cluster_provider_accessrequest_tokens_total", "cause", "rotation"), "the rotation is counted")
		}, within, poll)
		env.AwaitEvent(t, ar, "TokenRotated")
	})

	t.Run("opt-out of namespace creation", func(t *testing.T) {
		other := newRequest(t, ns, "noauto", cl.Name, clustersv1alpha1.TokenConfig{
			Permissions: []clustersv1alpha1.PermissionsRequest{{Namespace: "team-b", DisableAutomaticNamespaceCreation: true,
				Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"configmaps"}, []string{"get"})}}},
		})
		waitRequest(t, client.ObjectKeyFromObject(other), "Pending: no namespace", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, common.PhasePending, accessrequest.ReasonNamespaceNotFound)
		})
		_, err := admin.CoreV1().Namespaces().Get(t.Context(), "team-b", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "team-b is not created: %v", err)
		_, err = admin.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		annotateReconcile(t, other)
		waitRequest(t, client.ObjectKeyFromObject(other), "Granted once the namespace exists", isGranted)
	})

	t.Run("a rule the cluster rejects is Denied; fixing it grants", func(t *testing.T) {
		bad := newRequest(t, ns, "bad", cl.Name, clustersv1alpha1.TokenConfig{
			Permissions: []clustersv1alpha1.PermissionsRequest{{Namespace: "team-a",
				Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/healthz"}, Verbs: []string{"get"}}}}},
		})
		got := waitRequest(t, client.ObjectKeyFromObject(bad), "Denied", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, common.PhaseDenied, accessrequest.ReasonInvalidPermissions)
		})
		base := got.DeepCopy()
		got.Spec.Token.Permissions[0].Rules = []rbacv1.PolicyRule{rule([]string{""}, []string{"configmaps"}, []string{"get"})}
		require.NoError(t, env.Client.Patch(t.Context(), got, client.MergeFrom(base)))
		waitRequest(t, client.ObjectKeyFromObject(bad), "Granted after the fix", isGranted)
	})

	t.Run("a name taken by a foreign object is Denied", func(t *testing.T) {
		_, err := admin.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "taken"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		clash := newRequest(t, ns, "clash", cl.Name, clustersv1alpha1.TokenConfig{
			Permissions: []clustersv1alpha1.PermissionsRequest{{Name: "taken", Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"pods"}, []string{"get"})}}},
		})
		waitRequest(t, client.ObjectKeyFromObject(clash), "Denied", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, common.PhaseDenied, accessrequest.ReasonNameConflict)
		})
		got, err := admin.RbacV1().ClusterRoles().Get(t.Context(), "taken", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Empty(t, got.Rules, "the foreign ClusterRole is left alone")
	})

	t.Run("requests of another provider or not prepared are never touched", func(t *testing.T) {
		foreign := newRequest(t, ns, "foreign", cl.Name, clustersv1alpha1.TokenConfig{}, func(ar *clustersv1alpha1.AccessRequest) {
			ar.Labels = map[string]string{clustersv1alpha1.ProviderLabel: "someone-else", clustersv1alpha1.ProfileLabel: profileName}
		})
		unprepared := newRequest(t, ns, "unprepared", "no-such-cluster", clustersv1alpha1.TokenConfig{})
		// A request created after both and granted shows that the operator has seen them.
		witness := newRequest(t, ns, "witness", cl.Name, clustersv1alpha1.TokenConfig{})
		waitRequest(t, client.ObjectKeyFromObject(witness), "Granted", isGranted)
		for _, o := range []*clustersv1alpha1.AccessRequest{foreign, unprepared} {
			got := &clustersv1alpha1.AccessRequest{}
			require.NoError(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), got))
			assert.Empty(t, got.Finalizers, o.Name)
			assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, accessrequest.ConditionGranted), o.Name)
			assert.Nil(t, got.Status.SecretRef, o.Name)
		}
	})

	t.Run("a restart in the middle of a grant leaves no orphan and no duplicate", func(t *testing.T) {
		// The state a kill -9 leaves after the first steps of a grant under an older spec: the
		// finalizer set, the ServiceAccount and a ClusterRole the current spec no longer asks for.
		id := accessrequest.RequestID("default", testProvider, ns, "crashed")
		labels := map[string]string{accessrequest.LabelRequestID: id, accessrequest.LabelManagedBy: accessrequest.ManagedByValue}
		_, err := admin.CoreV1().ServiceAccounts(accessrequest.DefaultNamespace).Create(t.Context(),
			&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "ar-" + id, Labels: labels}}, metav1.CreateOptions{})
		require.NoError(t, err)
		stale := "openmcp:permission:" + id + ":7"
		_, err = admin.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: stale, Labels: labels}}, metav1.CreateOptions{})
		require.NoError(t, err)
		crashed := newRequest(t, ns, "crashed", cl.Name, clustersv1alpha1.TokenConfig{
			Permissions: []clustersv1alpha1.PermissionsRequest{{Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"pods"}, []string{"get"})}}},
		}, func(ar *clustersv1alpha1.AccessRequest) { ar.Finalizers = []string{kit.Finalizer(testProvider)} })
		waitRequest(t, client.ObjectKeyFromObject(crashed), "Granted", isGranted)
		sel := metav1.ListOptions{LabelSelector: accessrequest.LabelRequestID + "=" + id}
		sas, err := admin.CoreV1().ServiceAccounts("").List(t.Context(), sel)
		require.NoError(t, err)
		assert.Len(t, sas.Items, 1, "one ServiceAccount")
		croles, err := admin.RbacV1().ClusterRoles().List(t.Context(), sel)
		require.NoError(t, err)
		if assert.Len(t, croles.Items, 1, "the stale ClusterRole is gone, the wanted one is there") {
			assert.Equal(t, "openmcp:permission:"+id+":0", croles.Items[0].Name)
		}
	})

	t.Run("deletion revokes: the token gets 401", func(t *testing.T) {
		user := kubeconfigClient(t, secretOf(t, ar))
		_, err := user.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
		require.NoError(t, err)
		require.NoError(t, env.Client.Delete(t.Context(), ar))
		gone(t, ar)
		// The API server looks ServiceAccounts up through an informer: it may take a moment to see
		// the deletion.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			_, err = user.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
			assert.EqualValues(c, 401, status(err), "the old token: %v", err)
		}, within, poll)
		id := accessrequest.RequestID("default", testProvider, ns, ar.Name)
		sel := metav1.ListOptions{LabelSelector: accessrequest.LabelRequestID + "=" + id}
		crbs, err := admin.RbacV1().ClusterRoleBindings().List(t.Context(), sel)
		require.NoError(t, err)
		assert.Empty(t, crbs.Items)
		rbs, err := admin.RbacV1().RoleBindings("").List(t.Context(), sel)
		require.NoError(t, err)
		assert.Empty(t, rbs.Items)
		assert.True(t, apierrors.IsNotFound(env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: accessrequest.SecretName(ar.Name)}, &corev1.Secret{})))
	})

	t.Run("a Secret of the kubeconfig's name that the request does not control is never touched", func(t *testing.T) {
		foreign := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: accessrequest.SecretName("taken")},
			Data:       map[string][]byte{"password": []byte("someone else's")},
		}
		require.NoError(t, env.Client.Create(t.Context(), foreign))
		taken := newRequest(t, ns, "taken", cl.Name, clustersv1alpha1.TokenConfig{RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "view"}}})
		got := waitRequest(t, client.ObjectKeyFromObject(taken), "Denied", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, common.PhaseDenied, accessrequest.ReasonSecretConflict)
		})
		assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, accessrequest.ConditionGranted).Message, ns+"/"+foreign.Name)
		require.NoError(t, env.Client.Delete(t.Context(), taken))
		gone(t, taken)
		after := &corev1.Secret{}
		require.NoError(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(foreign), after))
		assert.Equal(t, foreign.ResourceVersion, after.ResourceVersion, "the foreign Secret was written to")
		assert.Equal(t, foreign.Data, after.Data)
	})

	t.Run("spec.ttl: the request is deleted when it ends, and its token ends no later", func(t *testing.T) {
		short := newRequest(t, ns, "short", cl.Name, clustersv1alpha1.TokenConfig{}, func(ar *clustersv1alpha1.AccessRequest) {
			ar.Spec.TTL = &metav1.Duration{Duration: 15 * time.Second}
		})
		got := waitRequest(t, client.ObjectKeyFromObject(short), "Granted", isGranted)
		s := secretOf(t, got)
		expires, err := strconv.ParseInt(string(s.Data[clustersv1alpha1.SecretKeyExpirationTimestamp]), 10, 64)
		require.NoError(t, err)
		assert.LessOrEqual(t, expires, got.CreationTimestamp.Add(15*time.Second).Unix())
		gone(t, short)
	})

	t.Run("the Cluster deleted: Denied, and deletion does not wait", func(t *testing.T) {
		last := &clustersv1alpha1.AccessRequest{}
		require.NoError(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "witness"}, last))
		require.NoError(t, env.Client.Delete(t.Context(), cl))
		gone(t, cl)
		waitRequest(t, client.ObjectKeyFromObject(last), "Denied", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, common.PhaseDenied, accessrequest.ReasonClusterGone)
		})
		require.NoError(t, env.Client.Delete(t.Context(), last))
		gone(t, last)
	})
}

func annotateReconcile(t *testing.T, ar *clustersv1alpha1.AccessRequest) {
	t.Helper()
	got := &clustersv1alpha1.AccessRequest{}
	require.NoError(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(ar), got))
	base := got.DeepCopy()
	metav1.SetMetaDataAnnotation(&got.ObjectMeta, "openmcp.cloud/operation", "reconcile")
	require.NoError(t, env.Client.Patch(t.Context(), got, client.MergeFrom(base)))
}

func waitSecretAnnotation(t *testing.T, ar *clustersv1alpha1.AccessRequest, key, value string) {
	t.Helper()
	require.Eventually(t, func() bool {
		s := &corev1.Secret{}
		err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: ar.Namespace, Name: accessrequest.SecretName(ar.Name)}, s)
		return err == nil && s.Annotations[key] == value
	}, within, poll)
}

// counterValue reads a counter of the operator's metrics registry by one label.
func counterValue(t require.TestingT, name, label, value string) float64 {
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
