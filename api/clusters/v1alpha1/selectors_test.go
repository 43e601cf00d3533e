package v1alpha1_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
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
