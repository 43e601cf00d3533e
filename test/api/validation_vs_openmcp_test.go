package api

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

// TestCreateValidationOfRequiredFields checks, with manifests (the Go types always write these
// fields), that the fields openMCP requires are required: leaving one out, or setting a required
// list to null, is rejected.
func TestCreateValidationOfRequiredFields(t *testing.T) {
	tests := []struct {
		name     string
		manifest string
		message  string
	}{
		{
			name: "cluster without a profile",
			manifest: `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: Cluster
metadata: {generateName: cl-}
spec: {tenancy: Shared}`,
			message: "spec.profile: Required value",
		},
		{
			name: "cluster with an empty list of purposes",
			manifest: `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: Cluster
metadata: {generateName: cl-}
spec: {profile: default.local.p1, tenancy: Shared, purposes: []}`,
			message: "spec.purposes in body should have at least 1 items",
		},
		{
			name: "cluster profile without supportedVersions",
			manifest: `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: ClusterProfile
metadata: {generateName: default.local.cp-}
spec: {providerRef: {name: local}, providerConfigRef: {name: p1}}`,
			message: "spec.supportedVersions: Required value",
		},
		{
			name: "cluster profile with null supportedVersions",
			manifest: `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: ClusterProfile
metadata: {generateName: default.local.cp-}
spec: {providerRef: {name: local}, providerConfigRef: {name: p1}, supportedVersions: null}`,
			message: "spec.supportedVersions: Required value",
		},
		{
			name: "access request clusterRef without a namespace",
			manifest: `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: AccessRequest
metadata: {generateName: ar-}
spec: {clusterRef: {name: c1}, token: {}}`,
			message: "spec.clusterRef.namespace: Required value",
		},
		{
			name: "access request requestRef without a namespace",
			manifest: `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: AccessRequest
metadata: {generateName: ar-}
spec: {requestRef: {name: r1}, token: {}}`,
			message: "spec.requestRef.namespace: Required value",
		},
		{
			name: "oidc access request without roleBindings",
			manifest: `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: AccessRequest
metadata: {generateName: ar-}
spec:
  clusterRef: {name: c1, namespace: ns1}
  oidc: {name: my-oidc, issuer: https://oidc.example.com, clientID: my-client}`,
			message: "spec.oidc.roleBindings: Required value",
		},
	}
	ctx := context.Background()
	ns := env.Namespace(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := fromYAML(t, tt.manifest, &unstructured.Unstructured{})
			setNamespace(obj, ns)
			err := env.Client.Create(ctx, obj)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			assert.Contains(t, err.Error(), tt.message)
		})
	}
}

// TestCreateAcceptsWhatOpenMCPAccepts: objects that openMCP's CRDs accept and that this
// provider's controllers handle (with a condition saying what is wrong, or by ignoring a field
// they do not use) are accepted; this provider once rejected each of them.
func TestCreateAcceptsWhatOpenMCPAccepts(t *testing.T) {
	tests := []struct {
		name   string
		obj    client.Object
		mutate func(client.Object)
	}{
		{
			name:   "access request with a ttl of zero (deleted at once)",
			obj:    fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.TTL = &metav1.Duration{} },
		},
		{
			name:   "access request without any reference (waits with reason NoReference)",
			obj:    fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.ClusterRef = nil },
		},
		{
			name: "access request with an empty reference namespace (the request's own)",
			obj:  fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.AccessRequest).Spec.ClusterRef = &common.ObjectReference{Name: "c1"}
			},
		},
		{
			name: "role ref of kind Role without a namespace (denied with reason InvalidPermissions)",
			obj:  fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.AccessRequest).Spec.Token.RoleRefs[0].Kind = "Role"
			},
		},
		{
			name: "oidc issuer with http (denied with reason InvalidOIDC)",
			obj:  fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.Issuer = "http://oidc.example.com"
			},
		},
		{
			name: "oidc with a long client ID",
			obj:  fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.ClientID = strings.Repeat("c", 1000)
			},
		},
		{
			name:   "cluster with an empty profile (no provider serves it)",
			obj:    fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			mutate: func(o client.Object) { o.(*clustersv1alpha1.Cluster).Spec.Profile = "" },
		},
		{
			name: "cluster with clusterConfigs",
			obj:  fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.Cluster).Spec.ClusterConfigs = []corev1.LocalObjectReference{{Name: "a"}, {Name: "b"}}
			},
		},
	}
	ctx := context.Background()
	ns := env.Namespace(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.obj.DeepCopyObject().(client.Object)
			setNamespace(obj, ns)
			tt.mutate(obj)
			require.NoError(t, env.Client.Create(ctx, obj))
		})
	}

	t.Run("access request without spec", func(t *testing.T) {
		obj := fromYAML(t, "{apiVersion: clusters.openmcp.cloud/v1alpha1, kind: AccessRequest, metadata: {generateName: ar-}}", &unstructured.Unstructured{})
		setNamespace(obj, ns)
		require.NoError(t, env.Client.Create(ctx, obj))
	})
}

// TestGoTypesWriteRequiredFields: objects built in Go with the required lists left nil are
// accepted, for the Go types write them as []. The provider publishes a ClusterProfile without
// versions when its backend serves none, and OIDC requests often have no role bindings.
func TestGoTypesWriteRequiredFields(t *testing.T) {
	ctx := context.Background()
	ns := env.Namespace(t)

	cp := &clustersv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "default.local.cp-"},
		Spec: clustersv1alpha1.ClusterProfileSpec{
			ProviderRef:       common.LocalObjectReference{Name: "local"},
			ProviderConfigRef: common.LocalObjectReference{Name: "p1"},
		},
	}
	require.NoError(t, env.Client.Create(ctx, cp), "a ClusterProfile without versions")
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(clustersv1alpha1.GroupVersion.WithKind("ClusterProfile"))
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cp), got))
	versions, found, err := unstructured.NestedSlice(got.Object, "spec", "supportedVersions")
	require.NoError(t, err)
	assert.True(t, found, "supportedVersions is stored")
	assert.Empty(t, versions)

	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "ar-"},
		Spec: clustersv1alpha1.AccessRequestSpec{
			ClusterRef: &common.ObjectReference{Name: "c1"},
			OIDC: &clustersv1alpha1.OIDCConfig{OIDCProviderConfig: common.OIDCProviderConfig{
				Name: "my-oidc", Issuer: "https://oidc.example.com", ClientID: "my-client",
			}},
		},
	}
	require.NoError(t, env.Client.Create(ctx, ar), "an OIDC AccessRequest without role bindings, its clusterRef without a namespace")

	// openMCP's defaults for the claims are applied by the API server.
	stored := &clustersv1alpha1.AccessRequest{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(ar), stored))
	assert.Equal(t, common.DefaultOIDCUsernameClaim, stored.Spec.OIDC.UsernameClaim)
	assert.Equal(t, common.DefaultOIDCGroupsClaim, stored.Spec.OIDC.GroupsClaim)
	assert.Empty(t, stored.Spec.OIDC.RoleBindings)
}
