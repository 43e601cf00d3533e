package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// TestStatusSubresource checks, for every kind with a status, that the status is written only
// through the status subresource (a main-resource update leaves it alone) and that the status
// subresource does not change the spec or the generation.
func TestStatusSubresource(t *testing.T) {
	ns := env.Namespace(t)
	cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Test", Message: "set by the test"}
	tests := []struct {
		name      string
		obj       client.Object
		setStatus func(client.Object)
		status    func(client.Object) *common.Status
	}{
		{
			name: "Cluster",
			obj:  fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			setStatus: func(o client.Object) {
				c := o.(*clustersv1alpha1.Cluster)
				c.Status.APIServer = "https://127.0.0.1:6443"
				c.Status.ProviderStatus = &runtime.RawExtension{Raw: []byte(`{"backend":"local","pid":42}`)}
				c.Status.Endpoints = []clustersv1alpha1.Endpoint{{Name: "api", URL: "https://127.0.0.1:6443"}}
			},
			status: func(o client.Object) *common.Status { return &o.(*clustersv1alpha1.Cluster).Status.Status },
		},
		{
			name: "AccessRequest",
			obj:  fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			setStatus: func(o client.Object) {
				o.(*clustersv1alpha1.AccessRequest).Status.SecretRef = &common.LocalObjectReference{Name: "access"}
			},
			status: func(o client.Object) *common.Status { return &o.(*clustersv1alpha1.AccessRequest).Status.Status },
		},
		{
			name: "ClusterRequest",
			obj:  &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "cr-"}, Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "mcp"}},
			setStatus: func(o client.Object) {
				o.(*clustersv1alpha1.ClusterRequest).Status.Cluster = &common.ObjectReference{Name: "c1", Namespace: "ns1"}
			},
			status: func(o client.Object) *common.Status { return &o.(*clustersv1alpha1.ClusterRequest).Status.Status },
		},
		{
			name:      "ProviderConfig",
			obj:       fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			setStatus: func(o client.Object) { o.(*providersv1alpha1.ProviderConfig).Status.Profile = "default.local.pc" },
			status:    func(o client.Object) *common.Status { return &o.(*providersv1alpha1.ProviderConfig).Status.Status },
		},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.obj.DeepCopyObject().(client.Object)
			setNamespace(obj, ns)
			require.NoError(t, env.Client.Create(ctx, obj))
			generation := obj.GetGeneration()

			// A status written with a plain update is dropped.
			ignored := obj.DeepCopyObject().(client.Object)
			tt.status(ignored).Phase = "Ignored"
			require.NoError(t, env.Client.Update(ctx, ignored))
			assert.Empty(t, tt.status(ignored).Phase, "the main resource must not accept status")

			// The status subresource stores the whole status.
			want := ignored.DeepCopyObject().(client.Object)
			tt.setStatus(want)
			st := tt.status(want)
			st.ObservedGeneration = generation
			st.Phase = common.PhaseReady
			meta.SetStatusCondition(&st.Conditions, cond)
			require.NoError(t, env.Client.Status().Update(ctx, want))

			got := obj.DeepCopyObject().(client.Object)
			require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(obj), got))
			assert.Equal(t, generation, got.GetGeneration(), "a status write must not bump the generation")
			gotStatus := tt.status(got)
			assert.Equal(t, generation, gotStatus.ObservedGeneration)
			assert.Equal(t, common.PhaseReady, gotStatus.Phase)
			require.NotNil(t, meta.FindStatusCondition(gotStatus.Conditions, "Ready"))
			assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(gotStatus.Conditions, "Ready").Status)
			// The kind-specific fields round-trip too: compare them by re-applying setStatus.
			expected := got.DeepCopyObject().(client.Object)
			tt.setStatus(expected)
			assert.Equal(t, expected, got, "kind-specific status fields must be stored")
		})
	}
}

// TestClusterRequestStatusClusterImmutable: once set, status.cluster cannot be changed or removed
// (the scheduler's answer is final); the rest of the status can change. The first writes carry
// observedGeneration 0 and no phase: the Go types write both anyway, as the schema requires.
func TestClusterRequestStatusClusterImmutable(t *testing.T) {
	ctx := context.Background()
	cr := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: env.Namespace(t), Name: "cr"}, Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "mcp"}}
	require.NoError(t, env.Client.Create(ctx, cr))
	cr.Status.Phase = common.PhasePending
	require.NoError(t, env.Client.Status().Update(ctx, cr), "no cluster yet")
	cr.Status.Phase = common.PhaseGranted
	cr.Status.Cluster = &common.ObjectReference{Name: "c1", Namespace: "ns1"}
	require.NoError(t, env.Client.Status().Update(ctx, cr), "set once")
	meta.SetStatusCondition(&cr.Status.Conditions, metav1.Condition{Type: "Scheduled", Status: metav1.ConditionTrue, Reason: "Granted", Message: "m"})
	require.NoError(t, env.Client.Status().Update(ctx, cr), "other fields may change")

	for name, tt := range map[string]struct {
		change  func(*clustersv1alpha1.ClusterRequest)
		message string
	}{
		"changed":           {func(cr *clustersv1alpha1.ClusterRequest) { cr.Status.Cluster.Name = "c2" }, "status.cluster: Invalid value: cluster is immutable"},
		"namespace changed": {func(cr *clustersv1alpha1.ClusterRequest) { cr.Status.Cluster.Namespace = "ns2" }, "cluster is immutable"},
		"removed":           {func(cr *clustersv1alpha1.ClusterRequest) { cr.Status.Cluster = nil }, "cluster may not be removed once set"},
	} {
		t.Run(name, func(t *testing.T) {
			got := &clustersv1alpha1.ClusterRequest{}
			require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cr), got))
			tt.change(got)
			err := env.Client.Status().Update(ctx, got)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.message)
		})
	}
}

// TestStatusRequiresObservedGenerationAndPhase: as in openMCP, a status without observedGeneration
// or phase is rejected, for every kind with a status; so is a ClusterRequest's status.cluster
// without a namespace. The patches are raw, for the Go types always write these fields.
func TestStatusRequiresObservedGenerationAndPhase(t *testing.T) {
	ns := env.Namespace(t)
	ctx := context.Background()
	condition := `{"type":"Ready","status":"True","reason":"Test","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}`
	tests := []struct {
		name    string
		obj     client.Object
		patch   string
		message []string
	}{
		{
			name:    "Cluster without both",
			obj:     fromYAML(t, validCluster, &clustersv1alpha1.Cluster{}),
			patch:   `{"status":{"conditions":[` + condition + `]}}`,
			message: []string{"status.observedGeneration: Required value", "status.phase: Required value"},
		},
		{
			name:    "AccessRequest without phase",
			obj:     fromYAML(t, validTokenAccessRequest, &clustersv1alpha1.AccessRequest{}),
			patch:   `{"status":{"observedGeneration":1}}`,
			message: []string{"status.phase: Required value"},
		},
		{
			name:    "ClusterRequest without observedGeneration",
			obj:     &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "cr-"}, Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "mcp"}},
			patch:   `{"status":{"phase":"Pending"}}`,
			message: []string{"status.observedGeneration: Required value"},
		},
		{
			name:    "ClusterRequest with a cluster without namespace",
			obj:     &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{GenerateName: "cr-"}, Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "mcp"}},
			patch:   `{"status":{"observedGeneration":1,"phase":"Granted","cluster":{"name":"c1"}}}`,
			message: []string{"status.cluster.namespace: Required value"},
		},
		{
			name:    "ProviderConfig without both",
			obj:     fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{}),
			patch:   `{"status":{"profile":"default.local.pc"}}`,
			message: []string{"status.observedGeneration: Required value", "status.phase: Required value"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.obj.DeepCopyObject().(client.Object)
			setNamespace(obj, ns)
			require.NoError(t, env.Client.Create(ctx, obj))
			err := env.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(tt.patch)))
			require.Error(t, err)
			assert.True(t, apierrors.IsInvalid(err), "want Invalid, got %v", err)
			for _, m := range tt.message {
				assert.Contains(t, err.Error(), m)
			}
		})
	}
}
