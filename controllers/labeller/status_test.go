package labeller

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

var resolved = target{Provider: "gardener", Profile: "gardener-prod", Cluster: types.NamespacedName{Namespace: "ns", Name: "c"}}

func TestSetResolution(t *testing.T) {
	tests := []struct {
		name        string
		phase       string
		observed    int64 // status.observedGeneration before; the request's generation is 3
		err         error
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
		wantPhase   string
	}{
		{
			name:        "resolved",
			wantStatus:  metav1.ConditionTrue,
			wantReason:  ReasonResolved,
			wantMessage: `ClusterProvider "gardener" is responsible: Cluster ns/c has ClusterProfile "gardener-prod"`,
			wantPhase:   common.PhasePending,
		},
		{
			name:        "waiting for the ClusterRequest",
			err:         kit.Errorf(ReasonWaitingForClusterRequest, "waiting for ClusterRequest ns/r"),
			wantStatus:  metav1.ConditionFalse,
			wantReason:  ReasonWaitingForClusterRequest,
			wantMessage: "waiting for ClusterRequest ns/r",
			wantPhase:   common.PhasePending,
		},
		{
			name:       "ClusterRequest not found",
			err:        kit.Errorf(ReasonClusterRequestNotFound, "ClusterRequest ns/r not found"),
			wantStatus: metav1.ConditionFalse, wantReason: ReasonClusterRequestNotFound,
			wantMessage: "ClusterRequest ns/r not found", wantPhase: common.PhasePending,
		},
		{
			name:       "Cluster not found, wrapped",
			err:        fmt.Errorf("resolving: %w", kit.Errorf(ReasonClusterNotFound, "Cluster ns/c not found")),
			wantStatus: metav1.ConditionFalse, wantReason: ReasonClusterNotFound,
			wantMessage: "resolving: Cluster ns/c not found", wantPhase: common.PhasePending,
		},
		{
			name:       "ClusterProfile not found",
			err:        kit.Errorf(ReasonClusterProfileNotFound, "ClusterProfile p not found"),
			wantStatus: metav1.ConditionFalse, wantReason: ReasonClusterProfileNotFound,
			wantMessage: "ClusterProfile p not found", wantPhase: common.PhasePending,
		},
		{
			name:       "label conflict",
			err:        kit.Errorf(ReasonLabelConflict, "label x is y"),
			wantStatus: metav1.ConditionFalse, wantReason: ReasonLabelConflict,
			wantMessage: "label x is y", wantPhase: common.PhasePending,
		},
		{
			name:       "no reference",
			err:        kit.Errorf(ReasonNoReference, "neither set"),
			wantStatus: metav1.ConditionFalse, wantReason: ReasonNoReference,
			wantMessage: "neither set", wantPhase: common.PhasePending,
		},
		{
			name:       "unexpected error",
			err:        errors.New("cache not synced"),
			wantStatus: metav1.ConditionUnknown, wantReason: ReasonResolutionFailed,
			wantMessage: "cache not synced", wantPhase: common.PhasePending,
		},
		{
			name:  "a provider's answer to the current generation is kept",
			phase: common.PhaseGranted, observed: 3,
			wantStatus: metav1.ConditionTrue, wantReason: ReasonResolved,
			wantMessage: resolved.String(), wantPhase: common.PhaseGranted,
		},
		{
			name:  "a Denied answer to the current generation is kept",
			phase: common.PhaseDenied, observed: 3,
			wantStatus: metav1.ConditionTrue, wantReason: ReasonResolved,
			wantMessage: resolved.String(), wantPhase: common.PhaseDenied,
		},
		{
			name:       "a Granted answer to an older generation goes back to Pending",
			phase:      common.PhaseGranted,
			wantStatus: metav1.ConditionTrue, wantReason: ReasonResolved,
			wantMessage: resolved.String(), wantPhase: common.PhasePending,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
			ar.Status.Phase = tt.phase
			ar.Status.ObservedGeneration = max(tt.observed, 1)
			setResolution(ar, resolved, tt.err)

			assert.Equal(t, tt.wantPhase, ar.Status.Phase)
			assert.EqualValues(t, 3, ar.Status.ObservedGeneration)
			require.Len(t, ar.Status.Conditions, 1)
			c := ar.Status.Conditions[0]
			assert.Equal(t, ConditionProviderResolved, c.Type)
			assert.Equal(t, tt.wantStatus, c.Status)
			assert.Equal(t, tt.wantReason, c.Reason)
			assert.Equal(t, tt.wantMessage, c.Message)
			assert.EqualValues(t, 3, c.ObservedGeneration)
		})
	}
}

// TestSetResolutionSteadyState checks what patchStatus relies on: the same outcome twice leaves
// the status semantically equal (no write), and other conditions are kept.
func TestSetResolutionSteadyState(t *testing.T) {
	ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	kit.SetCondition(&ar.Status.Status, 1, "Other", metav1.ConditionTrue, "Fine", "")
	waiting := kit.Errorf(ReasonClusterNotFound, "Cluster ns/c not found")

	setResolution(ar, target{}, waiting)
	before := ar.DeepCopy()
	setResolution(ar, target{}, waiting)
	assert.True(t, equality.Semantic.DeepEqual(before.Status, ar.Status), "a repeated outcome changes nothing")

	setResolution(ar, resolved, nil)
	assert.False(t, equality.Semantic.DeepEqual(before.Status, ar.Status))
	assert.True(t, meta.IsStatusConditionTrue(ar.Status.Conditions, ConditionProviderResolved))
	assert.NotNil(t, meta.FindStatusCondition(ar.Status.Conditions, "Other"), "other conditions are kept")
}
