package api

import (
	"context"
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
			name: "hibernation of a kind provider config",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				pc := o.(*providersv1alpha1.ProviderConfig)
				pc.Spec.Backend, pc.Spec.Local = providersv1alpha1.BackendKind, nil
				pc.Spec.Hibernation = &providersv1alpha1.HibernationPolicy{}
			},
			message: "spec.hibernation is only supported with backends local and hosted",
		},
		{
			name: "a pool of a hosted provider config",
			obj:  fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			mutate: func(o client.Object) {
				pc := o.(*providersv1alpha1.ProviderConfig)
				pc.Spec.Backend, pc.Spec.Local = providersv1alpha1.BackendHosted, nil
				pc.Spec.Hosted = &providersv1alpha1.HostedBackendConfig{}
				pc.Spec.Pool = &providersv1alpha1.PoolPolicy{Size: 2}
			},
			message: "spec.pool",
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
