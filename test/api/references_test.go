package api

import (
	"time"

	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestCrossNamespaceReferences (issue 40, point 1): a user bound in team-a only may reference the
// Clusters and ClusterRequests of team-a, and those of team-b only once allowed the verb use on
// them there. The admission policy of deploy/policy decides, in the API server: a refused request
// is never stored, and the refusal names the verb.
func TestCrossNamespaceReferences(t *testing.T) {
	ctx := t.Context()
	teamA, teamB := env.Namespace(t), env.Namespace(t)
	alice := userIn(t, teamA, "alice-"+teamA)
	for _, name := range []string{"mine"} {
		require.NoError(t, env.Client.Create(ctx, cluster(teamA, name)))
	}
	for _, name := range []string{"theirs", "other"} {
		require.NoError(t, env.Client.Create(ctx, cluster(teamB, name)))
	}
	require.NoError(t, env.Client.Create(ctx, &clustersv1alpha1.ClusterRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: teamB, Name: "theirs"},
		Spec:       clustersv1alpha1.ClusterRequestSpec{Purpose: "test"},
	}))

	admitted := func(t *testing.T, c client.Client, ar *clustersv1alpha1.AccessRequest) {
		t.Helper()
		require.NoError(t, c.Create(ctx, ar))
	}
	refused := func(t *testing.T, c client.Client, ar *clustersv1alpha1.AccessRequest, want ...string) {
		t.Helper()
		err := c.Create(ctx, ar)
		require.Error(t, err)
		assert.True(t, apierrors.IsInvalid(err) || apierrors.IsForbidden(err), "%v", err)
		for _, w := range want {
			assert.Contains(t, err.Error(), w)
		}
		got := &clustersv1alpha1.AccessRequest{}
		assert.True(t, apierrors.IsNotFound(env.Client.Get(ctx, client.ObjectKeyFromObject(ar), got)), "a refused request is not stored")
	}

	t.Run("own namespace: nothing more needed", func(t *testing.T) {
		admitted(t, alice, request(teamA, "own-empty", &common.ObjectReference{Name: "mine"}, nil))
		admitted(t, alice, request(teamA, "own-named", &common.ObjectReference{Name: "mine", Namespace: teamA}, nil))
	})
	t.Run("another namespace's Cluster: refused, naming the verb", func(t *testing.T) {
		refused(t, alice, request(teamA, "cross", &common.ObjectReference{Name: "theirs", Namespace: teamB}, nil),
			"spec.clusterRef names Cluster "+teamB+"/theirs in another namespace", "alice-"+teamA+" may not use it",
			"needs the verb use on clusters.clusters.openmcp.cloud theirs in namespace "+teamB)
	})
	t.Run("another namespace's ClusterRequest: refused, naming the verb", func(t *testing.T) {
		refused(t, alice, request(teamA, "cross-request", nil, &common.ObjectReference{Name: "theirs", Namespace: teamB}),
			"spec.requestRef names ClusterRequest "+teamB+"/theirs", "needs the verb use on clusterrequests.clusters.openmcp.cloud theirs in namespace "+teamB)
	})
	t.Run("a reference added later is checked as one made at creation", func(t *testing.T) {
		ar := request(teamA, "later", nil, nil)
		admitted(t, alice, ar)
		ar.Spec.ClusterRef = &common.ObjectReference{Name: "theirs", Namespace: teamB}
		err := alice.Update(ctx, ar)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "may not use it")
	})
	t.Run("the platform's administrator passes", func(t *testing.T) {
		admitted(t, env.Client, request(teamA, "by-admin", &common.ObjectReference{Name: "theirs", Namespace: teamB}, nil))
	})

	// team-b allows alice to use its Cluster theirs, and only that one.
	grantUse(t, teamB, "alice-"+teamA, "clusters", "theirs")
	t.Run("allowed use: admitted", func(t *testing.T) {
		// RBAC is read from the informer of the API server: the grant takes effect within moments.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			ar := request(teamA, "cross", &common.ObjectReference{Name: "theirs", Namespace: teamB}, nil)
			assert.NoError(c, alice.Create(ctx, ar))
		}, 30*time.Second, 50*time.Millisecond)
		refused(t, alice, request(teamA, "cross-other", &common.ObjectReference{Name: "other", Namespace: teamB}, nil), "may not use it")
		refused(t, alice, request(teamA, "cross-request", nil, &common.ObjectReference{Name: "theirs", Namespace: teamB}), "may not use it")
	})
}

// userIn returns a client of a new user bound in ns only, as a team member: AccessRequests,
// Clusters and ClusterRequests there, and the kubeconfig Secrets.
func userIn(t *testing.T, ns, name string) client.Client {
	t.Helper()
	ctx := t.Context()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{clustersv1alpha1.GroupVersion.Group}, Resources: []string{"accessrequests", "clusters", "clusterrequests"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}))
	cfg, err := env.User(name)
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	return c
}

// grantUse lets user use the object name of resource in ns, as an admin of ns would.
func grantUse(t *testing.T, ns, user, resource, name string) {
	t.Helper()
	ctx := t.Context()
	roleName := "use-" + resource + "-" + name
	require.NoError(t, env.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: roleName},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{clustersv1alpha1.GroupVersion.Group}, Resources: []string{resource},
			ResourceNames: []string{name}, Verbs: []string{"use"}}},
	}))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: roleName + "-" + user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: roleName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}))
}

func cluster(ns, name string) *clustersv1alpha1.Cluster {
	return &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: "default.test.local", Tenancy: clustersv1alpha1.TenancyExclusive},
	}
}

// request is a token AccessRequest that asks for cluster-admin (what the requester chooses).
func request(ns, name string, clusterRef, requestRef *common.ObjectReference) *clustersv1alpha1.AccessRequest {
	return &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clustersv1alpha1.AccessRequestSpec{
			ClusterRef: clusterRef, RequestRef: requestRef,
			Token: &clustersv1alpha1.TokenConfig{RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "cluster-admin"}}},
		},
	}
}
