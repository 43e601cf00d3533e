package v1alpha1_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

// sample is an object the tests match selectors against; key names it in expectations.
type sample struct {
	key string
	obj v1alpha1.ObjectWithPurposes
}

func cluster(namespace, name string, labels map[string]string, purposes ...string) *v1alpha1.Cluster {
	return &v1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec:       v1alpha1.ClusterSpec{Purposes: purposes},
	}
}

func request(namespace, name string, labels map[string]string, purpose string) *v1alpha1.ClusterRequest {
	return &v1alpha1.ClusterRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
		Spec:       v1alpha1.ClusterRequestSpec{Purpose: purpose},
	}
}

// samples are chosen so that every spec example matches some of them and misses others. The
// expectations in specExamples were worked out by hand from the spec against this list.
var samples = []sample{
	{"cluster bar/foo", cluster("bar", "foo",
		map[string]string{"foo": "bar", "baz": "bar"}, "platform", "onboarding")},
	{"cluster default/asdf", cluster("default", "asdf",
		map[string]string{"foo": "bar", "baz": "bar", "mylabel": "foo"}, "workload")},
	{"cluster default/myobject", cluster("default", "myobject", nil, "mcp")},
	{"cluster default/mcp-dup", cluster("default", "mcp-dup",
		map[string]string{"foo": "bar", "extra": "x"}, "mcp", "mcp")},
	// Cluster-scoped: same name as "cluster bar/foo", but no namespace.
	{"cluster /foo", cluster("", "foo",
		map[string]string{"foo": "bar", "baz": "bar", "mylabel": "other"}, "onboarding", "platform", "workload")},
	{"cluster default/bare", cluster("default", "bare", nil)},
	// Same name and namespace as "cluster default/myobject": identities do not include the kind.
	{"request default/myobject", request("default", "myobject", map[string]string{"foo": "bar"}, "mcp")},
	{"request default/no-purpose", request("default", "no-purpose", map[string]string{"foo": "bar"}, "")},
	{"request bar/platform", request("bar", "platform",
		map[string]string{"foo": "bar", "baz": "bar", "mylabel": "baz"}, "platform")},
}

func allKeys() []string {
	keys := make([]string, len(samples))
	for i, s := range samples {
		keys[i] = s.key
	}
	return keys
}

// matchedKeys returns the keys of the samples sel matches.
func matchedKeys(sel v1alpha1.Selector) []string {
	var keys []string
	for _, s := range samples {
		if sel.Matches(s.obj) {
			keys = append(keys, s.key)
		}
	}
	return keys
}

// selectorKind creates an empty selector of one of the seven types.
type selectorKind struct {
	name string
	new  func() v1alpha1.Selector
}

var (
	identityKind = selectorKind{"IdentitySelector", func() v1alpha1.Selector {
		return &v1alpha1.IdentitySelector{}
	}}
	labelKind = selectorKind{"LabelSelector", func() v1alpha1.Selector {
		return &v1alpha1.LabelSelector{}
	}}
	purposeKind = selectorKind{"PurposeSelector", func() v1alpha1.Selector {
		return &v1alpha1.PurposeSelector{}
	}}
	identityLabelKind = selectorKind{"IdentityLabelSelector", func() v1alpha1.Selector {
		return &v1alpha1.IdentityLabelSelector{}
	}}
	identityPurposeKind = selectorKind{"IdentityPurposeSelector", func() v1alpha1.Selector {
		return &v1alpha1.IdentityPurposeSelector{}
	}}
	labelPurposeKind = selectorKind{"LabelPurposeSelector", func() v1alpha1.Selector {
		return &v1alpha1.LabelPurposeSelector{}
	}}
	identityLabelPurposeKind = selectorKind{"IdentityLabelPurposeSelector", func() v1alpha1.Selector {
		return &v1alpha1.IdentityLabelPurposeSelector{}
	}}

	// The kinds whose fields cover an example's fields: each example is decoded strictly into
	// each of them and must behave the same, because the aggregates' other parts stay Empty.
	withIdentities     = []selectorKind{identityKind, identityLabelKind, identityPurposeKind, identityLabelPurposeKind}
	withLabels         = []selectorKind{labelKind, identityLabelKind, labelPurposeKind, identityLabelPurposeKind}
	withPurposes       = []selectorKind{purposeKind, identityPurposeKind, labelPurposeKind, identityLabelPurposeKind}
	withIdentityLabels = []selectorKind{identityLabelKind, identityLabelPurposeKind}
	withLabelsPurposes = []selectorKind{labelPurposeKind, identityLabelPurposeKind}
	allKinds           = []selectorKind{identityKind, labelKind, purposeKind, identityLabelKind, identityPurposeKind, labelPurposeKind, identityLabelPurposeKind}
	identityAggregates = []selectorKind{identityLabelKind, identityPurposeKind, identityLabelPurposeKind}
)

// specExample is one YAML example of cluster-selectors.md, in the order the spec lists them.
type specExample struct {
	name      string
	yaml      string
	kinds     []selectorKind
	wantEmpty bool
	wantMatch []string
}

var specExamples = []specExample{
	{
		name: "identity: matches the specified identities",
		yaml: `
matchIdentities:
- name: foo
  namespace: bar
- name: asdf
  namespace: default
`,
		kinds:     withIdentities,
		wantEmpty: false,
		// Not "cluster /foo": its namespace is "", not bar.
		wantMatch: []string{"cluster bar/foo", "cluster default/asdf"},
	},
	{
		name:      "identity: null matches everything",
		yaml:      "matchIdentities: null\n",
		kinds:     withIdentities,
		wantEmpty: true,
		wantMatch: allKeys(),
	},
	{
		name:      "identity: empty list matches nothing",
		yaml:      "matchIdentities: []\n",
		kinds:     withIdentities,
		wantEmpty: false,
		wantMatch: nil,
	},
	{
		name: "label: matches resources with the specified labels",
		yaml: `
matchLabels:
  foo: bar
  baz: bar
matchExpressions:
- key: mylabel
  operator: NotIn
  values:
  - foo
  - bar
  - baz
`,
		kinds:     withLabels,
		wantEmpty: false,
		// foo=bar and baz=bar, and mylabel missing or not in {foo, bar, baz}:
		// asdf (mylabel=foo) and bar/platform (mylabel=baz) are excluded by NotIn, the others lack
		// foo or baz.
		wantMatch: []string{"cluster bar/foo", "cluster /foo"},
	},
	{
		name: "label: empty matchLabels and matchExpressions match everything",
		yaml: `
matchLabels: {}
matchExpressions: []
`,
		kinds:     withLabels,
		wantEmpty: true,
		wantMatch: allKeys(),
	},
	{
		name: "purpose: ContainsAll platform and onboarding",
		yaml: `
matchPurposes:
- operator: ContainsAll
  values:
  - platform
  - onboarding
`,
		kinds:     withPurposes,
		wantEmpty: false,
		// "request bar/platform" has platform only.
		wantMatch: []string{"cluster bar/foo", "cluster /foo"},
	},
	{
		name: "purpose: ContainsAny platform or workload",
		yaml: `
matchPurposes:
- operator: ContainsAny
  values:
  - platform
  - workload
`,
		kinds:     withPurposes,
		wantEmpty: false,
		wantMatch: []string{"cluster bar/foo", "cluster default/asdf", "cluster /foo", "request bar/platform"},
	},
	{
		name: "purpose: Equals mcp",
		yaml: `
matchPurposes:
- operator: Equals
  values:
  - mcp
`,
		kinds:     withPurposes,
		wantEmpty: false,
		// mcp-dup has [mcp, mcp]: duplicates are ignored.
		wantMatch: []string{"cluster default/myobject", "cluster default/mcp-dup", "request default/myobject"},
	},
	{
		name: "aggregate: identities override labels",
		yaml: `
matchIdentities:
- name: myobject
  namespace: default
matchLabels:
  foo: bar
`,
		kinds:     withIdentityLabels,
		wantEmpty: false,
		// The Cluster has no labels at all and still matches; the request matches by identity too.
		wantMatch: []string{"cluster default/myobject", "request default/myobject"},
	},
	{
		name: "aggregate: labels and purposes are ANDed",
		yaml: `
matchLabels:
  foo: bar
matchPurposes:
- operator: ContainsAny
  values:
  - mcp
`,
		kinds:     withLabelsPurposes,
		wantEmpty: false,
		// "cluster default/myobject" has mcp but no labels; "request default/no-purpose" has the
		// label but no purpose.
		wantMatch: []string{"cluster default/mcp-dup", "request default/myobject"},
	},
}

// decode decodes text strictly into a new selector of kind k, so that no field of the text can
// be silently dropped.
func decode(t *testing.T, k selectorKind, text string) v1alpha1.Selector {
	t.Helper()
	sel := k.new()
	require.NoError(t, yaml.UnmarshalStrict([]byte(text), sel))
	return sel
}

// roundTrip encodes sel as YAML and decodes it into a new selector of kind k.
func roundTrip(t *testing.T, k selectorKind, sel v1alpha1.Selector) v1alpha1.Selector {
	t.Helper()
	out, err := yaml.Marshal(sel)
	require.NoError(t, err)
	return decode(t, k, string(out))
}

func TestSelectorSpecExamples(t *testing.T) {
	for _, ex := range specExamples {
		for _, k := range ex.kinds {
			t.Run(ex.name+"/"+k.name, func(t *testing.T) {
				sel := decode(t, k, ex.yaml)
				rt := roundTrip(t, k, sel)
				for _, s := range []struct {
					name string
					sel  v1alpha1.Selector
				}{{"decoded", sel}, {"round trip", rt}} {
					require.NoError(t, s.sel.Validate(), s.name)
					assert.Equal(t, ex.wantEmpty, s.sel.Empty(), "%s: Empty", s.name)
					assert.ElementsMatch(t, ex.wantMatch, matchedKeys(s.sel), "%s: matched samples", s.name)
				}
			})
		}
	}
}

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

func TestSelectorValidate(t *testing.T) {
	const validOps = "ContainsAll, ContainsAny, ContainsNone, Equals"
	tests := map[string]struct {
		kinds []selectorKind
		yaml  string
		// wantErr is the whole message if exact, else substrings of it.
		wantErr     string
		exact       bool
		wantContain []string
	}{
		"identity without name": {
			kinds:   withIdentities,
			yaml:    "matchIdentities: [{name: a, namespace: x}, {namespace: default}]",
			wantErr: "matchIdentities[1].name must not be empty",
			exact:   true,
		},
		"unknown purpose operator": {
			kinds:   withPurposes,
			yaml:    "matchPurposes: [{operator: Foo, values: [mcp]}]",
			wantErr: `matchPurposes[0].operator "Foo" is not one of ` + validOps,
			exact:   true,
		},
		"missing purpose operator": {
			kinds:   withPurposes,
			yaml:    "matchPurposes: [{operator: Equals, values: [mcp]}, {values: [mcp]}]",
			wantErr: `matchPurposes[1].operator "" is not one of ` + validOps,
			exact:   true,
		},
		"purpose operators are case-sensitive": {
			kinds:   withPurposes,
			yaml:    "matchPurposes: [{operator: equals, values: [mcp]}]",
			wantErr: `matchPurposes[0].operator "equals" is not one of ` + validOps,
			exact:   true,
		},
		"empty purpose value": {
			kinds:   withPurposes,
			yaml:    `matchPurposes: [{operator: ContainsAny, values: [mcp, ""]}]`,
			wantErr: "matchPurposes[0].values[1] must not be empty",
			exact:   true,
		},
		"unknown label operator": {
			kinds:       withLabels,
			yaml:        "matchExpressions: [{key: foo, operator: Foo, values: [bar]}]",
			wantContain: []string{"matchExpressions[0].operator", `"Foo"`},
		},
		"label In without values": {
			kinds:       withLabels,
			yaml:        "matchExpressions: [{key: foo, operator: In}]",
			wantContain: []string{"matchExpressions[0].values"},
		},
		"label Exists with values": {
			kinds:       withLabels,
			yaml:        "matchExpressions: [{key: foo, operator: Exists, values: [bar]}]",
			wantContain: []string{"matchExpressions[0].values"},
		},
		"invalid label key": {
			kinds:       withLabels,
			yaml:        `matchLabels: {"not a key": bar}`,
			wantContain: []string{"matchLabels", "not a key"},
		},
		"invalid label value": {
			kinds:       withLabels,
			yaml:        `matchLabels: {foo: "not a value"}`,
			wantContain: []string{"matchLabels", "not a value"},
		},
		"every part's errors are joined": {
			kinds: []selectorKind{identityLabelPurposeKind},
			yaml: `
matchIdentities: [{name: ""}]
matchExpressions: [{key: foo, operator: Foo}]
matchPurposes: [{operator: Bar}]
`,
			wantContain: []string{
				"matchIdentities[0].name must not be empty",
				`matchExpressions[0].operator`, `"Foo"`,
				`matchPurposes[0].operator "Bar" is not one of ` + validOps,
			},
		},
	}
	for name, tt := range tests {
		for _, k := range tt.kinds {
			t.Run(name+"/"+k.name, func(t *testing.T) {
				sel := decode(t, k, tt.yaml)
				err := sel.Validate()
				require.Error(t, err)
				if tt.exact {
					assert.EqualError(t, err, tt.wantErr)
				}
				for _, s := range tt.wantContain {
					assert.ErrorContains(t, err, s)
				}
				assert.False(t, sel.Empty(), "an invalid selector restricts something")
				assert.Empty(t, matchedKeys(sel), "an invalid selector matches nothing")
			})
		}
	}
}

func TestAggregateInvalidPartNeverMatches(t *testing.T) {
	tests := map[string]struct {
		kind selectorKind
		// yaml is invalid; valid is the same selector without its invalid part.
		yaml, valid string
		wantValid   []string
	}{
		"identity overrides, but an invalid purpose part still wins": {
			kind:      identityPurposeKind,
			yaml:      "matchIdentities: [{name: myobject, namespace: default}]\nmatchPurposes: [{operator: Foo}]",
			valid:     "matchIdentities: [{name: myobject, namespace: default}]",
			wantValid: []string{"cluster default/myobject", "request default/myobject"},
		},
		"identity overrides, but an invalid label part still wins": {
			kind:      identityLabelKind,
			yaml:      "matchIdentities: [{name: foo, namespace: bar}]\nmatchExpressions: [{key: foo, operator: Foo}]",
			valid:     "matchIdentities: [{name: foo, namespace: bar}]",
			wantValid: []string{"cluster bar/foo"},
		},
		"invalid identity next to valid labels": {
			kind:      identityLabelPurposeKind,
			yaml:      "matchIdentities: [{namespace: default}]\nmatchLabels: {foo: bar}",
			valid:     "matchLabels: {foo: bar}",
			wantValid: []string{"cluster bar/foo", "cluster default/asdf", "cluster default/mcp-dup", "cluster /foo", "request default/myobject", "request default/no-purpose", "request bar/platform"},
		},
		"invalid labels next to valid purposes": {
			kind:      labelPurposeKind,
			yaml:      "matchExpressions: [{key: foo, operator: In}]\nmatchPurposes: [{operator: Equals, values: [mcp]}]",
			valid:     "matchPurposes: [{operator: Equals, values: [mcp]}]",
			wantValid: []string{"cluster default/myobject", "cluster default/mcp-dup", "request default/myobject"},
		},
		"empty-string purpose next to labels matching everything": {
			kind:      identityLabelPurposeKind,
			yaml:      "matchLabels: {}\nmatchPurposes: [{operator: ContainsNone, values: [\"\"]}]",
			valid:     "matchLabels: {}",
			wantValid: allKeys(),
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			valid := decode(t, tt.kind, tt.valid)
			require.NoError(t, valid.Validate())
			require.ElementsMatch(t, tt.wantValid, matchedKeys(valid), "the selector without its invalid part")

			sel := decode(t, tt.kind, tt.yaml)
			require.Error(t, sel.Validate())
			assert.Empty(t, matchedKeys(sel))
		})
	}
}

func TestAggregateEmpty(t *testing.T) {
	tests := map[string]struct {
		kind selectorKind
		yaml string
		want bool
	}{
		"nothing set":                       {identityLabelPurposeKind, "{}", true},
		"all parts explicitly empty":        {identityLabelPurposeKind, "{matchIdentities: null, matchLabels: {}, matchExpressions: [], matchPurposes: []}", true},
		"empty identity list":               {identityLabelPurposeKind, "matchIdentities: []", false},
		"labels only":                       {identityLabelPurposeKind, "matchLabels: {a: b}", false},
		"expressions only":                  {identityLabelPurposeKind, "matchExpressions: [{key: a, operator: Exists}]", false},
		"purposes only":                     {identityLabelPurposeKind, "matchPurposes: [{operator: ContainsAny, values: [a]}]", false},
		"identity with labels":              {identityLabelKind, "{matchIdentities: [{name: a}], matchLabels: {a: b}}", false},
		"identity with empty purposes":      {identityPurposeKind, "{matchIdentities: [{name: a}], matchPurposes: []}", false},
		"labels and purposes both empty":    {labelPurposeKind, "{matchLabels: {}, matchPurposes: []}", true},
		"labels empty, purposes set":        {labelPurposeKind, "{matchLabels: {}, matchPurposes: [{operator: Equals}]}", false},
		"empty identity list, empty labels": {identityLabelKind, "{matchIdentities: [], matchLabels: {}}", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sel := decode(t, tt.kind, tt.yaml)
			require.NoError(t, sel.Validate())
			assert.Equal(t, tt.want, sel.Empty())
			if tt.want {
				assert.ElementsMatch(t, allKeys(), matchedKeys(sel), "an Empty selector matches everything")
			}
		})
	}
}

func TestAggregateIdentityOverrides(t *testing.T) {
	// Labels and purposes that match everything (or nothing) are ignored once identities are set.
	tests := map[string]struct {
		yaml      string
		wantMatch []string
	}{
		"empty identity list beats labels matching everything": {
			yaml:      "{matchIdentities: [], matchLabels: {}}",
			wantMatch: nil,
		},
		"identity beats purposes matching nothing": {
			yaml:      "{matchIdentities: [{name: bare, namespace: default}], matchPurposes: [{operator: ContainsAny, values: [none]}]}",
			wantMatch: []string{"cluster default/bare"},
		},
		"identity beats labels and purposes matching nothing": {
			yaml:      "{matchIdentities: [{name: bare, namespace: default}], matchLabels: {absent: label}, matchPurposes: [{operator: Equals, values: [none]}]}",
			wantMatch: []string{"cluster default/bare"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			sel := decode(t, identityLabelPurposeKind, tt.yaml)
			require.NoError(t, sel.Validate())
			assert.ElementsMatch(t, tt.wantMatch, matchedKeys(sel))
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
