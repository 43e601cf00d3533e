package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

func TestSetNoBackend(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name      string
		deleting  bool
		wantPhase string
	}{
		{"live cluster", false, common.PhaseProgressing},
		{"deleting cluster", true, common.PhaseTerminating},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Generation: 4}}
			if tt.deleting {
				cl.DeletionTimestamp = &now
			}
			setNoBackend(cl)
			assert.Equal(t, tt.wantPhase, cl.Status.Phase)
			assert.EqualValues(t, 4, cl.Status.ObservedGeneration)
			c := meta.FindStatusCondition(cl.Status.Conditions, ConditionProvisioned)
			if assert.NotNil(t, c) {
				assert.Equal(t, metav1.ConditionFalse, c.Status)
				assert.Equal(t, ReasonNoBackend, c.Reason)
				assert.EqualValues(t, 4, c.ObservedGeneration)
			}
		})
	}
}
