package accessrequest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

func TestSetPhase(t *testing.T) {
	tests := []struct {
		name       string
		set        func(ar *clustersv1alpha1.AccessRequest)
		wantPhase  string
		wantStatus metav1.ConditionStatus
		wantReason string
		wantSecret string
	}{
		{"pending", func(ar *clustersv1alpha1.AccessRequest) { setPending(ar, ReasonClusterNotReady, "waiting") },
			common.PhasePending, metav1.ConditionFalse, ReasonClusterNotReady, "old.kubeconfig"},
		{"denied clears the secret", func(ar *clustersv1alpha1.AccessRequest) { setDenied(ar, ReasonClusterGone, "gone") },
			common.PhaseDenied, metav1.ConditionFalse, ReasonClusterGone, ""},
		{"granted", func(ar *clustersv1alpha1.AccessRequest) { setGranted(ar, "x.kubeconfig", "ok") },
			common.PhaseGranted, metav1.ConditionTrue, ReasonGranted, "x.kubeconfig"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
			ar.Status.SecretRef = &common.LocalObjectReference{Name: "old.kubeconfig"}
			// A condition of the central labeller is kept.
			ar.Status.Conditions = []metav1.Condition{{Type: "ProviderResolved", Status: metav1.ConditionTrue, Reason: "Resolved"}}
			tt.set(ar)
			assert.Equal(t, tt.wantPhase, ar.Status.Phase)
			assert.EqualValues(t, 2, ar.Status.ObservedGeneration)
			assert.NotNil(t, meta.FindStatusCondition(ar.Status.Conditions, "ProviderResolved"))
			c := meta.FindStatusCondition(ar.Status.Conditions, ConditionGranted)
			if assert.NotNil(t, c) {
				assert.Equal(t, tt.wantStatus, c.Status)
				assert.Equal(t, tt.wantReason, c.Reason)
				assert.EqualValues(t, 2, c.ObservedGeneration)
			}
			if tt.wantSecret == "" {
				assert.Nil(t, ar.Status.SecretRef)
			} else if assert.NotNil(t, ar.Status.SecretRef) {
				assert.Equal(t, tt.wantSecret, ar.Status.SecretRef.Name)
			}
		})
	}
}

func TestHandles(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name              string
		phase             string
		gen, observed     int64
		deleting, handles bool
	}{
		// openMCP's handshake: Pending, or Granted for the current generation; the labeller sets
		// a new or changed request Pending first.
		{"new, not handed over yet", "", 1, 0, false, false},
		{"pending", common.PhasePending, 1, 1, false, true},
		{"pending, spec changed", common.PhasePending, 2, 1, false, true},
		{"granted", common.PhaseGranted, 1, 1, false, true},
		{"granted, spec changed: the labeller sets it Pending first", common.PhaseGranted, 2, 1, false, false},
		{"denied", common.PhaseDenied, 1, 1, false, false},
		{"denied, spec fixed: the labeller sets it Pending first", common.PhaseDenied, 2, 1, false, false},
		{"denied, deleted", common.PhaseDenied, 1, 1, true, true},
		{"granted, deleted", common.PhaseGranted, 2, 1, true, true},
		{"new, deleted", "", 1, 0, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Generation: tt.gen, Labels: map[string]string{
				clustersv1alpha1.ProviderLabel: "p", clustersv1alpha1.ProfileLabel: "e.p.c"}}}
			ar.Status.Phase, ar.Status.ObservedGeneration = tt.phase, tt.observed
			if tt.deleting {
				ar.DeletionTimestamp = &now
			}
			assert.Equal(t, tt.handles, handles(ar))
		})
	}
}
