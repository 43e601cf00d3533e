package v1alpha1_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

func TestIdentitySelectorNilVersusEmpty(t *testing.T) {
	tests := map[string]struct {
		identities []common.ObjectReference
		wantYAML   string
		wantNil    bool
		wantEmpty  bool
		wantMatch  []string
	}{
		"nil matches everything": {
			identities: nil,
			wantYAML:   "matchIdentities: null\n",
			wantNil:    true,
			wantEmpty:  true,
			wantMatch:  allKeys(),
		},
		"empty matches nothing": {
			identities: []common.ObjectReference{},
			wantYAML:   "matchIdentities: []\n",
			wantNil:    false,
			wantEmpty:  false,
			wantMatch:  nil,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sel := &v1alpha1.IdentitySelector{MatchIdentities: tt.identities}
			out, err := yaml.Marshal(sel)
			require.NoError(t, err)
			assert.Equal(t, tt.wantYAML, string(out))

			rt := roundTrip(t, identityKind, sel).(*v1alpha1.IdentitySelector)
			assert.Equal(t, tt.wantNil, rt.MatchIdentities == nil, "nil after the round trip")
			for _, s := range []v1alpha1.Selector{sel, rt} {
				assert.Equal(t, tt.wantEmpty, s.Empty())
				assert.ElementsMatch(t, tt.wantMatch, matchedKeys(s))
			}

			// The same inside every aggregate with an identity part.
			for _, k := range identityAggregates {
				agg := decode(t, k, tt.wantYAML)
				agg = roundTrip(t, k, agg)
				assert.Equal(t, tt.wantEmpty, agg.Empty(), k.name)
				assert.ElementsMatch(t, tt.wantMatch, matchedKeys(agg), k.name)
			}
		})
	}

	t.Run("unset field is nil", func(t *testing.T) {
		for _, k := range allKinds {
			sel := decode(t, k, "{}")
			assert.True(t, sel.Empty(), k.name)
			assert.ElementsMatch(t, allKeys(), matchedKeys(sel), k.name)
		}
	})
}

func TestIdentitySelectorNamespace(t *testing.T) {
	tests := map[string]struct {
		yaml      string
		wantMatch []string
	}{
		"no namespace matches only the cluster-scoped object": {
			yaml:      "matchIdentities: [{name: foo}]",
			wantMatch: []string{"cluster /foo"},
		},
		"explicit empty namespace is the same": {
			yaml:      `matchIdentities: [{name: foo, namespace: ""}]`,
			wantMatch: []string{"cluster /foo"},
		},
		"a namespace never matches the cluster-scoped object": {
			yaml:      "matchIdentities: [{name: foo, namespace: bar}]",
			wantMatch: []string{"cluster bar/foo"},
		},
		"name is compared exactly": {
			yaml:      "matchIdentities: [{name: Foo, namespace: bar}, {name: fo, namespace: bar}]",
			wantMatch: nil,
		},
		"namespace is compared exactly": {
			yaml:      "matchIdentities: [{name: myobject, namespace: Default}]",
			wantMatch: nil,
		},
		"both kinds with the same name and namespace match": {
			yaml:      "matchIdentities: [{name: myobject, namespace: default}]",
			wantMatch: []string{"cluster default/myobject", "request default/myobject"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sel := decode(t, identityKind, tt.yaml)
			require.NoError(t, sel.Validate())
			assert.ElementsMatch(t, tt.wantMatch, matchedKeys(sel))
		})
	}
}

func TestPurposeSelectorOperators(t *testing.T) {
	tests := map[string]struct {
		yaml     string
		purposes []string
		want     bool
	}{
		"ContainsAll: superset": {
			yaml:     "matchPurposes: [{operator: ContainsAll, values: [a, b]}]",
			purposes: []string{"c", "b", "a"},
			want:     true,
		},
		"ContainsAll: one missing": {
			yaml:     "matchPurposes: [{operator: ContainsAll, values: [a, b]}]",
			purposes: []string{"a", "c"},
			want:     false,
		},
		"ContainsAll: duplicate values": {
			yaml:     "matchPurposes: [{operator: ContainsAll, values: [a, a]}]",
			purposes: []string{"a"},
			want:     true,
		},
		"ContainsAll: no values is vacuously true": {
			yaml:     "matchPurposes: [{operator: ContainsAll}]",
			purposes: nil,
			want:     true,
		},
		"ContainsAny: one of them": {
			yaml:     "matchPurposes: [{operator: ContainsAny, values: [a, b]}]",
			purposes: []string{"c", "b"},
			want:     true,
		},
		"ContainsAny: none of them": {
			yaml:     "matchPurposes: [{operator: ContainsAny, values: [a, b]}]",
			purposes: []string{"c"},
			want:     false,
		},
		"ContainsAny: no values matches nothing": {
			yaml:     "matchPurposes: [{operator: ContainsAny}]",
			purposes: []string{"a"},
			want:     false,
		},
		"ContainsNone: none of them": {
			yaml:     "matchPurposes: [{operator: ContainsNone, values: [a, b]}]",
			purposes: []string{"c"},
			want:     true,
		},
		"ContainsNone: one of them": {
			yaml:     "matchPurposes: [{operator: ContainsNone, values: [a, b]}]",
			purposes: []string{"c", "a"},
			want:     false,
		},
		"ContainsNone: no purposes": {
			yaml:     "matchPurposes: [{operator: ContainsNone, values: [a]}]",
			purposes: nil,
			want:     true,
		},
		"Equals: same order": {
			yaml:     "matchPurposes: [{operator: Equals, values: [a, b]}]",
			purposes: []string{"a", "b"},
			want:     true,
		},
		"Equals: order does not matter": {
			yaml:     "matchPurposes: [{operator: Equals, values: [b, a]}]",
			purposes: []string{"a", "b"},
			want:     true,
		},
		"Equals: duplicates on both sides are ignored": {
			yaml:     "matchPurposes: [{operator: Equals, values: [a, a, b]}]",
			purposes: []string{"b", "a", "b"},
			want:     true,
		},
		"Equals: duplicate value is not a second purpose": {
			yaml:     "matchPurposes: [{operator: Equals, values: [a, a]}]",
			purposes: []string{"a", "b"},
			want:     false,
		},
		"Equals: object has fewer purposes": {
			yaml:     "matchPurposes: [{operator: Equals, values: [a, b]}]",
			purposes: []string{"a", "a"},
			want:     false,
		},
		"Equals: no values matches no purposes": {
			yaml:     "matchPurposes: [{operator: Equals}]",
			purposes: nil,
			want:     true,
		},
		"Equals: no values does not match a purpose": {
			yaml:     "matchPurposes: [{operator: Equals}]",
			purposes: []string{"a"},
			want:     false,
		},
		"requirements are ANDed: both met": {
			yaml:     "matchPurposes: [{operator: ContainsAny, values: [a]}, {operator: ContainsNone, values: [b]}]",
			purposes: []string{"a", "c"},
			want:     true,
		},
		"requirements are ANDed: second not met": {
			yaml:     "matchPurposes: [{operator: ContainsAny, values: [a]}, {operator: ContainsNone, values: [b]}]",
			purposes: []string{"a", "b"},
			want:     false,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sel := decode(t, purposeKind, tt.yaml)
			require.NoError(t, sel.Validate())
			assert.False(t, sel.Empty())
			assert.Equal(t, tt.want, sel.Matches(cluster("default", "c", nil, tt.purposes...)))
		})
	}
}

func TestPurposeSelectorClusterRequest(t *testing.T) {
	noPurpose := request("default", "r", nil, "")
	mcp := request("default", "r", nil, "mcp")
	require.Nil(t, noPurpose.GetPurposes(), "a request with an empty purpose has no purposes")

	tests := map[string]struct {
		yaml          string
		wantNoPurpose bool
		wantMCP       bool
	}{
		"ContainsAny mcp":      {"matchPurposes: [{operator: ContainsAny, values: [mcp]}]", false, true},
		"ContainsAll mcp":      {"matchPurposes: [{operator: ContainsAll, values: [mcp]}]", false, true},
		"ContainsNone mcp":     {"matchPurposes: [{operator: ContainsNone, values: [mcp]}]", true, false},
		"Equals mcp":           {"matchPurposes: [{operator: Equals, values: [mcp]}]", false, true},
		"Equals mcp twice":     {"matchPurposes: [{operator: Equals, values: [mcp, mcp]}]", false, true},
		"Equals nothing":       {"matchPurposes: [{operator: Equals}]", true, false},
		"Equals empty string":  {`matchPurposes: [{operator: Equals, values: [""]}]`, false, false}, // invalid
		"no requirements":      {"matchPurposes: []", true, true},
		"ContainsAny two ways": {"matchPurposes: [{operator: ContainsAny, values: [platform, mcp]}]", false, true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sel := decode(t, purposeKind, tt.yaml)
			assert.Equal(t, tt.wantNoPurpose, sel.Matches(noPurpose), "request without purpose")
			assert.Equal(t, tt.wantMCP, sel.Matches(mcp), "request for mcp")
		})
	}
}

func TestLabelSelectorUsesKubernetesSemantics(t *testing.T) {
	tests := map[string]struct {
		yaml      string
		wantMatch []string
	}{
		"Exists": {
			yaml:      "matchExpressions: [{key: mylabel, operator: Exists}]",
			wantMatch: []string{"cluster default/asdf", "cluster /foo", "request bar/platform"},
		},
		"DoesNotExist with In": {
			yaml: "matchExpressions: [{key: mylabel, operator: DoesNotExist}, {key: extra, operator: In, values: [x, z]}]",
			// Only mcp-dup has extra=x, and it has no mylabel.
			wantMatch: []string{"cluster default/mcp-dup"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sel := decode(t, labelKind, tt.yaml)
			require.NoError(t, sel.Validate())
			assert.ElementsMatch(t, tt.wantMatch, matchedKeys(sel))
		})
	}
}
