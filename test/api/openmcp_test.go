package api

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/openmcp-local/cluster-provider/deploy/crds"
)

// This file checks that the generated clusters.openmcp.cloud CRDs in deploy/crds are faithful to
// openMCP's own (github.com/openmcp-project/openmcp-operator, api/crds/manifests): every field
// openMCP has, with its type; the same required fields at every level; the same validation
// rules, value constraints, selectable fields and short names. It reads the files only; the
// admission tests (validation_test.go, status_test.go) check the same rules against the API
// server.
//
// openMCP is described in openmcp_facts_test.go by the facts these tests compare, not by a copy
// of its files. Paths are schema paths: ".spec.purposes" is a property, "[]" the items of an
// array. The subtrees of metav1.Condition (status.conditions[]) come from Kubernetes in both and
// are not compared.
//
// The differences this provider keeps on purpose are listed in keptDifferences, each with its
// reason; anything else that differs fails a test.

// generatedCRD returns the CRD named name from deploy/crds and the schema of its only version.
func generatedCRD(t *testing.T, name string) (*apiextensionsv1.CustomResourceDefinition, *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	all, err := crds.CRDs()
	require.NoError(t, err)
	for _, crd := range all {
		if crd.Name == name {
			require.Len(t, crd.Spec.Versions, 1, "openMCP's CRDs have one version, v1alpha1")
			v := crd.Spec.Versions[0]
			require.Equal(t, "v1alpha1", v.Name)
			require.NotNil(t, v.Schema)
			require.NotNil(t, v.Schema.OpenAPIV3Schema)
			return crd, v.Schema.OpenAPIV3Schema
		}
	}
	t.Fatalf("deploy/crds has no CRD %s", name)
	return nil, nil
}

// walkSchema calls visit for every schema node below root (root itself has path ""), children in
// name order, skipping the subtrees of metav1.Condition.
func walkSchema(root *apiextensionsv1.JSONSchemaProps, visit func(path string, s *apiextensionsv1.JSONSchemaProps)) {
	var walk func(path string, s *apiextensionsv1.JSONSchemaProps)
	walk = func(path string, s *apiextensionsv1.JSONSchemaProps) {
		visit(path, s)
		if strings.HasSuffix(path, ".conditions[]") {
			return
		}
		names := make([]string, 0, len(s.Properties))
		for name := range s.Properties {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			child := s.Properties[name]
			walk(path+"."+name, &child)
		}
		if s.Items != nil && s.Items.Schema != nil {
			walk(path+"[]", s.Items.Schema)
		}
	}
	walk("", root)
}

// lines splits a table of the tests above into its trimmed, non-empty lines.
func lines(table string) []string {
	var out []string
	for _, l := range strings.Split(table, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// constraintsOf lists the value constraints of s at path, in the format of
// openMCPKind.constraints.
func constraintsOf(t *testing.T, path string, s *apiextensionsv1.JSONSchemaProps) []string {
	t.Helper()
	var out []string
	add := func(key string, value any) {
		data, err := json.Marshal(value)
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%s %s=%s", path, key, data))
	}
	if len(s.Enum) > 0 {
		add("enum", s.Enum)
	}
	if s.Pattern != "" {
		add("pattern", s.Pattern)
	}
	if s.MinLength != nil {
		add("minLength", *s.MinLength)
	}
	if s.MaxLength != nil {
		add("maxLength", *s.MaxLength)
	}
	if s.MinItems != nil {
		add("minItems", *s.MinItems)
	}
	if s.MaxItems != nil {
		add("maxItems", *s.MaxItems)
	}
	if s.Minimum != nil {
		add("minimum", *s.Minimum)
	}
	if s.Default != nil {
		add("default", s.Default)
	}
	if s.Format != "" {
		add("format", s.Format)
	}
	if s.Nullable {
		add("nullable", true)
	}
	if s.XMapType != nil {
		add("x-kubernetes-map-type", *s.XMapType)
	}
	if s.XListType != nil {
		add("x-kubernetes-list-type", *s.XListType)
	}
	if len(s.XListMapKeys) > 0 {
		add("x-kubernetes-list-map-keys", s.XListMapKeys)
	}
	if s.XPreserveUnknownFields != nil {
		add("x-kubernetes-preserve-unknown-fields", *s.XPreserveUnknownFields)
	}
	return out
}

// TestCRDNamesAreOpenMCPs: kind, scope, short names (openMCP's "areq", "creq" and "profile"
// included, no "cl") and the platform-cluster label.
func TestCRDNamesAreOpenMCPs(t *testing.T) {
	for _, om := range openMCPKinds {
		t.Run(om.kind, func(t *testing.T) {
			crd, _ := generatedCRD(t, om.crd)
			assert.Equal(t, om.kind, crd.Spec.Names.Kind)
			assert.Equal(t, om.scope, crd.Spec.Scope)
			assert.ElementsMatch(t, om.shortNames, crd.Spec.Names.ShortNames, "short names")
			assert.Equal(t, "platform", crd.Labels["openmcp.cloud/cluster"])
		})
	}
}

// TestCRDSelectableFieldsAreOpenMCPs: `kubectl get --field-selector` works on the same fields.
func TestCRDSelectableFieldsAreOpenMCPs(t *testing.T) {
	for _, om := range openMCPKinds {
		t.Run(om.kind, func(t *testing.T) {
			crd, _ := generatedCRD(t, om.crd)
			var got []string
			for _, f := range crd.Spec.Versions[0].SelectableFields {
				got = append(got, f.JSONPath)
			}
			assert.ElementsMatch(t, om.selectable, got)
		})
	}
}

// TestCRDHasEveryFieldOfOpenMCP: every property of openMCP's schema exists with the same JSON
// name and type (Cluster's spec.clusterConfigs among them). Additional properties are allowed.
func TestCRDHasEveryFieldOfOpenMCP(t *testing.T) {
	for _, om := range openMCPKinds {
		t.Run(om.kind, func(t *testing.T) {
			_, schema := generatedCRD(t, om.crd)
			types := map[string]string{}
			walkSchema(schema, func(path string, s *apiextensionsv1.JSONSchemaProps) { types[path] = s.Type })
			for _, l := range lines(om.fields) {
				path, typ, ok := strings.Cut(l, " ")
				require.True(t, ok, l)
				got, exists := types[path]
				if assert.True(t, exists, "%s: openMCP has field %s", om.kind, path) {
					assert.Equal(t, typ, got, "%s: type of %s", om.kind, path)
				}
			}
		})
	}
}

// TestCRDRequiredFieldsAreOpenMCPs: the required lists are openMCP's at every level (e.g.
// ClusterProfile spec.supportedVersions, the namespace of every ObjectReference, a status's
// observedGeneration and phase), plus only the kept differences.
func TestCRDRequiredFieldsAreOpenMCPs(t *testing.T) {
	for _, om := range openMCPKinds {
		t.Run(om.kind, func(t *testing.T) {
			_, schema := generatedCRD(t, om.crd)
			got := map[string][]string{}
			walkSchema(schema, func(path string, s *apiextensionsv1.JSONSchemaProps) {
				if len(s.Required) > 0 && !strings.HasSuffix(path, ".conditions[]") {
					got[path] = slices.Sorted(slices.Values(s.Required))
				}
			})
			want := map[string][]string{}
			for path, req := range om.required {
				want[path] = slices.Sorted(slices.Values(req))
			}
			for path, req := range keptDifferences[om.crd].required {
				want[path] = slices.Sorted(slices.Values(append(slices.Clone(want[path]), req...)))
			}
			assert.Equal(t, want, got)
		})
	}
}

// TestCRDValidationRulesAreOpenMCPs: the x-kubernetes-validations are exactly openMCP's: its
// immutability rules (Cluster spec.profile, ClusterRequest spec and status.cluster,
// AccessRequest spec.clusterRef and spec.requestRef), its "exactly one of token or oidc" and its
// reserved OIDC name; no rule of this provider rejects more.
func TestCRDValidationRulesAreOpenMCPs(t *testing.T) {
	for _, om := range openMCPKinds {
		t.Run(om.kind, func(t *testing.T) {
			_, schema := generatedCRD(t, om.crd)
			var got []string
			walkSchema(schema, func(path string, s *apiextensionsv1.JSONSchemaProps) {
				for _, r := range s.XValidations {
					got = append(got, fmt.Sprintf("%s: %s => %s", path, r.Rule, r.Message))
				}
			})
			assert.ElementsMatch(t, om.rules, got)
		})
	}
}

// TestCRDValueConstraintsAreOpenMCPs: enums, patterns, lengths, item counts, defaults, formats
// and list and map types are openMCP's, but for the kept differences.
func TestCRDValueConstraintsAreOpenMCPs(t *testing.T) {
	for _, om := range openMCPKinds {
		t.Run(om.kind, func(t *testing.T) {
			_, schema := generatedCRD(t, om.crd)
			var got []string
			walkSchema(schema, func(path string, s *apiextensionsv1.JSONSchemaProps) {
				if !strings.Contains(path, ".conditions[]") {
					got = append(got, constraintsOf(t, path, s)...)
				}
			})
			kept := keptDifferences[om.crd]
			var want []string
			for _, c := range lines(om.constraints) {
				if !slices.Contains(kept.openMCPOnly, c) {
					want = append(want, c)
				}
			}
			want = append(want, kept.oursOnly...)
			assert.ElementsMatch(t, want, got)
		})
	}
}
