package kit

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/api/constants"
)

func obj(gen int64, annotations map[string]string, deleting bool) *clustersv1alpha1.Cluster {
	c := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: gen, Annotations: annotations}}
	if deleting {
		now := metav1.Now()
		c.DeletionTimestamp = &now
	}
	return c
}

var (
	ignore       = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueIgnore}
	reconcileNow = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueReconcile}
)

func TestStandardFilterUpdates(t *testing.T) {
	tests := []struct {
		name     string
		old, new *clustersv1alpha1.Cluster
		want     bool
	}{
		{"status-only change", obj(1, nil, false), obj(1, nil, false), false},
		{"generation change", obj(1, nil, false), obj(2, nil, false), true},
		{"deletion started", obj(1, nil, false), obj(1, nil, true), true},
		{"got reconcile annotation", obj(1, nil, false), obj(1, reconcileNow, false), true},
		{"kept reconcile annotation", obj(1, reconcileNow, false), obj(1, reconcileNow, false), false},
		{"lost ignore annotation", obj(1, ignore, false), obj(1, nil, false), true},
		{"generation change while ignored", obj(1, ignore, false), obj(2, ignore, false), false},
		{"deletion while ignored", obj(1, ignore, false), obj(1, ignore, true), false},
		{"ignore replaced by reconcile", obj(1, ignore, false), obj(1, reconcileNow, false), true},
	}
	f := StandardFilter()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, f.Update(event.UpdateEvent{ObjectOld: tt.old, ObjectNew: tt.new}))
		})
	}
	assert.True(t, f.Create(event.CreateEvent{Object: obj(1, nil, false)}))
	assert.False(t, f.Create(event.CreateEvent{Object: obj(1, ignore, false)}))
	assert.True(t, f.Delete(event.DeleteEvent{Object: obj(1, nil, false)}))
}

func TestAnnotationsChanged(t *testing.T) {
	ask := func(v string) map[string]string { return map[string]string{"x/snapshot": v, "other": "o"} }
	tests := []struct {
		name     string
		old, new map[string]string
		want     bool
	}{
		{"set", nil, ask("now"), true},
		{"changed", ask("a"), ask("b"), true},
		{"removed", ask("now"), nil, true},
		{"the same", ask("now"), ask("now"), false},
		{"another annotation", map[string]string{"other": "1"}, map[string]string{"other": "2"}, false},
		{"set to empty", nil, ask(""), true},
	}
	f := StandardFilter(AnnotationsChanged("x/snapshot", "x/restore"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, f.Update(event.UpdateEvent{ObjectOld: obj(1, tt.old, false), ObjectNew: obj(1, tt.new, false)}))
		})
	}
	assert.False(t, f.Update(event.UpdateEvent{ObjectOld: obj(1, ignore, false), ObjectNew: obj(1, map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueIgnore, "x/restore": "s"}, false)}),
		"nothing passes while ignored")
}

func TestHasLabel(t *testing.T) {
	c := obj(1, nil, false)
	c.Labels = map[string]string{"p": "me", "q": ""}
	tests := []struct {
		key, value string
		want       bool
	}{
		{"p", "me", true},
		{"p", "", true},
		{"p", "you", false},
		{"q", "", true},
		{"r", "", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s=%s", tt.key, tt.value), func(t *testing.T) {
			assert.Equal(t, tt.want, HasLabel(tt.key, tt.value).Generic(event.GenericEvent{Object: c}))
		})
	}
}

func TestOperationOf(t *testing.T) {
	assert.Equal(t, OperationNone, OperationOf(obj(1, nil, false)))
	assert.Equal(t, OperationIgnore, OperationOf(obj(1, ignore, false)))
	assert.Equal(t, OperationReconcile, OperationOf(obj(1, reconcileNow, false)))
	assert.Equal(t, OperationNone, OperationOf(obj(1, map[string]string{constants.OperationAnnotation: "bogus"}, false)))
}

func TestReconciledPhase(t *testing.T) {
	tests := []struct {
		name     string
		conds    []metav1.ConditionStatus
		deleting bool
		want     string
	}{
		{"no conditions", nil, false, common.PhaseReady},
		{"all true", []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionTrue}, false, common.PhaseReady},
		{"one false", []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse}, false, common.PhaseProgressing},
		{"one unknown", []metav1.ConditionStatus{metav1.ConditionUnknown}, false, common.PhaseProgressing},
		{"deleting wins", []metav1.ConditionStatus{metav1.ConditionTrue}, true, common.PhaseTerminating},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &common.Status{}
			for i, st := range tt.conds {
				SetCondition(s, 3, fmt.Sprintf("C%d", i), st, "R", "m")
			}
			ReconciledPhase(s, 7, tt.deleting)
			assert.Equal(t, tt.want, s.Phase)
			assert.EqualValues(t, 7, s.ObservedGeneration)
		})
	}
	t.Run("an informational condition does not count", func(t *testing.T) {
		s := &common.Status{}
		SetCondition(s, 1, "Serving", metav1.ConditionTrue, "R", "m")
		SetCondition(s, 1, "VersionUpToDate", metav1.ConditionFalse, "Refused", "m")
		ReconciledPhase(s, 1, false, "VersionUpToDate")
		assert.Equal(t, common.PhaseReady, s.Phase)
		ReconciledPhase(s, 1, false)
		assert.Equal(t, common.PhaseProgressing, s.Phase)
	})
}

func TestSetConditionKeepsOthersAndTransitionTime(t *testing.T) {
	s := &common.Status{}
	SetCondition(s, 1, "A", metav1.ConditionFalse, "Waiting", "first")
	SetCondition(s, 1, "B", metav1.ConditionTrue, "Done", "b")
	first := s.Conditions[0].LastTransitionTime
	SetCondition(s, 2, "A", metav1.ConditionFalse, "StillWaiting", "second")
	assert.Len(t, s.Conditions, 2)
	assert.Equal(t, first, s.Conditions[0].LastTransitionTime, "same status keeps the transition time")
	assert.Equal(t, "StillWaiting", s.Conditions[0].Reason)
	assert.EqualValues(t, 2, s.Conditions[0].ObservedGeneration)
}

func TestReasonOf(t *testing.T) {
	err := fmt.Errorf("resolving: %w", Errorf("ClusterNotFound", "cluster %s not found", "x"))
	assert.Equal(t, "ClusterNotFound", ReasonOf(err, "Fallback"))
	assert.Equal(t, "resolving: cluster x not found", err.Error())
	assert.Equal(t, "Fallback", ReasonOf(errors.New("plain"), "Fallback"))
}
