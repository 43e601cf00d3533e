package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
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
    roleBindings: []
`

const validCluster = `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: Cluster
metadata: {generateName: cl-}
spec:
  profile: default.local.p1
  tenancy: Shared
`

const validClusterProfile = `
apiVersion: clusters.openmcp.cloud/v1alpha1
kind: ClusterProfile
metadata: {generateName: default.local.cp-}
spec:
  providerRef: {name: local}
  providerConfigRef: {name: p1}
  supportedVersions: [{version: 1.37.1}]
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
			message: "exactly one of spec.token or spec.oidc must be set",
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
			message: "exactly one of spec.token or spec.oidc must be set",
		},
		{
			name:    "oidc issuer with a non-http scheme",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.Issuer = "ftp://oidc.example.com" },
			message: "spec.oidc.issuer in body should match",
		},
		{
			name:    "oidc issuer that is no URL",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.Issuer = "oidc.example.com" },
			message: "spec.oidc.issuer in body should match",
		},
		{
			name:    "oidc with an empty client ID",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.ClientID = "" },
			message: "spec.oidc.clientID in body should be at least 1 chars long",
		},
		{
			name:    "oidc name that is no DNS subdomain",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.Name = "My_OIDC" },
			message: "spec.oidc.name in body should match",
		},
		{
			name:    "oidc name system, which openMCP reserves",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.OIDC.Name = "system" },
			message: "'system' is a reserved string and may not be used as OIDC provider name",
		},
		{
			name: "cluster profile with a version shorter than 5 characters",
			obj:  fromYAML(t, validClusterProfile, &clustersv1alpha1.ClusterProfile{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.ClusterProfile).Spec.SupportedVersions = []clustersv1alpha1.SupportedK8sVersion{{Version: "1.37"}}
			},
			message: "spec.supportedVersions[0].version in body should be at least 5 chars long",
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
		{
			name: "provider config with a backup interval under a minute",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				o.(*providersv1alpha1.ProviderConfig).Spec.Backup = &providersv1alpha1.BackupPolicy{Interval: &metav1.Duration{Duration: 30 * time.Second}}
			},
			message: "backup.interval must be at least 1m",
		},
		{
			name: "a highly available hosted provider config without a storage class",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				pc := o.(*providersv1alpha1.ProviderConfig)
				pc.Spec.Backend, pc.Spec.Local = providersv1alpha1.BackendHosted, nil
				pc.Spec.Hosted = &providersv1alpha1.HostedBackendConfig{HighAvailability: true}
			},
			message: "spec.hosted.highAvailability needs spec.hosted.storageClassName",
		},
		{
			name: "hosted source ranges that are no CIDRs",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				pc := o.(*providersv1alpha1.ProviderConfig)
				pc.Spec.Backend, pc.Spec.Local = providersv1alpha1.BackendHosted, nil
				pc.Spec.Hosted = &providersv1alpha1.HostedBackendConfig{Exposure: corev1.ServiceTypeLoadBalancer,
					AllowedSourceRanges: []string{"203.0.113.0/24", "203.0.113.7"}}
			},
			message: "spec.hosted.allowedSourceRanges entries must be CIDRs",
		},
		{
			name: "hosted source ranges on NodePort without an external host",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				pc := o.(*providersv1alpha1.ProviderConfig)
				pc.Spec.Backend, pc.Spec.Local = providersv1alpha1.BackendHosted, nil
				pc.Spec.Hosted = &providersv1alpha1.HostedBackendConfig{AllowedSourceRanges: []string{"203.0.113.0/24"}}
			},
			message: "spec.hosted.allowedSourceRanges with NodePort exposure needs spec.hosted.externalHost",
		},
		{
			name: "a hosted cap of no Cluster per namespace",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				pc := o.(*providersv1alpha1.ProviderConfig)
				pc.Spec.Backend, pc.Spec.Local = providersv1alpha1.BackendHosted, nil
				pc.Spec.Hosted = &providersv1alpha1.HostedBackendConfig{MaxClusters: ptr.To[int32](0)}
			},
			message: "spec.hosted.maxClusters: Invalid value: 0: spec.hosted.maxClusters in body should be greater than or equal to 1",
		},
		{
			name: "provider config keeping too many backups",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				o.(*providersv1alpha1.ProviderConfig).Spec.Backup = &providersv1alpha1.BackupPolicy{Keep: 1001}
			},
			message: "spec.backup.keep: Invalid value: 1001: spec.backup.keep in body should be less than or equal to 1000",
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

// TestHostedSourceRangesAccepted: source ranges with LoadBalancer exposure, or with NodePort and
// an external host, IPv4 and IPv6, are accepted (the refusals are in TestCreateValidation's table).
func TestHostedSourceRangesAccepted(t *testing.T) {
	for name, hosted := range map[string]*providersv1alpha1.HostedBackendConfig{
		"load balancer": {Exposure: corev1.ServiceTypeLoadBalancer, AllowedSourceRanges: []string{"203.0.113.0/24", "2001:db8::/32"}},
		"node port":     {ExternalHost: "lb.example.com", AllowedSourceRanges: []string{"198.51.100.0/24"}},
	} {
		t.Run(name, func(t *testing.T) {
			pc := fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{})
			pc.Spec.Backend, pc.Spec.Local, pc.Spec.Hosted = providersv1alpha1.BackendHosted, nil, hosted
			require.NoError(t, env.Client.Create(context.Background(), pc, client.DryRunAll))
		})
	}
}

// TestHostedMaxClustersAccepted: a cap of one Cluster per namespace, the least, is accepted (0 is
// refused in TestCreateValidation's table).
func TestHostedMaxClustersAccepted(t *testing.T) {
	pc := fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{})
	pc.Spec.Backend, pc.Spec.Local = providersv1alpha1.BackendHosted, nil
	pc.Spec.Hosted = &providersv1alpha1.HostedBackendConfig{MaxClusters: ptr.To[int32](1)}
	require.NoError(t, env.Client.Create(context.Background(), pc, client.DryRunAll))
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
			message: "profile is immutable",
		},
		{
			name:   "cluster purposes change",
			obj:    fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			mutate: func(o client.Object) { o.(*clustersv1alpha1.Cluster).Spec.Purposes = []string{"mcp"} },
		},
		{
			name: "cluster clusterConfigs change",
			obj:  fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.Cluster).Spec.ClusterConfigs = []corev1.LocalObjectReference{{Name: "config"}}
			},
		},
		{
			name:    "access request clusterRef change",
			obj:     fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.ClusterRef.Name = "c2" },
			message: "spec.clusterRef: Invalid value: clusterRef is immutable",
		},
		{
			name: "access request clusterRef removal",
			obj:  fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				ar := o.(*clustersv1alpha1.AccessRequest)
				ar.Spec.RequestRef = ar.Spec.ClusterRef.DeepCopy()
				ar.Spec.ClusterRef = nil
			},
			message: "clusterRef may not be removed once set",
		},
		{
			name:    "access request requestRef change",
			obj:     fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate:  func(o client.Object) { o.(*clustersv1alpha1.AccessRequest).Spec.RequestRef.Namespace = "ns2" },
			message: "spec.requestRef: Invalid value: requestRef is immutable",
		},
		{
			name: "access request requestRef removal",
			obj:  fromYAML(t, validOIDCAccessRequest, &clustersv1alpha1.AccessRequest{}),
			mutate: func(o client.Object) {
				ar := o.(*clustersv1alpha1.AccessRequest)
				ar.Spec.ClusterRef = ar.Spec.RequestRef.DeepCopy()
				ar.Spec.RequestRef = nil
			},
			message: "requestRef may not be removed once set",
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
			message: "spec is immutable",
		},
		{
			name: "cluster request waitForClusterDeletion set later",
			obj:  &clustersv1alpha1.ClusterRequest{Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "mcp"}},
			mutate: func(o client.Object) {
				o.(*clustersv1alpha1.ClusterRequest).Spec.WaitForClusterDeletion = ptr.To(true)
			},
			message: "spec is immutable",
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
	switch obj.(type) {
	case *providersv1alpha1.ProviderConfig, *clustersv1alpha1.ClusterProfile:
		return
	}
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == "ClusterProfile" {
		return
	}
	obj.SetNamespace(ns)
}

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
