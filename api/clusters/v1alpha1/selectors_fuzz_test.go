package v1alpha1_test

import (
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// invalidSelectorSeeds are fuzz seeds that decode but do not validate.
var invalidSelectorSeeds = []string{
	"matchIdentities: [{namespace: default}]",
	"matchIdentities: [{name: myobject, namespace: default}]\nmatchPurposes: [{operator: Foo, values: [mcp]}]",
	"matchExpressions: [{key: foo, operator: Foo, values: [bar]}]",
	"matchExpressions: [{key: foo, operator: In}]",
	`matchLabels: {"not a key": bar}`,
	`matchPurposes: [{operator: ContainsNone, values: [""]}]`,
	"matchPurposes: [{values: [mcp]}]",
}

// FuzzSelector decodes arbitrary YAML into an IdentityLabelPurposeSelector and checks the
// properties the spec promises for every selector:
//   - Empty, Validate and Matches never panic;
//   - an invalid selector matches nothing, for the aggregate and for each of its parts;
//   - a valid Empty selector matches everything;
//   - a valid aggregate matches by identity if its identity part is not Empty, else by labels AND
//     purposes;
//   - a YAML round trip changes none of these results.
func FuzzSelector(f *testing.F) {
	for _, ex := range specExamples {
		f.Add([]byte(ex.yaml))
	}
	for _, s := range invalidSelectorSeeds {
		f.Add([]byte(s))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		var sel v1alpha1.IdentityLabelPurposeSelector
		if err := yaml.Unmarshal(data, &sel); err != nil {
			t.Skip()
		}
		want := checkSelectorProperties(t, &sel)

		out, err := yaml.Marshal(&sel)
		if err != nil {
			t.Fatalf("cannot encode a decoded selector: %v", err)
		}
		var rt v1alpha1.IdentityLabelPurposeSelector
		if err := yaml.Unmarshal(out, &rt); err != nil {
			t.Fatalf("cannot decode an encoded selector: %v\n%s", err, out)
		}
		if got := checkSelectorProperties(t, &rt); got != want {
			t.Fatalf("round trip changed the results from %+v to %+v\nbefore: %q\nafter:  %q", want, got, data, out)
		}
	})
}

// selectorResults summarize a selector's behaviour on the samples.
type selectorResults struct {
	empty, valid bool
	matched      string // one character per sample, 'x' for a match
}

func checkSelectorProperties(t *testing.T, sel *v1alpha1.IdentityLabelPurposeSelector) selectorResults {
	t.Helper()
	err := sel.Validate()
	res := selectorResults{empty: sel.Empty(), valid: err == nil}

	parts := map[string]v1alpha1.Selector{
		"identities": &sel.IdentitySelector,
		"labels":     &sel.LabelSelector,
		"purposes":   &sel.PurposeSelector,
	}
	for name, p := range parts {
		pErr := p.Validate()
		if pErr != nil && err == nil {
			t.Fatalf("%s part is invalid (%v), but the aggregate is valid", name, pErr)
		}
		for _, s := range samples {
			got := p.Matches(s.obj)
			if pErr != nil && got {
				t.Fatalf("invalid %s part (%v) matches %s", name, pErr, s.key)
			}
			if pErr == nil && p.Empty() && !got {
				t.Fatalf("valid Empty %s part does not match %s", name, s.key)
			}
		}
	}

	for _, s := range samples {
		got := sel.Matches(s.obj)
		switch {
		case err != nil:
			if got {
				t.Fatalf("invalid selector (%v) matches %s", err, s.key)
			}
		case res.empty:
			if !got {
				t.Fatalf("valid Empty selector does not match %s", s.key)
			}
		case !sel.IdentitySelector.Empty():
			if want := sel.IdentitySelector.Matches(s.obj); got != want {
				t.Fatalf("Matches(%s) = %v, but the identities, which override, say %v", s.key, got, want)
			}
		default:
			if want := sel.LabelSelector.Matches(s.obj) && sel.PurposeSelector.Matches(s.obj); got != want {
				t.Fatalf("Matches(%s) = %v, but labels AND purposes say %v", s.key, got, want)
			}
		}
		if got {
			res.matched += "x"
		} else {
			res.matched += "-"
		}
	}
	return res
}
