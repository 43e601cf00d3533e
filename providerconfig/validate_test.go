package providerconfig

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

func TestValidate(t *testing.T) {
	v := func(version string, deprecated bool) clustersv1alpha1.SupportedK8sVersion {
		return clustersv1alpha1.SupportedK8sVersion{Version: version, Deprecated: deprecated}
	}
	tests := []struct {
		name     string
		versions []clustersv1alpha1.SupportedK8sVersion
		def      string
		profile  string
		oidc     *providersv1alpha1.OIDCSettings
		want     []string // substrings of the error; none: valid
	}{
		{name: "valid", versions: []clustersv1alpha1.SupportedK8sVersion{v("1.37.1", false), v("1.36.3", true)}, def: "1.37.1"},
		{name: "no versions, no default", versions: nil},
		{name: "default without versions", def: "1.37.1", want: []string{`spec.defaultVersion: Invalid value: "1.37.1": not in spec.supportedVersions`}},
		{
			name:     "not a semantic version",
			versions: []clustersv1alpha1.SupportedK8sVersion{v("1.37", false), v("latest", false)},
			want: []string{
				`spec.supportedVersions[0].version: Invalid value: "1.37": not a semantic version`,
				`spec.supportedVersions[1].version: Invalid value: "latest"`,
			},
		},
		{
			name:     "duplicate",
			versions: []clustersv1alpha1.SupportedK8sVersion{v("1.37.1", false), v("1.37.1", true)},
			want:     []string{`spec.supportedVersions[1].version: Duplicate value: "1.37.1 (also at index 0)"`},
		},
		{
			name:     "deprecated default",
			versions: []clustersv1alpha1.SupportedK8sVersion{v("1.37.1", false), v("1.36.3", true)},
			def:      "1.36.3",
			want:     []string{`spec.defaultVersion: Invalid value: "1.36.3": deprecated in spec.supportedVersions`},
		},
		{
			name:     "default not a version",
			versions: []clustersv1alpha1.SupportedK8sVersion{v("1.37.1", false)},
			def:      "one",
			want:     []string{`spec.defaultVersion: Invalid value: "one": not a semantic version`},
		},
		{
			name: "an issuer CA bundle without a certificate",
			oidc: &providersv1alpha1.OIDCSettings{IssuerCABundle: "not PEM"},
			want: []string{`spec.oidc.issuerCABundle: Invalid value: "(PEM)": holds no PEM certificate`},
		},
		{
			name:    "profile name too long for a label value",
			profile: "default.test." + strings.Repeat("x", 60),
			want:    []string{`metadata.name: Invalid value: "pc": the ClusterProfile name "default.test.xxx`, "must be no more than 63 bytes"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pc := &providersv1alpha1.ProviderConfig{
				ObjectMeta: metav1.ObjectMeta{Name: "pc"},
				Spec:       providersv1alpha1.ProviderConfigSpec{SupportedVersions: tt.versions, DefaultVersion: tt.def, OIDC: tt.oidc},
			}
			if tt.profile == "" {
				tt.profile = "default.test.pc"
			}
			err := validate(pc, tt.profile)
			if len(tt.want) == 0 {
				assert.NoError(t, err)
				return
			}
			if assert.Error(t, err) {
				for _, w := range tt.want {
					assert.Contains(t, err.Error(), w)
				}
			}
		})
	}
}
