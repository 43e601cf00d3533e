package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

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
