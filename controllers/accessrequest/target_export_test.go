package accessrequest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// TestTarget gives the tests of package accessrequest_test, which hold the API server, the
// target's applier, prune and missing for the plan of a request.
type TestTarget struct{ t target }

// NewTestTarget is a target of the cluster cfg reaches.
func NewTestTarget(cfg *rest.Config) (TestTarget, error) {
	t, err := (&Reconciler{}).target(cfg)
	return TestTarget{t: t}, err
}

// planOf is the plan of ar's spec (token: its ServiceAccount in accessNamespace).
func planOf(ar *clustersv1alpha1.AccessRequest, id, accessNamespace string) plan {
	if ar.Spec.OIDC != nil {
		return planOIDC(ar, oidcConfig(ar), id)
	}
	return planToken(ar, id, accessNamespace)
}

// Grant grants ar's plan; fresh as for a request without a finalizer (nothing is pruned).
func (x TestTarget) Grant(ctx context.Context, ar *clustersv1alpha1.AccessRequest, id, accessNamespace string, fresh bool) error {
	return x.t.grant(ctx, planOf(ar, id, accessNamespace), fresh)
}

// Revoke revokes everything of the request with id.
func (x TestTarget) Revoke(ctx context.Context, id string) error { return x.t.revoke(ctx, id) }

// Missing says what of ar's plan the cluster does not hold.
func (x TestTarget) Missing(ctx context.Context, ar *clustersv1alpha1.AccessRequest, id, accessNamespace string) (string, error) {
	return x.t.missing(ctx, planOf(ar, id, accessNamespace), "")
}

// TestRender: a plan renders as one list in the order it is written, each namespace once, before
// what goes into it; the ServiceAccount before the bindings that name it.
func TestRender(t *testing.T) {
	ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dev"}}
	ar.Spec.Token = &clustersv1alpha1.TokenConfig{
		Permissions: []clustersv1alpha1.PermissionsRequest{
			{Namespace: "a"}, {Namespace: "access"}, {Namespace: "a", Name: "mine"}, {},
		},
	}
	var got []string
	for _, o := range planToken(ar, "id", "access").render() {
		got = append(got, kindOf(o.obj)+" "+qualified(o.meta.Namespace, o.meta.Name))
		if k, err := kindOfObject(o); assert.NoError(t, err) && k.owned {
			assert.Equal(t, "id", o.obj.GetLabels()[LabelRequestID], "an owned object carries the request's label")
		}
	}
	assert.Equal(t, []string{
		"Namespace access", "Namespace a", "ServiceAccount access/ar-id",
		"Role a/openmcp:permission:id:0", "RoleBinding a/openmcp:permission:id:0",
		"Role access/openmcp:permission:id:1", "RoleBinding access/openmcp:permission:id:1",
		"Role a/mine", "RoleBinding a/mine",
		"ClusterRole openmcp:permission:id:3", "ClusterRoleBinding openmcp:permission:id:3",
	}, got)

	ar.Spec.Token, ar.Spec.OIDC = nil, &clustersv1alpha1.OIDCConfig{Roles: []clustersv1alpha1.PermissionsRequest{{}}}
	ar.Spec.OIDC.Issuer, ar.Spec.OIDC.ClientID, ar.Spec.OIDC.Name = "https://idp.example.com", "c", "idp"
	got = nil
	for _, o := range planOf(ar, "id", "access").render() {
		got = append(got, kindOf(o.obj)+" "+qualified(o.meta.Namespace, o.meta.Name))
	}
	assert.Equal(t, []string{"ClusterRole openmcp:oidc-role:id:0"}, got, "an OIDC plan has no ServiceAccount")
}

// TestKinds: every kind a plan renders is in kinds, the owned ones in an order that deletes a
// binding before its role and the ServiceAccount last.
func TestKinds(t *testing.T) {
	var names []string
	for _, k := range kinds {
		names = append(names, k.name)
		assert.Equal(t, k.name != "Namespace", k.owned, k.name)
	}
	assert.Equal(t, []string{"RoleBinding", "ClusterRoleBinding", "Role", "ClusterRole", "ServiceAccount", "Namespace"}, names)
	_, err := kindOfObject(object{obj: &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}}})
	assert.ErrorContains(t, err, `cannot write kind "Secret"`)
}
