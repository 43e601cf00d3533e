package accessrequest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// TestTargetApplyAndPrune drives the target's applier and prune against an API server (the test
// environment's, standing in for a Cluster's): a grant writes every object of the rendered list,
// a grant of a changed spec deletes what the spec no longer asks for, revoking deletes everything
// of the request and nothing of another. The steps run in order on one request.
func TestTargetApplyAndPrune(t *testing.T) {
	f := newTargetFixture(t)
	for _, step := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"a grant writes the rendered list with server-side apply", f.grantWrites},
		{"missing names what was deleted by hand", f.missingNames},
		{"the ServiceAccount of an earlier request of the same name is made anew", f.earlierServiceAccountReplaced},
		{"a changed spec is granted again and what it no longer asks for is pruned", f.changedSpecPrunes},
		{"a fresh grant prunes nothing", f.freshPrunesNothing},
		{"a user-chosen name taken by someone else's object is refused", f.takenNameRefused},
		{"a request switched to OIDC loses its ServiceAccount", f.oidcDropsServiceAccount},
		{"revoking deletes every object of the request and none of another", f.revokeDeletesAll},
	} {
		if !t.Run(step.name, step.run) {
			return // the next steps build on this one
		}
	}
}

// targetFixture is one token request, its target (the test API server) and another request's
// ClusterRole that nothing may touch.
type targetFixture struct {
	tgt          accessrequest.TestTarget
	admin        kubernetes.Interface
	ar           *clustersv1alpha1.AccessRequest
	id           string
	access, team string // the access namespace, and a permission's namespace
	byID         metav1.ListOptions
	pods         rbacv1.PolicyRule
	other        string
}

func newTargetFixture(t *testing.T) *targetFixture {
	tgt, err := accessrequest.NewTestTarget(env.Config)
	require.NoError(t, err)
	suffix := rand.String(6)
	f := &targetFixture{
		tgt: tgt, admin: kubernetes.NewForConfigOrDie(env.Config),
		ar:     &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dev-" + suffix}},
		id:     accessrequest.RequestID("env", "target-test", "ns", "dev-"+suffix),
		access: "access-" + suffix, team: "team-" + suffix,
		pods: rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
	}
	f.byID = metav1.ListOptions{LabelSelector: accessrequest.LabelRequestID + "=" + f.id}
	f.ar.Spec.Token = &clustersv1alpha1.TokenConfig{
		Permissions: []clustersv1alpha1.PermissionsRequest{{Rules: []rbacv1.PolicyRule{f.pods}}, {Namespace: f.team, Rules: []rbacv1.PolicyRule{f.pods}}},
		RoleRefs:    []common.RoleRef{{Kind: "ClusterRole", Name: "view"}},
	}
	otherID := accessrequest.RequestID("env", "target-test", "ns", "other-"+suffix)
	other, err := f.admin.RbacV1().ClusterRoles().Create(t.Context(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{
		Name: "openmcp:permission:" + otherID + ":0", Labels: map[string]string{accessrequest.LabelRequestID: otherID}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	f.other = other.Name
	t.Cleanup(func() {
		_ = f.admin.RbacV1().ClusterRoles().Delete(context.Background(), f.other, metav1.DeleteOptions{})
	})
	return f
}

func (f *targetFixture) grantWrites(t *testing.T) {
	ctx := t.Context()
	require.NoError(t, f.tgt.Grant(ctx, f.ar, f.id, f.access, true))
	for _, ns := range []string{f.access, f.team} {
		_, err := f.admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		assert.NoError(t, err, "namespace %s is created", ns)
	}
	sa, err := f.admin.CoreV1().ServiceAccounts(f.access).Get(ctx, "ar-"+f.id, metav1.GetOptions{})
	if assert.NoError(t, err) {
		assertApplied(t, sa.ObjectMeta, f.id)
	}
	role, err := f.admin.RbacV1().Roles(f.team).Get(ctx, "openmcp:permission:"+f.id+":1", metav1.GetOptions{})
	if assert.NoError(t, err) {
		assertApplied(t, role.ObjectMeta, f.id)
		assert.Equal(t, []rbacv1.PolicyRule{f.pods}, role.Rules)
	}
	crbs, err := f.admin.RbacV1().ClusterRoleBindings().List(ctx, f.byID)
	require.NoError(t, err)
	assert.Len(t, crbs.Items, 2, "the permission's binding and the roleRef's")
	f.assertComplete(t)
}

func (f *targetFixture) missingNames(t *testing.T) {
	name := "openmcp:roleref:" + f.id + ":0"
	require.NoError(t, f.admin.RbacV1().ClusterRoleBindings().Delete(t.Context(), name, metav1.DeleteOptions{}))
	gone, err := f.tgt.Missing(t.Context(), f.ar, f.id, f.access)
	require.NoError(t, err)
	assert.Equal(t, "ClusterRoleBinding "+name, gone)
}

// earlierServiceAccountReplaced: a grant takes over a ServiceAccount without a UID label (made
// before the label existed) and keeps one labelled with its own request's UID, but deletes and
// makes anew one labelled for an earlier request of the same name (a restore brings it back):
// the earlier request's tokens name the old one and must not work again.
func (f *targetFixture) earlierServiceAccountReplaced(t *testing.T) {
	ctx := t.Context()
	uidOf := func() types.UID {
		sa, err := f.admin.CoreV1().ServiceAccounts(f.access).Get(ctx, "ar-"+f.id, metav1.GetOptions{})
		require.NoError(t, err)
		return sa.UID
	}
	first := uidOf()
	f.ar.UID = "uid-earlier"
	require.NoError(t, f.tgt.Grant(ctx, f.ar, f.id, f.access, false))
	assert.Equal(t, first, uidOf(), "no UID label yet: taken over")
	require.NoError(t, f.tgt.Grant(ctx, f.ar, f.id, f.access, false))
	assert.Equal(t, first, uidOf(), "its own request's: kept")
	f.ar.UID = "uid-now" // the request was deleted and made again
	require.NoError(t, f.tgt.Grant(ctx, f.ar, f.id, f.access, false))
	assert.NotEqual(t, first, uidOf(), "an earlier request's: made anew")
	f.assertComplete(t)
}

func (f *targetFixture) changedSpecPrunes(t *testing.T) {
	ctx := t.Context()
	f.ar.Spec.Token.Permissions = f.ar.Spec.Token.Permissions[:1]
	require.NoError(t, f.tgt.Grant(ctx, f.ar, f.id, f.access, false))
	_, err := f.admin.RbacV1().Roles(f.team).Get(ctx, "openmcp:permission:"+f.id+":1", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the Role of the dropped permission is deleted: %v", err)
	_, err = f.admin.RbacV1().RoleBindings(f.team).Get(ctx, "openmcp:permission:"+f.id+":1", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "its RoleBinding too: %v", err)
	_, err = f.admin.CoreV1().Namespaces().Get(ctx, f.team, metav1.GetOptions{})
	assert.NoError(t, err, "a namespace is never the request's own: it stays")
	f.assertComplete(t) // the binding deleted by hand is made again
}

func (f *targetFixture) freshPrunesNothing(t *testing.T) {
	ctx := t.Context()
	stale := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "openmcp:permission:" + f.id + ":9", Labels: map[string]string{accessrequest.LabelRequestID: f.id}}}
	_, err := f.admin.RbacV1().ClusterRoles().Create(ctx, stale, metav1.CreateOptions{})
	require.NoError(t, err)
	require.NoError(t, f.tgt.Grant(ctx, f.ar, f.id, f.access, true))
	_, err = f.admin.RbacV1().ClusterRoles().Get(ctx, stale.Name, metav1.GetOptions{})
	assert.NoError(t, err)
	require.NoError(t, f.tgt.Grant(ctx, f.ar, f.id, f.access, false))
	_, err = f.admin.RbacV1().ClusterRoles().Get(ctx, stale.Name, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a grant that is not fresh prunes it: %v", err)
}

func (f *targetFixture) takenNameRefused(t *testing.T) {
	ctx := t.Context()
	_, err := f.admin.RbacV1().Roles(f.team).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: f.team, Name: "taken"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	conflict := f.ar.DeepCopy()
	conflict.Spec.Token.Permissions = append(conflict.Spec.Token.Permissions,
		clustersv1alpha1.PermissionsRequest{Namespace: f.team, Name: "taken", Rules: []rbacv1.PolicyRule{f.pods}})
	err = f.tgt.Grant(ctx, conflict, f.id, f.access, false)
	assert.Equal(t, accessrequest.ReasonNameConflict, kit.ReasonOf(err, ""), "%v", err)
	got, err := f.admin.RbacV1().Roles(f.team).Get(ctx, "taken", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, got.Rules, "someone else's Role is not written")
}

func (f *targetFixture) oidcDropsServiceAccount(t *testing.T) {
	ctx := t.Context()
	oidc := f.ar.DeepCopy()
	oidc.Spec.Token = nil
	oidc.Spec.OIDC = &clustersv1alpha1.OIDCConfig{Roles: []clustersv1alpha1.PermissionsRequest{{Rules: []rbacv1.PolicyRule{f.pods}}}}
	oidc.Spec.OIDC.Name, oidc.Spec.OIDC.Issuer, oidc.Spec.OIDC.ClientID = "idp", "https://idp.example.com", "client"
	require.NoError(t, f.tgt.Grant(ctx, oidc, f.id, f.access, false))
	sas, err := f.admin.CoreV1().ServiceAccounts("").List(ctx, f.byID)
	require.NoError(t, err)
	assert.Empty(t, sas.Items, "the old token's ServiceAccount goes with the token plan")
	croles, err := f.admin.RbacV1().ClusterRoles().List(ctx, f.byID)
	require.NoError(t, err)
	if assert.Len(t, croles.Items, 1) {
		assert.Equal(t, "openmcp:oidc-role:"+f.id+":0", croles.Items[0].Name)
	}
}

func (f *targetFixture) revokeDeletesAll(t *testing.T) {
	ctx := t.Context()
	require.NoError(t, f.tgt.Grant(ctx, f.ar, f.id, f.access, false))
	require.NoError(t, f.tgt.Revoke(ctx, f.id))
	dyn := dynamic.NewForConfigOrDie(env.Config)
	for _, r := range []schema.GroupVersionResource{
		corev1.SchemeGroupVersion.WithResource("serviceaccounts"),
		rbacv1.SchemeGroupVersion.WithResource("roles"), rbacv1.SchemeGroupVersion.WithResource("rolebindings"),
		rbacv1.SchemeGroupVersion.WithResource("clusterroles"), rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"),
	} {
		l, err := dyn.Resource(r).List(ctx, f.byID)
		if assert.NoError(t, err, r.Resource) {
			assert.Empty(t, l.Items, "no %s of the request is left", r.Resource)
		}
	}
	rbac := f.admin.RbacV1()
	_, err := rbac.ClusterRoles().Get(ctx, f.other, metav1.GetOptions{})
	assert.NoError(t, err, "another request's ClusterRole stays")
	_, err = rbac.Roles(f.team).Get(ctx, "taken", metav1.GetOptions{})
	assert.NoError(t, err, "an object of no request stays")
	require.NoError(t, f.tgt.Revoke(ctx, f.id), "revoking again finds nothing to do")
}

// assertComplete checks that the cluster holds the whole plan of the fixture's request.
func (f *targetFixture) assertComplete(t *testing.T) {
	t.Helper()
	gone, err := f.tgt.Missing(t.Context(), f.ar, f.id, f.access)
	require.NoError(t, err)
	assert.Empty(t, gone, "the cluster holds the whole plan")
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
