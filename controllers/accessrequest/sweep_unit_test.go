package accessrequest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
)

// TestJudge: which objects of the cluster the sweep deletes, and which it keeps.
func TestJudge(t *testing.T) {
	const env, provider = "default", "me"
	live := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "viewer", UID: "uid-now"},
		Spec:       clustersv1alpha1.AccessRequestSpec{ClusterRef: &common.ObjectReference{Name: "c"}, Token: &clustersv1alpha1.TokenConfig{}},
	}
	made := func(ar *clustersv1alpha1.AccessRequest) grantRef {
		id := RequestID(env, provider, ar.Namespace, ar.Name)
		p := planToken(ar, id, DefaultNamespace)
		return grantRef{kind: "ServiceAccount", namespace: DefaultNamespace, name: "ar-" + id, labels: p.labels, annotations: p.annotations}
	}
	earlier := live.DeepCopy()
	earlier.UID = "uid-before"
	long := live.DeepCopy()
	long.Name = "a-name-longer-than-a-label-value-may-be-" + "0123456789012345678901234567890123456789"
	withoutUID := live.DeepCopy()
	withoutUID.UID = "" // made before the UID label existed

	tests := []struct {
		name string
		obj  grantRef
		ar   *clustersv1alpha1.AccessRequest
		want verdict
	}{
		{"its request exists: kept", made(live), live, keep},
		{"its request is gone: deleted", made(live), nil, orphan},
		{"made for an earlier request of the same name: deleted", made(earlier), live, orphan},
		{"no UID label (made before it existed), its request exists: kept", made(withoutUID), live, keep},
		{"no UID label, its request is gone: deleted", made(withoutUID), nil, orphan},
		{"a long name, only in the annotation: kept", made(long), long, keep},
		{"a long name, its request gone: deleted", made(long), nil, orphan},
		{"another environment's: left alone", func() grantRef {
			o := made(live)
			o.labels = maps(o.labels, LabelRequestID, RequestID("prod", provider, "team", "viewer"))
			return o
		}(), nil, unmatched},
		{"another provider's: left alone", func() grantRef {
			o := made(live)
			o.labels = maps(o.labels, LabelRequestID, RequestID(env, "other", "team", "viewer"))
			return o
		}(), nil, unmatched},
		{"labels edited to name another request: left alone", func() grantRef {
			o := made(live)
			o.annotations = map[string]string{AnnotationRequestName: "team/other"}
			return o
		}(), nil, unmatched},
		{"only the ID label (nothing names the request): left alone", grantRef{kind: "ClusterRole", name: "x",
			labels: map[string]string{LabelRequestID: RequestID(env, provider, "team", "viewer"), LabelManagedBy: ManagedByValue}}, nil, unmatched},
		{"no annotation, the labels name the request: judged by them", func() grantRef {
			o := made(live)
			o.annotations = nil
			return o
		}(), nil, orphan},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, judge(tt.obj, tt.ar, env, provider))
		})
	}
}

// maps is m with key set to value, m unchanged.
func maps(m map[string]string, key, value string) map[string]string {
	out := map[string]string{key: value}
	for k, v := range m {
		if k != key {
			out[k] = v
		}
	}
	return out
}

// TestSweepMarker: a restore done or a loss of data marks the Cluster; each restore its own mark,
// the same condition read again the same mark.
func TestSweepMarker(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 27, 15, 0, 0, 0, time.UTC))
	with := func(conds ...metav1.Condition) *clustersv1alpha1.Cluster {
		cl := &clustersv1alpha1.Cluster{}
		cl.Status.Conditions = conds
		return cl
	}
	restored := func(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: cluster.ConditionRestored, Status: status, Reason: reason, Message: msg, LastTransitionTime: at}
	}
	lost := metav1.Condition{Type: cluster.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: cluster.ReasonDataLost, Message: "gone at 15:00", LastTransitionTime: at}
	provisioned := metav1.Condition{Type: cluster.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: "Provisioned", LastTransitionTime: at}

	assert.Empty(t, SweepMarker(with()), "never restored")
	assert.Empty(t, SweepMarker(with(provisioned)), "provisioned, nothing lost")
	assert.Empty(t, SweepMarker(with(restored(metav1.ConditionFalse, "Restoring", "under way"))), "a restore under way is swept once done")
	assert.Empty(t, SweepMarker(with(restored(metav1.ConditionFalse, "RestoreRefused", "no such snapshot"))), "a refused restore changed nothing")

	first := SweepMarker(with(restored(metav1.ConditionTrue, cluster.ReasonRestoreDone, "Snapshot a restored at 15:00")))
	assert.NotEmpty(t, first)
	assert.Equal(t, first, SweepMarker(with(restored(metav1.ConditionTrue, cluster.ReasonRestoreDone, "Snapshot a restored at 15:00"))), "read again: the same")
	// A second restore while the operator was down leaves the condition True: only its message
	// tells it from the first.
	second := SweepMarker(with(restored(metav1.ConditionTrue, cluster.ReasonRestoreDone, "Snapshot b restored at 15:00")))
	assert.NotEqual(t, first, second)

	dataLost := SweepMarker(with(lost))
	assert.NotEmpty(t, dataLost)
	both := SweepMarker(with(lost, restored(metav1.ConditionTrue, cluster.ReasonRestoreDone, "Snapshot a restored at 15:00")))
	assert.NotEqual(t, dataLost, both)
	assert.NotEqual(t, first, both)
	assert.LessOrEqual(t, len(both), 253, "fits an annotation value comfortably")
}
