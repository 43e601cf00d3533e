package profile

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
)

func TestNames(t *testing.T) {
	assert.Equal(t, "default.local.small", Name("default", "local", "small"))
	tests := []struct {
		profile string
		want    string
		ok      bool
	}{
		{"default.local.small", "small", true},
		{"default.local.with.dots", "with.dots", true},
		{"default.local.", "", false},
		{"prod.local.small", "", false},
		{"default.other.small", "", false},
		{"small", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.profile, func(t *testing.T) {
			got, ok := ConfigName("default", "local", tt.profile)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestKinds(t *testing.T) {
	kinds := Kinds("me", Workers{})
	assert.Equal(t, KindCluster, kinds[0].Name)
	assert.Equal(t, KindAccessRequest, kinds[1].Name)
	assert.Equal(t, KindGrantSweep, kinds[2].Name)
	cl := &clustersv1alpha1.Cluster{Spec: clustersv1alpha1.ClusterSpec{Profile: "default.me.a"}}
	assert.Equal(t, "default.me.a", kinds[0].Key(cl))

	ar := func(labels map[string]string) *clustersv1alpha1.AccessRequest {
		return &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"both labels, mine", map[string]string{clustersv1alpha1.ProviderLabel: "me", clustersv1alpha1.ProfileLabel: "p"}, "p"},
		{"both labels, another provider", map[string]string{clustersv1alpha1.ProviderLabel: "you", clustersv1alpha1.ProfileLabel: "p"}, ""},
		{"only provider", map[string]string{clustersv1alpha1.ProviderLabel: "me"}, ""},
		{"only profile", map[string]string{clustersv1alpha1.ProfileLabel: "p"}, ""},
		{"none", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, kinds[1].Key(ar(tt.labels)))
		})
	}
}

func TestSpecHash(t *testing.T) {
	a := &providersv1alpha1.ProviderConfig{Spec: providersv1alpha1.ProviderConfigSpec{Backend: "local", DefaultVersion: "1.37.1"}}
	b := a.DeepCopy()
	b.Labels = map[string]string{"x": "y"}
	b.Status.Phase = "Ready"
	assert.Equal(t, SpecHash(a), SpecHash(b), "only the spec counts")
	b.Spec.SupportedVersions = []clustersv1alpha1.SupportedK8sVersion{{Version: "1.37.1"}}
	assert.NotEqual(t, SpecHash(a), SpecHash(b))
}

// TestSweepDue: the grant sweep's Cluster events, as its Kind filters them: a phase change and a
// restore done pass, a condition that says nothing about the cluster's data does not.
func TestSweepDue(t *testing.T) {
	at := metav1.Now()
	base := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Generation: 1}}
	base.Status.Phase = "Ready"
	with := func(mutate func(cl *clustersv1alpha1.Cluster)) *clustersv1alpha1.Cluster {
		cl := base.DeepCopy()
		mutate(cl)
		return cl
	}
	kind := Kinds("me", Workers{})[2]
	tests := []struct {
		name string
		new  *clustersv1alpha1.Cluster
		want bool
	}{
		{"nothing changed", base.DeepCopy(), false},
		{"a snapshot taken", with(func(cl *clustersv1alpha1.Cluster) {
			cl.Status.Conditions = []metav1.Condition{{Type: cluster.ConditionBackedUp, Status: metav1.ConditionTrue, Reason: cluster.ReasonSnapshotTaken, LastTransitionTime: at}}
		}), false},
		{"not Ready", with(func(cl *clustersv1alpha1.Cluster) { cl.Status.Phase = "Progressing" }), true},
		{"a restore done", with(func(cl *clustersv1alpha1.Cluster) {
			cl.Status.Conditions = []metav1.Condition{{Type: cluster.ConditionRestored, Status: metav1.ConditionTrue, Reason: cluster.ReasonRestoreDone, Message: "x", LastTransitionTime: at}}
		}), true},
		{"the sweep's annotation removed by hand", with(func(cl *clustersv1alpha1.Cluster) {
			cl.Annotations = map[string]string{accessrequest.AnnotationGrantsSwept: "x"}
		}), true},
		// None runs while it sleeps: its wake (and, symmetric, its sleep) brings it back.
		{"hibernated or woken", with(func(cl *clustersv1alpha1.Cluster) {
			cl.Status.Conditions = []metav1.Condition{{Type: cluster.ConditionHibernated, Status: metav1.ConditionTrue, Reason: "Idle", LastTransitionTime: at}}
		}), true},
		{"still awake", with(func(cl *clustersv1alpha1.Cluster) {
			cl.Status.Conditions = []metav1.Condition{{Type: cluster.ConditionHibernated, Status: metav1.ConditionFalse, Reason: "Awake", LastTransitionTime: at}}
		}), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := event.UpdateEvent{ObjectOld: base, ObjectNew: tt.new}
			for _, p := range kind.Predicates {
				if !p.Update(e) {
					assert.False(t, tt.want, "filtered out")
					return
				}
			}
			assert.True(t, tt.want, "passed")
		})
	}
}
