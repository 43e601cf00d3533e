package accessrequest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

func TestSetPendingNotImplemented(t *testing.T) {
	ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	// A condition of the central labeller is kept.
	ar.Status.Conditions = []metav1.Condition{{Type: "ProviderResolved", Status: metav1.ConditionTrue, Reason: "Resolved"}}
	setPendingNotImplemented(ar)
	assert.Equal(t, common.PhasePending, ar.Status.Phase)
	assert.EqualValues(t, 2, ar.Status.ObservedGeneration)
	assert.NotNil(t, meta.FindStatusCondition(ar.Status.Conditions, "ProviderResolved"))
	c := meta.FindStatusCondition(ar.Status.Conditions, ConditionGranted)
	if assert.NotNil(t, c) {
		assert.Equal(t, metav1.ConditionFalse, c.Status)
		assert.Equal(t, ReasonNotImplemented, c.Reason)
	}
}

func TestProfileOf(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"prepared for me", map[string]string{clustersv1alpha1.ProviderLabel: "me", clustersv1alpha1.ProfileLabel: "p"}, "p"},
		{"prepared for another provider", map[string]string{clustersv1alpha1.ProviderLabel: "you", clustersv1alpha1.ProfileLabel: "p"}, ""},
		{"not prepared", nil, ""},
		{"provider label only", map[string]string{clustersv1alpha1.ProviderLabel: "me"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels}}
			assert.Equal(t, tt.want, ProfileOf(ar, "me"))
		})
	}
}
