package profile

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
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
