package labeller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

func TestCheckLabels(t *testing.T) {
	const provider, profile = clustersv1alpha1.ProviderLabel, clustersv1alpha1.ProfileLabel
	tests := []struct {
		name   string
		labels map[string]string
		want   string // reason; empty means no conflict
	}{
		{"no labels", nil, ""},
		{"unrelated labels", map[string]string{"a": "b"}, ""},
		{"provider preset right", map[string]string{provider: "gardener"}, ""},
		{"profile preset right", map[string]string{profile: "gardener-prod"}, ""},
		{"provider preset wrong", map[string]string{provider: "kind"}, ReasonLabelConflict},
		{"profile preset wrong", map[string]string{profile: "other"}, ReasonLabelConflict},
		{"one right, one wrong", map[string]string{provider: "gardener", profile: "other"}, ReasonLabelConflict},
		{"empty value is a value", map[string]string{provider: ""}, ReasonLabelConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkLabels(tt.labels, resolved)
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			assert.Equal(t, tt.want, kit.ReasonOf(err, ""))
		})
	}
}

func TestGrantedCluster(t *testing.T) {
	cluster := &common.ObjectReference{Name: "c"}
	tests := []struct {
		name    string
		phase   string
		cluster *common.ObjectReference
		want    types.NamespacedName
		reason  string
	}{
		{"granted, cluster in the request's namespace", common.PhaseGranted, cluster, types.NamespacedName{Namespace: "req-ns", Name: "c"}, ""},
		{"granted, cluster elsewhere", common.PhaseGranted, &common.ObjectReference{Name: "c", Namespace: "x"}, types.NamespacedName{Namespace: "x", Name: "c"}, ""},
		{"new", "", nil, types.NamespacedName{}, ReasonWaitingForClusterRequest},
		{"pending", common.PhasePending, nil, types.NamespacedName{}, ReasonWaitingForClusterRequest},
		{"cluster set but not granted yet", common.PhasePending, cluster, types.NamespacedName{}, ReasonWaitingForClusterRequest},
		{"granted without cluster", common.PhaseGranted, nil, types.NamespacedName{}, ReasonWaitingForClusterRequest},
		{"denied", common.PhaseDenied, nil, types.NamespacedName{}, ReasonClusterRequestDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cr := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "req-ns", Name: "r"}}
			cr.Status.Phase, cr.Status.Cluster = tt.phase, tt.cluster
			got, err := grantedCluster(cr)
			assert.Equal(t, tt.want, got)
			if tt.reason == "" {
				assert.NoError(t, err)
				return
			}
			assert.Equal(t, tt.reason, kit.ReasonOf(err, ""))
		})
	}
}
