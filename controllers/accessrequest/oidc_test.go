package accessrequest_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/test/idp"
	"github.com/openmcp-local/cluster-provider/test/operator"
)

// TestOIDCAccessWithLocalBackend grants OIDC AccessRequests in one real local cluster whose API
// server is made to trust test identity providers (test/idp); every check presents real signed
// JWTs to it. It keeps the real local backend: the fake backend records the issuers it is given
// (SetJWTAuthenticators) but configures no API server to trust them.
func TestOIDCAccessWithLocalBackend(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Now())
	operator.Start(t, env, operator.Options{ProviderName: testProvider, Labeller: true, Access: accessrequest.Options{Clock: clock}})
	provider, second := idp.Start(t), idp.Start(t)
	goneIssuer := "https://127.0.0.1:" + closedPort(t) // allowed, but nothing answers there
	ns := env.Namespace(t)
	pc := &providersv1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "oidc-"},
		Spec: providersv1alpha1.ProviderConfigSpec{Backend: providersv1alpha1.BackendLocal, OIDC: &providersv1alpha1.OIDCSettings{
			// The test identity providers listen on the loopback: allowed by name, opted in.
			AllowedIssuers:      []string{provider.Issuer, second.Issuer, goneIssuer},
			IssuerCABundle:      provider.CAPEM + second.CAPEM,
			AllowPrivateIssuers: true,
		}},
	}
	require.NoError(t, env.Client.Create(t.Context(), pc))
	env.DeleteAtCleanup(t, pc)
	cl := newCluster(t, ns, "oidc", "default."+testProvider+"."+pc.Name)

	alice := newOIDCRequest(t, ns, "alice", cl.Name, clustersv1alpha1.OIDCConfig{
		OIDCProviderConfig: common.OIDCProviderConfig{
			Name: "idp", Issuer: provider.Issuer, ClientID: "client-a", ExtraScopes: []string{"email"},
			RoleBindings: []common.RoleBindings{
				{Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}}, RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "ns-reader"}}},
				{Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "devs"}}, RoleRefs: []common.RoleRef{{Kind: "Role", Name: "cm-editor", Namespace: "team"}}},
			},
		},
		Roles: []clustersv1alpha1.PermissionsRequest{
			{Name: "ns-reader", Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"namespaces"}, []string{"get", "list"})}},
			{Name: "cm-editor", Namespace: "team", Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"configmaps"}, []string{"*"})}},
		},
	})
	got := waitRequest(t, client.ObjectKeyFromObject(alice), "Granted", isGranted)
	s := secretOf(t, got)
	host, ca := string(s.Data[clustersv1alpha1.SecretKeyHost]), s.Data[clustersv1alpha1.SecretKeyCACert]
	as := func(token string) kubernetes.Interface {
		return kubernetes.NewForConfigOrDie(&rest.Config{Host: host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
	}
	ctx := t.Context()
	listNamespaces := func(token string) error {
		_, err := as(token).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		return err
	}
	// whoami authenticates, and needs no permission: 401 means the cluster does not trust the token.
	whoami := func(token string) error {
		_, err := as(token).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		return err
	}

	t.Run("the Secret holds a kubeconfig for kubelogin", func(t *testing.T) {
		assert.Equal(t, "client-a", string(s.Data[clustersv1alpha1.SecretKeyClientID]))
		assert.NotContains(t, s.Data, clustersv1alpha1.SecretKeyToken)
		cfg, err := clientcmd.Load(s.Data[clustersv1alpha1.SecretKeyKubeconfig])
		require.NoError(t, err)
		exec := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Exec
		require.NotNil(t, exec)
		assert.Equal(t, "client.authentication.k8s.io/v1beta1", exec.APIVersion)
		assert.Equal(t, "kubectl", exec.Command)
		assert.Equal(t, []string{"oidc-login", "get-token", "--oidc-issuer-url=" + provider.Issuer, "--oidc-client-id=client-a", "--oidc-extra-scope=email"}, exec.Args)
		assert.Equal(t, host, cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster].Server)
	})

	t.Run("the bound user gets exactly the bound permissions", func(t *testing.T) {
		token := provider.Token(t, "client-a", "alice", nil)
		review, err := as(token).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, "idp:alice", review.Status.UserInfo.Username, "the username prefix defaults to <name>:")
		awaitStatus(t, 200, "alice's binding of ClusterRole ns-reader", func() error { return listNamespaces(token) })
		_, err = as(token).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nope"}}, metav1.CreateOptions{})
		assert.EqualValues(t, 403, status(err), "%v", err)
		assert.EqualValues(t, 403, status(listNamespaces(provider.Token(t, "client-a", "bob", nil))), "a user without a binding")
	})

	t.Run("a group binding works through the groups claim and prefix", func(t *testing.T) {
		token := provider.Token(t, "client-a", "bob", map[string]any{"groups": []string{"devs"}})
		awaitStatus(t, 200, "the devs' binding of Role cm-editor in team", func() error {
			_, err := as(token).CoreV1().ConfigMaps("team").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bob"}}, metav1.CreateOptions{})
			return err
		})
		_, err := as(token).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bob"}}, metav1.CreateOptions{})
		assert.EqualValues(t, 403, status(err), "the Role is bound in team only: %v", err)
	})

	t.Run("a system: group claim never yields that group", func(t *testing.T) {
		token := provider.Token(t, "client-a", "mallory", map[string]any{"groups": []string{"system:masters"}})
		review, err := as(token).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.NotContains(t, review.Status.UserInfo.Groups, "system:masters")
		assert.Contains(t, review.Status.UserInfo.Groups, "idp:system:masters")
		_, err = as(token).CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
		assert.EqualValues(t, 403, status(err), "%v", err)
	})

	t.Run("wrong signing key, wrong audience, expired: 401", func(t *testing.T) {
		for name, token := range map[string]string{
			"wrong key":      provider.TokenSignedBy(t, idp.NewKey(t), "client-a", "alice", nil),
			"wrong audience": provider.Token(t, "client-x", "alice", nil),
			"expired":        provider.Token(t, "client-a", "alice", map[string]any{"exp": time.Now().Add(-time.Hour).Unix(), "iat": time.Now().Add(-2 * time.Hour).Unix()}),
			"another issuer": second.Token(t, "client-a", "alice", nil),
		} {
			assert.EqualValues(t, 401, status(listNamespaces(token)), name)
		}
	})

	bob := newOIDCRequest(t, ns, "bob", cl.Name, clustersv1alpha1.OIDCConfig{OIDCProviderConfig: common.OIDCProviderConfig{
		Name: "idp", Issuer: provider.Issuer, ClientID: "client-b",
		RoleBindings: []common.RoleBindings{{Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "dave"}}, RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "ns-reader"}}}},
	}})
	t.Run("two requests on one issuer with different client IDs both work", func(t *testing.T) {
		waitRequest(t, client.ObjectKeyFromObject(bob), "Granted", isGranted)
		dave := provider.Token(t, "client-b", "dave", nil)
		awaitStatus(t, 200, "dave's binding of ClusterRole ns-reader", func() error { return listNamespaces(dave) })
		assert.NoError(t, listNamespaces(provider.Token(t, "client-a", "alice", nil)))
	})

	t.Run("other claim mappings on the same issuer are Denied", func(t *testing.T) {
		conflict := newOIDCRequest(t, ns, "conflict", cl.Name, clustersv1alpha1.OIDCConfig{OIDCProviderConfig: common.OIDCProviderConfig{
			Name: "idp", Issuer: provider.Issuer, ClientID: "client-c", UsernameClaim: "email",
		}})
		got := waitRequest(t, client.ObjectKeyFromObject(conflict), "Denied", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, "Denied", accessrequest.ReasonIssuerConflict)
		})
		assert.Contains(t, grantedMessage(got), ns+"/alice", "names the request that has the issuer")
	})

	t.Run("denied: an issuer outside the allow-list, a system: prefix", func(t *testing.T) {
		outside := newOIDCRequest(t, ns, "outside", cl.Name, clustersv1alpha1.OIDCConfig{OIDCProviderConfig: common.OIDCProviderConfig{
			Name: "ext", Issuer: "https://idp.example.com", ClientID: "x"}})
		system := newOIDCRequest(t, ns, "system", cl.Name, clustersv1alpha1.OIDCConfig{OIDCProviderConfig: common.OIDCProviderConfig{
			Name: "sys", Issuer: second.Issuer, ClientID: "x", GroupsPrefix: "system:"}})
		waitRequest(t, client.ObjectKeyFromObject(outside), "Denied", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, "Denied", accessrequest.ReasonIssuerNotAllowed)
		})
		waitRequest(t, client.ObjectKeyFromObject(system), "Denied", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, "Denied", accessrequest.ReasonInvalidOIDC)
		})
	})

	t.Run("an unreachable issuer is reported and does not block another issuer", func(t *testing.T) {
		unreachable := newOIDCRequest(t, ns, "unreachable", cl.Name, clustersv1alpha1.OIDCConfig{OIDCProviderConfig: common.OIDCProviderConfig{
			Name: "gone", Issuer: goneIssuer, ClientID: "x"}})
		waitRequest(t, client.ObjectKeyFromObject(unreachable), "Pending", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, "Pending", accessrequest.ReasonIssuerUnreachable)
		})
		other := newOIDCRequest(t, ns, "other", cl.Name, clustersv1alpha1.OIDCConfig{OIDCProviderConfig: common.OIDCProviderConfig{
			Name: "second", Issuer: second.Issuer, ClientID: "client-s",
			RoleBindings: []common.RoleBindings{{Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "erin"}}, RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "erin-reader"}}}},
		}, Roles: []clustersv1alpha1.PermissionsRequest{{Name: "erin-reader", Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"namespaces"}, []string{"list"})}}}})
		waitRequest(t, client.ObjectKeyFromObject(other), "Granted", isGranted)
		erin := second.Token(t, "client-s", "erin", nil)
		awaitStatus(t, 200, "erin's binding of ClusterRole erin-reader", func() error { return listNamespaces(erin) })
	})

	t.Run("removing the last request of an issuer makes its tokens 401", func(t *testing.T) {
		require.NoError(t, env.Client.Delete(ctx, alice))
		gone(t, alice)
		// bob's client ID is still trusted; alice's is not.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.EqualValues(c, 401, status(whoami(provider.Token(t, "client-a", "alice", nil))))
		}, within, poll)
		assert.NoError(t, whoami(provider.Token(t, "client-b", "dave", nil)))
		require.NoError(t, env.Client.Delete(ctx, bob))
		gone(t, bob)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.EqualValues(c, 401, status(whoami(provider.Token(t, "client-b", "dave", nil))))
		}, within, poll)
		assert.NoError(t, whoami(second.Token(t, "client-s", "erin", nil)), "the other issuer stays trusted")
	})

	t.Run("an issuer that stops answering is reported and leaves the configuration", func(t *testing.T) {
		token := second.Token(t, "client-s", "erin", nil)
		second.Close()
		clock.SetTime(clock.Now().Add(2 * time.Minute)) // past what the discovery cache remembers
		// A Secret event reconciles the granted request, as its periodic recheck would.
		s := &corev1.Secret{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: accessrequest.SecretName("other")}, s))
		base := s.DeepCopy()
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, "test/touch", "1")
		require.NoError(t, env.Client.Patch(ctx, s, client.MergeFrom(base)))
		waitRequest(t, client.ObjectKey{Namespace: ns, Name: "other"}, "Pending", func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
			hasGranted(c, ar, "Pending", accessrequest.ReasonIssuerUnreachable)
		})
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.EqualValues(c, 401, status(whoami(token)), "the issuer left the cluster's configuration")
		}, within, poll)
	})
}

func newOIDCRequest(t *testing.T, ns, name, cluster string, oidc clustersv1alpha1.OIDCConfig) *clustersv1alpha1.AccessRequest {
	t.Helper()
	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       clustersv1alpha1.AccessRequestSpec{ClusterRef: &common.ObjectReference{Name: cluster}, OIDC: &oidc},
	}
	require.NoError(t, env.Client.Create(t.Context(), ar))
	return ar
}

func grantedMessage(ar *clustersv1alpha1.AccessRequest) string {
	if c := meta.FindStatusCondition(ar.Status.Conditions, accessrequest.ConditionGranted); c != nil {
		return c.Message
	}
	return ""
}

// closedPort is a local port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	require.NoError(t, l.Close())
	return strings.TrimSpace(port)
}
