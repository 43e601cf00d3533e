package providerconfig

import (
	"crypto/x509"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/version"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// validate checks what admission cannot: versions are semantic versions, listed once; the
// default version is one of the supported, non-deprecated ones; and the generated profile name
// can be used as a label value (AccessRequests are labelled with it). The message names every
// offending field.
func validate(pc *providersv1alpha1.ProviderConfig, profileName string) error {
	return validateFields(pc, profileName).ToAggregate()
}

// validateFields is validate's list of errors, one per offending field.
func validateFields(pc *providersv1alpha1.ProviderConfig, profileName string) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	seen := map[string]int{}
	parsed := make([]*version.Version, len(pc.Spec.SupportedVersions))
	for i, v := range pc.Spec.SupportedVersions {
		p := spec.Child("supportedVersions").Index(i).Child("version")
		ver, err := version.ParseSemantic(v.Version)
		if err != nil {
			errs = append(errs, field.Invalid(p, v.Version, "not a semantic version such as 1.33.3"))
			continue
		}
		parsed[i] = ver
		if j, dup := seen[ver.String()]; dup {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("%s (also at index %d)", v.Version, j)))
			continue
		}
		seen[ver.String()] = i
	}
	if d := pc.Spec.DefaultVersion; d != "" {
		p := spec.Child("defaultVersion")
		dv, err := version.ParseSemantic(d)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(p, d, "not a semantic version such as 1.33.3"))
		default:
			i, ok := seen[dv.String()]
			switch {
			case !ok:
				errs = append(errs, field.Invalid(p, d, "not in spec.supportedVersions"))
			case pc.Spec.SupportedVersions[i].Deprecated:
				errs = append(errs, field.Invalid(p, d, "deprecated in spec.supportedVersions; choose a supported, non-deprecated version"))
			}
		}
	}
	if o := pc.Spec.OIDC; o != nil && o.IssuerCABundle != "" {
		if !x509.NewCertPool().AppendCertsFromPEM([]byte(o.IssuerCABundle)) {
			errs = append(errs, field.Invalid(spec.Child("oidc", "issuerCABundle"), "(PEM)",
				"holds no PEM certificate; give the CA certificates (-----BEGIN CERTIFICATE-----) that verify the issuers' serving certificates"))
		}
	}
	for _, msg := range validation.IsValidLabelValue(profileName) {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), pc.Name,
			fmt.Sprintf("the ClusterProfile name %q must be usable as a label value (%s); use a shorter ProviderConfig name", profileName, msg)))
	}
	return errs
}
