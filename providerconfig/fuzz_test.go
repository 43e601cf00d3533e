package providerconfig

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// FuzzValidate feeds validate ProviderConfig specs (as JSON) and names: it never panics, every
// error line names the field to fix, and what it accepts the operator can serve (every version
// parses and is listed once, the default is a supported, non-deprecated one, the profile name is a
// label value). `make fuzz` runs it.
func FuzzValidate(f *testing.F) {
	for _, s := range []string{
		`{"backend":"local","supportedVersions":[{"version":"1.37.1"},{"version":"1.36.3","deprecated":true}],"defaultVersion":"1.37.1"}`,
		`{"backend":"local","supportedVersions":[{"version":"1.37"},{"version":"v1.37.1"},{"version":"1.37.1"}],"defaultVersion":"latest"}`,
		`{"backend":"kind","supportedVersions":[{"version":"1.36.3","deprecated":true}],"defaultVersion":"1.36.3","kind":{"nodeImages":{"1.36.3":"img"}}}`,
		`{"backend":"local","oidc":{"allowedIssuers":["https://a"],"issuerCABundle":"not PEM"}}`,
	} {
		f.Add([]byte(s), "local")
	}
	f.Add([]byte(`{}`), strings.Repeat("n", 70))
	f.Fuzz(func(t *testing.T, spec []byte, name string) {
		pc := &providersv1alpha1.ProviderConfig{}
		if json.Unmarshal(spec, &pc.Spec) != nil {
			return
		}
		pc.Name = name
		profile := "default.local." + name
		if errs := validateFields(pc, profile); len(errs) > 0 {
			for _, e := range errs {
				if (!strings.HasPrefix(e.Field, "spec.") && e.Field != "metadata.name") || e.Detail == "" && e.Type != field.ErrorTypeDuplicate {
					t.Fatalf("an error that does not say which field to fix, and how: %v", e)
				}
			}
			return
		}
		seen := map[string]bool{}
		for _, v := range pc.Spec.SupportedVersions {
			ver, err := version.ParseSemantic(v.Version)
			if err != nil {
				t.Fatalf("accepted version %q does not parse: %v", v.Version, err)
			}
			if seen[ver.String()] {
				t.Fatalf("accepted version %q twice", v.Version)
			}
			seen[ver.String()] = true
		}
		if d := pc.Spec.DefaultVersion; d != "" {
			ok := false
			for _, v := range pc.Spec.SupportedVersions {
				if same(v.Version, d) && !v.Deprecated {
					ok = true
				}
			}
			if !ok {
				t.Fatalf("accepted default version %q that is not a supported, non-deprecated one", d)
			}
		}
		if errs := validation.IsValidLabelValue(profile); len(errs) > 0 {
			t.Fatalf("accepted profile name %q: %v", profile, errs)
		}
	})
}

func same(a, b string) bool {
	va, ea := version.ParseSemantic(a)
	vb, eb := version.ParseSemantic(b)
	return ea == nil && eb == nil && va.String() == vb.String()
}
