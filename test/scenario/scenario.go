// Package scenario is the end-to-end scenario suite: what a user of this ClusterProvider does,
// checked from the outside against an operator that runs somewhere else, as a process against
// envtest (test/e2e, in make test) or deployed into a kind cluster (make e2e-kind). A
// ProviderConfig publishes its ClusterProfile; a Cluster becomes Ready; an AccessRequest yields a
// kubeconfig that works, and no more than it grants; with an identity provider, an OIDC
// AccessRequest makes the Cluster trust it and its tokens get exactly what is bound; everything
// deletes cleanly.
package scenario

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/test/idp"
)

// Target is an operator under test.
type Target struct {
	// Client reaches the platform cluster as an administrator.
	Client client.Client
	// ProviderName and Environment are the operator's --provider-name and --environment.
	ProviderName, Environment string
	// ProviderConfig is created (with a generated name) for the scenario.
	ProviderConfig *providersv1alpha1.ProviderConfig
	// Reach turns a cluster's API server URL into one this process can reach (a port-forward,
	// say). Nil uses the URL as it is.
	Reach func(t *testing.T, endpoint string) string
	// Within bounds each wait; a Cluster's start is the longest.
	Within time.Duration
	// IdP, if set, is an identity provider the Cluster's API server reaches: the scenario then
	// allows it in the ProviderConfig and checks an OIDC AccessRequest.
	IdP *idp.IdP
	// ClusterGone, if set, checks what the backend had for the Cluster with uid is gone, once the
	// Cluster is.
	ClusterGone func(t *testing.T, uid types.UID)
}

const poll = 200 * time.Millisecond

// Run runs the scenario against tg; its steps are subtests that depend on each other.
func Run(t *testing.T, tg Target) {
	ctx := context.Background()
	c := tg.Client
	pc := tg.ProviderConfig.DeepCopy()
	pc.Name, pc.GenerateName = "", "scenario-"
	if tg.IdP != nil {
		pc.Spec.OIDC = &providersv1alpha1.OIDCSettings{AllowedIssuers: []string{tg.IdP.Issuer}, IssuerCABundle: tg.IdP.CAPEM, AllowPrivateIssuers: true} // the test IdP is on this machine or the kind network
	}
	require.NoError(t, c.Create(ctx, pc))
	profile := tg.Environment + "." + tg.ProviderName + "." + pc.Name
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "scenario-"}}
	require.NoError(t, c.Create(ctx, ns))

	t.Run("a ProviderConfig publishes its ClusterProfile", func(t *testing.T) {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			cp := &clustersv1alpha1.ClusterProfile{}
			require.NoError(ct, c.Get(ctx, client.ObjectKey{Name: profile}, cp))
			assert.Equal(ct, tg.ProviderName, cp.Spec.ProviderRef.Name)
			assert.Equal(ct, pc.Name, cp.Spec.ProviderConfigRef.Name)
		}, tg.Within, poll)
	})

	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "scenario"},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyExclusive},
	}
	t.Run("a Cluster becomes Ready", func(t *testing.T) {
		start := time.Now()
		require.NoError(t, c.Create(ctx, cl))
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
			assert.Equal(ct, common.PhaseReady, cl.Status.Phase, "conditions: %+v", cl.Status.Conditions)
			assert.NotEmpty(ct, cl.Status.APIServer)
		}, tg.Within, poll)
		t.Logf("FIGURE create→Ready of the scenario's Cluster (%s backend): %.1f s", pc.Spec.Backend, time.Since(start).Seconds())
	})

	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "scenario"},
		Spec: clustersv1alpha1.AccessRequestSpec{
			ClusterRef: &common.ObjectReference{Name: cl.Name, Namespace: ns.Name},
			Token: &clustersv1alpha1.TokenConfig{Permissions: []clustersv1alpha1.PermissionsRequest{{
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}}},
			}}},
		},
	}
	t.Run("an AccessRequest yields a kubeconfig that works, and no more", func(t *testing.T) {
		s := grantedSecret(t, tg, ar)
		cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[clustersv1alpha1.SecretKeyKubeconfig])
		require.NoError(t, err)
		if tg.Reach != nil {
			cfg.Host = tg.Reach(t, cfg.Host)
		}
		user := kubernetes.NewForConfigOrDie(cfg)
		// Awaited: the cluster's API server authorizes with the RBAC objects its informers have
		// seen, which may lag behind the grant's writes.
		assert.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, err := user.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			assert.NoError(ct, err, "what the AccessRequest grants")
		}, tg.Within, poll)
		_, err = user.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "forbidden"}}, metav1.CreateOptions{})
		assert.True(t, apierrors.IsForbidden(err), "what it does not grant: %v", err)
	})

	objects := []client.Object{ar, cl, pc}
	if tg.IdP != nil {
		oar := oidcStep(t, tg, ns.Name, cl.Name)
		objects = append([]client.Object{oar}, objects...)
	}

	uid := cl.UID
	t.Run("everything deletes", func(t *testing.T) {
		for _, o := range objects {
			require.NoError(t, client.IgnoreNotFound(c.Delete(ctx, o)))
			require.Eventually(t, func() bool {
				return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(o), o))
			}, tg.Within, poll, "%s %s is deleted", o.GetObjectKind().GroupVersionKind().Kind, o.GetName())
		}
		err := c.Get(ctx, client.ObjectKey{Name: profile}, &clustersv1alpha1.ClusterProfile{})
		assert.True(t, apierrors.IsNotFound(err), "the ClusterProfile goes with its ProviderConfig: %v", err)
		if tg.ClusterGone != nil {
			tg.ClusterGone(t, uid)
		}
	})
}

// oidcStep asks for OIDC access to cluster for the user alice of tg.IdP, and checks that her
// token lists namespaces and creates none; it returns the AccessRequest.
func oidcStep(t *testing.T, tg Target, ns, cluster string) *clustersv1alpha1.AccessRequest {
	ctx := context.Background()
	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scenario-oidc"},
		Spec: clustersv1alpha1.AccessRequestSpec{
			ClusterRef: &common.ObjectReference{Name: cluster, Namespace: ns},
			OIDC: &clustersv1alpha1.OIDCConfig{
				OIDCProviderConfig: common.OIDCProviderConfig{
					Name: "idp", Issuer: tg.IdP.Issuer, ClientID: "scenario",
					RoleBindings: []common.RoleBindings{{
						Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
						RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "scenario-reader"}},
					}},
				},
				Roles: []clustersv1alpha1.PermissionsRequest{{Name: "scenario-reader", Rules: []rbacv1.PolicyRule{
					{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}},
				}}},
			},
		},
	}
	t.Run("an OIDC AccessRequest makes the Cluster trust the issuer, for what it binds", func(t *testing.T) {
		s := grantedSecret(t, tg, ar)
		host := string(s.Data[clustersv1alpha1.SecretKeyHost])
		if tg.Reach != nil {
			host = tg.Reach(t, host)
		}
		as := func(token string) kubernetes.Interface {
			return kubernetes.NewForConfigOrDie(&rest.Config{Host: host, BearerToken: token,
				TLSClientConfig: rest.TLSClientConfig{CAData: s.Data[clustersv1alpha1.SecretKeyCACert]}})
		}
		alice := as(tg.IdP.Token(t, "scenario", "alice", nil))
		// Awaited: the API server trusts the issuer once it has fetched its keys, and authorizes
		// with the RBAC objects its informers have seen.
		assert.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, err := alice.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			assert.NoError(ct, err, "alice's token lists namespaces")
		}, tg.Within, poll)
		_, err := alice.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "forbidden"}}, metav1.CreateOptions{})
		assert.True(t, apierrors.IsForbidden(err), "what it does not grant: %v", err)
		_, err = as(tg.IdP.Token(t, "another-client", "alice", nil)).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		assert.True(t, apierrors.IsUnauthorized(err), "a token for another client ID: %v", err)
	})
	return ar
}

// grantedSecret creates ar, waits until it is Granted and returns the Secret its status names.
func grantedSecret(t *testing.T, tg Target, ar *clustersv1alpha1.AccessRequest) *corev1.Secret {
	t.Helper()
	ctx := context.Background()
	c := tg.Client
	require.NoError(t, c.Create(ctx, ar))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(ar), ar))
		assert.Equal(ct, common.PhaseGranted, ar.Status.Phase, "conditions: %+v", ar.Status.Conditions)
	}, tg.Within, poll)
	require.NotNil(t, ar.Status.SecretRef)
	s := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ar.Namespace, Name: ar.Status.SecretRef.Name}, s))
	return s
}

// Port is the port of an API server URL.
func Port(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", err
	}
	if u.Port() == "" {
		return "", errors.New("no port in " + endpoint)
	}
	return u.Port(), nil
}
