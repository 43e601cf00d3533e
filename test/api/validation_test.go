package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

const validTokenAccessRequest = `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: AccessRequest
metadata: {generateName: ar-}
spec:
  clusterRef: {name: c1, namespace: ns1}
  token:
    roleRefs: [{kind: ClusterRole, name: view}]
`

const validOIDCAccessRequest = `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: AccessRequest
metadata: {generateName: ar-}
spec:
  requestRef: {name: r1, namespace: ns1}
  oidc:
    name: my-oidc
    issuer: https://oidc.example.com
    clientID: my-client
`

const validCluster = `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: Cluster
metadata: {generateName: cl-}
spec:
  profile: default.local.p1
  tenancy: Shared
`

const validProviderConfig = `
apiVersion: providers.clusters.openmcp.cloud/v1alpha1
kind: ProviderConfig
metadata: {generateName: pc-}
spec:
  backend: local
  supportedVersions: [{version: 1.37.1}]
`

// TestCreateValidation checks that each admission rule rejects a violating object on create,
// with a message that tells the user what to fix.
func TestCreateValidation(t *testing.T) {
	tests := []struct {
		name    string
		obj     client.Object
		mutate  func(client.Object)
		message string
	}{
		{
			name: "access request with token and oidc",
			obj:  fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.AccessRequest).Spec.OIDC = fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}).Spec.OIDC
			},
			message: "exactly one of spec.token and spec.oidc must be set",
		},
		{
			name: "access request with a ttl of zero",
			obj:  fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.AccessRequest).Spec.TTL = &metav1.Duration{}
			},
			message: "ttl must be positive",
		},
		{
			name: "provider config allowing an http issuer",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				o.(*providersv1alpha1.ProviderConfig).Spec.OIDC = &providersv1alpha1.OIDCSettings{AllowedIssuers: []string{"http://idp.example.com"}}
			},
			message: "allowedIssuers entries must be https URLs",
		},
		{
			name:    "access request with neither token nor oidc",
			obj:     fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.Token = nil },
			message: "exactly one of spec.token and spec.oidc must be set",
		},
		{
			name:    "access request without any reference",
			obj:     fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.ClusterRef = nil },
			message: "at least one of spec.clusterRef and spec.requestRef must be set",
		},
		{
			name:    "oidc issuer with a non-http scheme",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.Issuer = "ftp://oidc.example.com" },
			message: "issuer must be an http or https URL",
		},
		{
			name:    "oidc issuer that is no URL",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.Issuer = "oidc.example.com" },
			message: "issuer must be an http or https URL",
		},
		{
			name:    "oidc with an empty client ID",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.ClientID = "" },
			message: "clientID must not be empty",
		},
		{
			name:    "oidc name that is no DNS subdomain",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.Name = "My_OIDC" },
			message: "name must be a DNS subdomain",
		},
		{
			name: "role ref of kind Role without a namespace",
			obj:  fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.AccessRequest).Spec.Token.RoleRefs[0].Kind = "Role"
			},
			message: "a roleRef of kind Role needs a namespace",
		},
		{
			name:    "cluster without a profile",
			obj:     fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.Cluster).Spec.Profile = "" },
			message: "spec.profile",
		},
		{
			name:    "cluster with an unknown tenancy",
			obj:     fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.Cluster).Spec.Tenancy = "Private" },
			message: `spec.tenancy: Unsupported value: "Private": supported values: "Exclusive", "Shared"`,
		},
		{
			name:    "provider config with an unknown backend",
			obj:     fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate:  func(o client.Object) { o.(*providersv1alpha1.ProviderConfig).Spec.Backend = "docker" },
			message: `spec.backend: Unsupported value: "docker": supported values: "local", "kind"`,
		},
		{
			name:    "provider config without a backend",
			obj:     fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate:  func(o client.Object) { o.(*providersv1alpha1.ProviderConfig).Spec.Backend = "" },
			message: "spec.backend",
		},
		{
			name: "provider config with settings of another backend",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				o.(*providersv1alpha1.ProviderConfig).Spec.Kind = &providersv1alpha1.KindBackendConfig{}
			},
			message: "spec.kind is only allowed with backend kind",
		},
	}
	ctx := context.Background()
	ns := env.Namespace(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			valid := tt.obj.DeepCopyObject().(client.Object)
			setNamespace(valid, ns)
			require.NoError(t, env.Client.Create(ctx, valid), "the unmodified object must be valid")

			bad := tt.obj.DeepCopyObject().(client.Object)
			setNamespace(bad, ns)
			tt.mutate(bad)
			err := env.Client.Create(ctx, bad)
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			assert.Contains(t, err.Error(), tt.message)
		})
	}
}

// TestUpdateValidation checks the immutability rules: each starts from a valid object, changes
// one field and expects the update to be rejected with its message. Changes that the rules must
// allow (filling an empty clusterRef, as the central labeller does) are accepted.
func TestUpdateValidation(t *testing.T) {
	tests := []struct {
		name    string
		obj     client.Object
		mutate  func(client.Object)
		message string // empty: the update must succeed
	}{
		{
			name:    "cluster profile change",
			obj:     fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.Cluster).Spec.Profile = "default.local.other" },
			message: "spec.profile is immutable",
		},
		{
			name:   "cluster purposes change",
			obj:    fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			mutate: func(o client.Object) { o.(*clustersv1alpha1.Cluster).Spec.Purposes = []string{"mcp"} },
		},
		{
			name:    "access request clusterRef change",
			obj:     fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.ClusterRef.Name = "c2" },
			message: "spec.clusterRef is immutable once set",
		},
		{
			name: "access request clusterRef removal",
			obj:  fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				ar := o.(*clustersv1alpha1.AccessRequest)
				ar.Spec.RequestRef = ar.Spec.ClusterRef.DeepCopy()
				ar.Spec.ClusterRef = nil
			},
			message: "spec.clusterRef is immutable once set",
		},
		{
			name:    "access request requestRef change",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.RequestRef.Namespace = "ns2" },
			message: "spec.requestRef is immutable once set",
		},
		{
			name: "access request clusterRef filled in from the request",
			obj:  fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.AccessRequest).Spec.ClusterRef = &common.ObjectReference{Name: "c1", Namespace: "ns1"}
			},
		},
		{
			name:    "cluster request purpose change",
			obj:     &clustersv1alpha1.ClusterRequest{Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "mcp"}},
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.ClusterRequest).Spec.Purpose = "workload" },
			message: "spec.purpose is immutable",
		},
		{
			name: "provider config backend change",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				o.(*providersv1alpha1.ProviderConfig).Spec.Backend = providersv1alpha1.BackendKind
			},
			message: "spec.backend is immutable",
		},
		{
			name: "provider config versions change",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				o.(*providersv1alpha1.ProviderConfig).Spec.SupportedVersions = []clustersv1alpha1.SupportedK8sVersion{{Version: "1.36.0"}}
			},
		},
	}
	ctx := context.Background()
	ns := env.Namespace(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.obj.DeepCopyObject().(client.Object)
			setNamespace(obj, ns)
			if obj.GetName() == "" && obj.GetGenerateName() == "" {
				obj.SetGenerateName("obj-")
			}
			require.NoError(t, env.Client.Create(ctx, obj))
			tt.mutate(obj)
			err := env.Client.Update(ctx, obj)
			if tt.message == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			assert.Contains(t, err.Error(), tt.message)
		})
	}
}

// setNamespace puts namespaced objects into ns; cluster-scoped kinds are left alone.
func setNamespace(obj client.Object, ns string) {
	if _, ok := obj.(*providersv1alpha1.ProviderConfig); ok {
		return
	}
	obj.SetNamespace(ns)
}
