package accessrequest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// TestTargetApplyAndPrune drives the target's applier and prune against an API server (the test
// environment's, standing in for a Cluster's): a grant writes every object of the rendered list,
// a grant of a changed spec deletes what the spec no longer asks for, revoking deletes everything
// of the request and nothing of another.
func TestTargetApplyAndPrune(t *testing.T) {
	ctx := t.Context()
	tgt, err := accessrequest.NewTestTarget(env.Config)
	require.NoError(t, err)
	admin := kubernetes.NewForConfigOrDie(env.Config)
	suffix := rand.String(6)
	access, team := "access-"+suffix, "team-"+suffix
	id := accessrequest.RequestID("env", "target-test", "ns", "dev-"+suffix)
	ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dev-" + suffix}}
	pods := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}
	ar.Spec.Token = &clustersv1alpha1.TokenConfig{
		Permissions: []clustersv1alpha1.PermissionsRequest{{Rules: []rbacv1.PolicyRule{pods}}, {Namespace: team, Rules: []rbacv1.PolicyRule{pods}}},
		RoleRefs:    []common.RoleRef{{Kind: "ClusterRole", Name: "view"}},
	}
	byID := metav1.ListOptions{LabelSelector: accessrequest.LabelRequestID + "=" + id}

	// Another request's object, which nothing here may touch.
	otherID := accessrequest.RequestID("env", "target-test", "ns", "other-"+suffix)
	other, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{
		Name: "openmcp:permission:" + otherID + ":0", Labels: map[string]string{accessrequest.LabelRequestID: otherID}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.RbacV1().ClusterRoles().Delete(ctx, other.Name, metav1.DeleteOptions{}) })

	t.Run("a grant writes the rendered list with server-side apply", func(t *testing.T) {
		require.NoError(t, tgt.Grant(ctx, ar, id, access, true))
		for _, ns := range []string{access, team} {
			_, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			assert.NoError(t, err, "namespace %s is created", ns)
		}
		sa, err := admin.CoreV1().ServiceAccounts(access).Get(ctx, "ar-"+id, metav1.GetOptions{})
		if assert.NoError(t, err) {
			assertApplied(t, sa.ObjectMeta, id)
		}
		role, err := admin.RbacV1().Roles(team).Get(ctx, "openmcp:permission:"+id+":1", metav1.GetOptions{})
		if assert.NoError(t, err) {
			assertApplied(t, role.ObjectMeta, id)
			assert.Equal(t, []rbacv1.PolicyRule{pods}, role.Rules)
		}
		crbs, err := admin.RbacV1().ClusterRoleBindings().List(ctx, byID)
		require.NoError(t, err)
		assert.Len(t, crbs.Items, 2, "the permission's binding and the roleRef's")
		gone, err := tgt.Missing(ctx, ar, id, access)
		require.NoError(t, err)
		assert.Empty(t, gone, "the cluster holds the whole plan")
	})

	t.Run("missing names what was deleted by hand", func(t *testing.T) {
		name := "openmcp:roleref:" + id + ":0"
		require.NoError(t, admin.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}))
		gone, err := tgt.Missing(ctx, ar, id, access)
		require.NoError(t, err)
		assert.Equal(t, "ClusterRoleBinding "+name, gone)
	})

	t.Run("a changed spec is granted again and what it no longer asks for is pruned", func(t *testing.T) {
		ar.Spec.Token.Permissions = ar.Spec.Token.Permissions[:1]
		require.NoError(t, tgt.Grant(ctx, ar, id, access, false))
		_, err := admin.RbacV1().Roles(team).Get(ctx, "openmcp:permission:"+id+":1", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "the Role of the dropped permission is deleted: %v", err)
		_, err = admin.RbacV1().RoleBindings(team).Get(ctx, "openmcp:permission:"+id+":1", metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "its RoleBinding too: %v", err)
		_, err = admin.CoreV1().Namespaces().Get(ctx, team, metav1.GetOptions{})
		assert.NoError(t, err, "a namespace is never the request's own: it stays")
		gone, err := tgt.Missing(ctx, ar, id, access)
		require.NoError(t, err)
		assert.Empty(t, gone, "the binding deleted by hand is made again")
	})

	t.Run("a fresh grant prunes nothing", func(t *testing.T) {
		stale := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "openmcp:permission:" + id + ":9", Labels: map[string]string{accessrequest.LabelRequestID: id}}}
		_, err := admin.RbacV1().ClusterRoles().Create(ctx, stale, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, tgt.Grant(ctx, ar, id, access, true))
		_, err = admin.RbacV1().ClusterRoles().Get(ctx, stale.Name, metav1.GetOptions{})
		assert.NoError(t, err)
		require.NoError(t, tgt.Grant(ctx, ar, id, access, false))
		_, err = admin.RbacV1().ClusterRoles().Get(ctx, stale.Name, metav1.GetOptions{})
		assert.True(t, apierrors.IsNotFound(err), "a grant that is not fresh prunes it: %v", err)
	})

	t.Run("a user-chosen name taken by someone else's object is refused", func(t *testing.T) {
		taken := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: team, Name: "taken"}}
		_, err := admin.RbacV1().Roles(team).Create(ctx, taken, metav1.CreateOptions{})
		require.NoError(t, err)
		conflict := ar.DeepCopy()
		conflict.Spec.Token.Permissions = append(conflict.Spec.Token.Permissions, clustersv1alpha1.PermissionsRequest{Namespace: team, Name: "taken", Rules: []rbacv1.PolicyRule{pods}})
		err = tgt.Grant(ctx, conflict, id, access, false)
		assert.Equal(t, accessrequest.ReasonNameConflict, kit.ReasonOf(err, ""), "%v", err)
		got, err := admin.RbacV1().Roles(team).Get(ctx, "taken", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Empty(t, got.Rules, "someone else's Role is not written")
	})

	t.Run("a request switched to OIDC loses its ServiceAccount", func(t *testing.T) {
		oidc := ar.DeepCopy()
		oidc.Spec.Token = nil
		oidc.Spec.OIDC = &clustersv1alpha1.OIDCConfig{Roles: []clustersv1alpha1.PermissionsRequest{{Rules: []rbacv1.PolicyRule{pods}}}}
		oidc.Spec.OIDC.Name, oidc.Spec.OIDC.Issuer, oidc.Spec.OIDC.ClientID = "idp", "https://idp.example.com", "client"
		require.NoError(t, tgt.Grant(ctx, oidc, id, access, false))
		sas, err := admin.CoreV1().ServiceAccounts("").List(ctx, byID)
		require.NoError(t, err)
		assert.Empty(t, sas.Items, "the old token's ServiceAccount is deleted with the token plan")
		croles, err := admin.RbacV1().ClusterRoles().List(ctx, byID)
		require.NoError(t, err)
		if assert.Len(t, croles.Items, 1) {
			assert.Equal(t, "openmcp:oidc-role:"+id+":0", croles.Items[0].Name)
		}
	})

	t.Run("revoking deletes every object of the request and none of another", func(t *testing.T) {
		require.NoError(t, tgt.Grant(ctx, ar, id, access, false))
		require.NoError(t, tgt.Revoke(ctx, id))
		sas, err := admin.CoreV1().ServiceAccounts("").List(ctx, byID)
		require.NoError(t, err)
		assert.Empty(t, sas.Items)
		roles, err := admin.RbacV1().Roles("").List(ctx, byID)
		require.NoError(t, err)
		assert.Empty(t, roles.Items)
		rbs, err := admin.RbacV1().RoleBindings("").List(ctx, byID)
		require.NoError(t, err)
		assert.Empty(t, rbs.Items)
		croles, err := admin.RbacV1().ClusterRoles().List(ctx, byID)
		require.NoError(t, err)
		assert.Empty(t, croles.Items)
		crbs, err := admin.RbacV1().ClusterRoleBindings().List(ctx, byID)
		require.NoError(t, err)
		assert.Empty(t, crbs.Items)
		_, err = admin.RbacV1().ClusterRoles().Get(ctx, other.Name, metav1.GetOptions{})
		assert.NoError(t, err, "another request's ClusterRole stays")
		_, err = admin.RbacV1().Roles(team).Get(ctx, "taken", metav1.GetOptions{})
		assert.NoError(t, err, "an object of no request stays")
		require.NoError(t, tgt.Revoke(ctx, id), "revoking again finds nothing to do")
	})
}

// assertApplied checks that m is labelled for the request with id and written by a server-side
// apply of the provider's field manager.
func assertApplied(t *testing.T, m metav1.ObjectMeta, id string) {
	t.Helper()
	assert.Equal(t, id, m.Labels[accessrequest.LabelRequestID])
	var managers []string
	for _, f := range m.ManagedFields {
		managers = append(managers, f.Manager+"/"+string(f.Operation))
	}
	assert.Contains(t, managers, accessrequest.FieldManager+"/"+string(metav1.ManagedFieldsOperationApply))
}
