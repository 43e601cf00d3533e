package v1alpha1_test

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// An IdentityLabelPurposeSelector without identities matches objects that satisfy both its labels
// and its purposes. Validate it before use: an invalid selector matches nothing.
func ExampleIdentityLabelPurposeSelector() {
	var sel v1alpha1.IdentityLabelPurposeSelector
	err := yaml.Unmarshal([]byte(`
matchLabels:
  foo: bar
matchPurposes:
- operator: ContainsAny
  values:
  - mcp
`), &sel)
	if err != nil {
		panic(err)
	}
	if err := sel.Validate(); err != nil {
		panic(err)
	}

	clusters := []*v1alpha1.Cluster{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "both", Labels: map[string]string{"foo": "bar", "env": "dev"}},
			Spec:       v1alpha1.ClusterSpec{Purposes: []string{"mcp", "workload"}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "label-only", Labels: map[string]string{"foo": "bar"}},
			Spec:       v1alpha1.ClusterSpec{Purposes: []string{"workload"}},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "purpose-only"},
			Spec:       v1alpha1.ClusterSpec{Purposes: []string{"mcp"}},
		},
	}
	for _, c := range clusters {
		fmt.Printf("%s: %v\n", c.Name, sel.Matches(c))
	}
	// Output:
	// both: true
	// label-only: false
	// purpose-only: false
}

// A nil list of identities matches every object, an empty one matches none; both survive a YAML
// round trip. An identity's name and namespace are always written, empty ones included (both are
// required, as in openMCP).
func ExampleIdentitySelector() {
	platform := &v1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Name: "platform", Namespace: "default"}}

	for _, text := range []string{
		"matchIdentities: [{name: platform, namespace: default}]",
		"matchIdentities: null",
		"matchIdentities: []",
		`matchIdentities: [{name: ""}]`,
	} {
		var sel v1alpha1.IdentitySelector
		if err := yaml.Unmarshal([]byte(text), &sel); err != nil {
			panic(err)
		}
		out, err := yaml.Marshal(&sel)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-55s -> empty=%v matches=%v valid=%v encoded=%q\n",
			text, sel.Empty(), sel.Matches(platform), sel.Validate() == nil, out)
	}
	// Output:
	// matchIdentities: [{name: platform, namespace: default}] -> empty=false matches=true valid=true encoded="matchIdentities:\n- name: platform\n  namespace: default\n"
	// matchIdentities: null                                   -> empty=true matches=true valid=true encoded="matchIdentities: null\n"
	// matchIdentities: []                                     -> empty=false matches=false valid=true encoded="matchIdentities: []\n"
	// matchIdentities: [{name: ""}]                           -> empty=false matches=false valid=false encoded="matchIdentities:\n- name: \"\"\n  namespace: \"\"\n"
}
