package scheduler

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// parse decodes a scheduler section strictly and defaults it, as the operator does.
func parse(t *testing.T, doc string) *Config {
	t.Helper()
	c := &Config{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(doc), c))
	c.Default()
	return c
}

const valid = `
selectors:
  clusters: {matchLabels: {env: dev}}
purposeMappings:
  shared:
    tenancyCount: 10
    selector: {matchExpressions: [{key: tier, operator: In, values: [a, b]}]}
    template:
      metadata: {namespace: clusters, labels: {env: dev, tier: a}}
      spec: {profile: default.local.local, tenancy: Shared}
  exclusive:
    template:
      metadata: {generateName: ex-, labels: {env: dev}}
      spec: {profile: default.local.local, tenancy: Exclusive}
  everyone:
    template:
      metadata: {name: the-one, labels: {env: dev}}
      spec: {profile: default.local.local, tenancy: Shared}
`

func TestConfigDefaultsAndValid(t *testing.T) {
	c := parse(t, valid)
	assert.Equal(t, ScopeCluster, c.Scope)
	assert.Equal(t, StrategyBalanced, c.Strategy)
	require.NoError(t, c.Validate())
	assert.Equal(t, 10, c.PurposeMappings["shared"].TenancyCount)
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		doc  string
		// want are substrings of the error: the field path and what is wrong.
		want []string
	}{
		{"bad scope", "scope: Global\npurposeMappings: {p: {template: {spec: {profile: x, tenancy: Shared}}}}",
			[]string{"scheduler.scope", `"Global"`, "Cluster", "Namespaced"}},
		{"bad strategy", "strategy: Fair\npurposeMappings: {p: {template: {spec: {profile: x, tenancy: Shared}}}}",
			[]string{"scheduler.strategy", "Balanced", "Simple", "Random"}},
		{"no purposes", "scope: Cluster", []string{"scheduler.purposeMappings", "at least one purpose"}},
		{"no profile", "purposeMappings: {p: {template: {spec: {tenancy: Shared}}}}",
			[]string{"scheduler.purposeMappings[p].template.spec.profile"}},
		{"no tenancy", "purposeMappings: {p: {template: {spec: {profile: x}}}}",
			[]string{"scheduler.purposeMappings[p].template.spec.tenancy", "Exclusive or Shared"}},
		{"bad tenancy", "purposeMappings: {p: {template: {spec: {profile: x, tenancy: Some}}}}",
			[]string{"scheduler.purposeMappings[p].template.spec.tenancy", `"Some"`}},
		{"exclusive with a count", "purposeMappings: {p: {tenancyCount: 2, template: {spec: {profile: x, tenancy: Exclusive}}}}",
			[]string{"scheduler.purposeMappings[p].tenancyCount", "leave tenancyCount 0"}},
		{"negative count", "purposeMappings: {p: {tenancyCount: -1, template: {spec: {profile: x, tenancy: Shared}}}}",
			[]string{"scheduler.purposeMappings[p].tenancyCount", "0 (unlimited) or more"}},
		{"bad name", "purposeMappings: {p: {template: {metadata: {name: Not_A_Name}, spec: {profile: x, tenancy: Shared}}}}",
			[]string{"scheduler.purposeMappings[p].template.metadata.name"}},
		{"bad generateName", "purposeMappings: {p: {template: {metadata: {generateName: -x}, spec: {profile: x, tenancy: Exclusive}}}}",
			[]string{"scheduler.purposeMappings[p].template.metadata.generateName"}},
		{"bad selector", "purposeMappings: {p: {selector: {matchExpressions: [{key: a, operator: Like}]}, template: {spec: {profile: x, tenancy: Shared}}}}",
			[]string{"scheduler.purposeMappings[p].selector.matchExpressions[0].operator"}},
		{"bad global selector", "selectors: {requests: {matchLabels: {'a b': x}}}\npurposeMappings: {p: {template: {spec: {profile: x, tenancy: Shared}}}}",
			[]string{"scheduler.selectors.requests.matchLabels"}},
		{"template does not match the global selector", "selectors: {clusters: {matchLabels: {env: dev}}}\npurposeMappings: {p: {template: {spec: {profile: x, tenancy: Shared}}}}",
			[]string{"scheduler.purposeMappings[p].template.metadata.labels", "env=dev"}},
		{"template does not match the purpose's selector", "purposeMappings: {p: {selector: {matchLabels: {tier: a}}, template: {metadata: {labels: {tier: b}}, spec: {profile: x, tenancy: Shared}}}}",
			[]string{"scheduler.purposeMappings[p].template.metadata.labels", "tier=a"}},
		{"every error at once", "scope: X\nstrategy: Y\npurposeMappings: {p: {template: {spec: {}}}}",
			[]string{"scheduler.scope", "scheduler.strategy", "template.spec.profile", "template.spec.tenancy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := parse(t, tc.doc).Validate()
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestCombinedSelector(t *testing.T) {
	global := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev", "team": "a"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "x", Operator: metav1.LabelSelectorOpExists}}}
	purpose := &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod", "tier": "1"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "y", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	got := CombinedSelector(global, purpose)
	assert.Equal(t, map[string]string{"env": "dev", "team": "a", "tier": "1"}, got.MatchLabels, "on a key in both, the global value wins")
	assert.Len(t, got.MatchExpressions, 2)
	assert.Equal(t, "prod", purpose.MatchLabels["env"], "the arguments are not changed")
	assert.Len(t, purpose.MatchExpressions, 1)

	assert.Equal(t, &metav1.LabelSelector{}, CombinedSelector(nil, nil), "no selector: everything")
	assert.Equal(t, map[string]string{"env": "dev", "team": "a"}, CombinedSelector(global, nil).MatchLabels)
}

func TestRequestHashAndClusterName(t *testing.T) {
	// openMCP's example, pinned: the same request gets the same Cluster in either scheduler.
	assert.Equal(t, "qilq5nsb", RequestHash("foo", "exclusive"))
	for _, h := range []string{RequestHash("foo", "exclusive"), RequestHash("a", "b"), RequestHash("", "")} {
		assert.Len(t, h, 8)
		assert.Equal(t, strings.ToLower(h), h)
		assert.Empty(t, strings.Trim(h, "abcdefghijklmnopqrstuvwxyz234567"), "alphabet a-z2-7")
	}
	assert.NotEqual(t, RequestHash("foo", "exclusive"), RequestHash("foo", "exclusive2"))

	mapping := func(tenancy clustersv1alpha1.Tenancy, count int, name, generateName string) *PurposeMapping {
		return &PurposeMapping{TenancyCount: count, Template: ClusterTemplate{
			Metadata: TemplateMeta{Name: name, GenerateName: generateName},
			Spec:     clustersv1alpha1.ClusterSpec{Profile: "p", Tenancy: tenancy},
		}}
	}
	for _, tc := range []struct {
		name            string
		pm              *PurposeMapping
		randomize       bool
		wantName, wantG string
	}{
		{"exclusive: purpose prefix and hash", mapping(clustersv1alpha1.TenancyExclusive, 0, "", ""), false, "exclusive-qilq5nsb", ""},
		{"exclusive: generateName prefix", mapping(clustersv1alpha1.TenancyExclusive, 0, "", "ex-"), false, "ex-qilq5nsb", ""},
		{"shared with a count: hash too", mapping(clustersv1alpha1.TenancyShared, 3, "ignored", ""), false, "exclusive-qilq5nsb", ""},
		{"shared unlimited: one for everyone, the template's name", mapping(clustersv1alpha1.TenancyShared, 0, "the-one", "x-"), false, "the-one", ""},
		{"shared unlimited without a name: the purpose", mapping(clustersv1alpha1.TenancyShared, 0, "", ""), false, "exclusive", ""},
		{"randomized: the API server names it", mapping(clustersv1alpha1.TenancyExclusive, 0, "", "ex-"), true, "", "ex-"},
		{"randomize does not split the one shared Cluster", mapping(clustersv1alpha1.TenancyShared, 0, "", ""), true, "exclusive", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, g := ClusterName("exclusive", tc.pm, "foo", "exclusive", tc.randomize)
			assert.Equal(t, tc.wantName, n)
			assert.Equal(t, tc.wantG, g)
		})
	}
}

// FuzzConfig decodes and validates arbitrary scheduler sections: no panic, and every rejection
// names a field under scheduler.
func FuzzConfig(f *testing.F) {
	f.Add(valid)
	f.Add("purposeMappings: {p: {tenancyCount: 2, template: {spec: {profile: x, tenancy: Exclusive}}}}")
	f.Add("selectors: {clusters: {matchExpressions: [{key: a, operator: In}]}}\npurposeMappings: {'': null}")
	f.Fuzz(func(t *testing.T, doc string) {
		c := &Config{}
		if yaml.UnmarshalStrict([]byte(doc), c) != nil {
			return
		}
		c.Default()
		if err := c.Validate(); err != nil {
			assert.Contains(t, err.Error(), "scheduler.")
		}
	})
}

// TestRequestSelector: unset selects every request; set, only the matching ones.
func TestRequestSelector(t *testing.T) {
	sel, err := (&Config{}).RequestSelector()
	require.NoError(t, err)
	assert.True(t, sel.Matches(labels.Set{}), "no selector: every request")
	assert.True(t, sel.Matches(labels.Set{"a": "b"}))
	sel, err = (&Config{Selectors: Selectors{Requests: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}).RequestSelector()
	require.NoError(t, err)
	assert.True(t, sel.Matches(labels.Set{"team": "a"}))
	assert.False(t, sel.Matches(labels.Set{"team": "b"}))
}
