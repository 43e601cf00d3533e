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
// openMCP is described below by the facts these tests compare, not by a copy of its files.
// Paths are schema paths: ".spec.purposes" is a property, "[]" the items of an array. The subtrees
// of metav1.Condition (status.conditions[]) come from Kubernetes in both and are not compared.
//
// The differences this provider keeps on purpose are listed in keptDifferences, each with its
// reason; anything else that differs fails a test.

// openMCPKind is what this provider's copy of one openMCP CRD must match.
type openMCPKind struct {
	crd        string // the CRD's name
	kind       string // spec.names.kind
	scope      apiextensionsv1.ResourceScope
	shortNames []string // spec.names.shortNames
	selectable []string // the versions' selectableFields
	// fields lists every property of openMCP's schema with its type, one "path type" a line.
	fields string
	// required is every required list of openMCP's schema, by the path of the object it is in.
	required map[string][]string
	// rules are openMCP's x-kubernetes-validations, "path: rule => message".
	rules []string
	// constraints are openMCP's value constraints, one "path key=JSON value" a line (see
	// constraintsOf for the keys).
	constraints string
}

var openMCPKinds = []openMCPKind{
	{
		crd: "clusters.clusters.openmcp.cloud", kind: "Cluster", scope: apiextensionsv1.NamespaceScoped,
		shortNames: nil, // openMCP has none; this provider's former "cl" is gone
		selectable: []string{".spec.profile"},
		fields: `
			.spec object
			.spec.clusterConfigs array
			.spec.clusterConfigs[] object
			.spec.clusterConfigs[].name string
			.spec.kubernetes object
			.spec.kubernetes.version string
			.spec.profile string
			.spec.purposes array
			.spec.purposes[] string
			.spec.tenancy string
			.status object
			.status.apiServer string
			.status.conditions array
			.status.conditions[] object
			.status.endpoints array
			.status.endpoints[] object
			.status.endpoints[].name string
			.status.endpoints[].url string
			.status.observedGeneration integer
			.status.phase string
			.status.providerStatus object`,
		required: map[string][]string{
			".spec":               {"profile", "tenancy"},
			".status":             {"observedGeneration", "phase"},
			".status.endpoints[]": {"name", "url"},
		},
		rules: []string{
			".spec.profile: self == oldSelf => profile is immutable",
		},
		constraints: `
			.spec.clusterConfigs[] x-kubernetes-map-type="atomic"
			.spec.clusterConfigs[].name default=""
			.spec.purposes minItems=1
			.spec.tenancy enum=["Exclusive","Shared"]
			.status.conditions x-kubernetes-list-type="map"
			.status.conditions x-kubernetes-list-map-keys=["type"]
			.status.observedGeneration format="int64"
			.status.providerStatus x-kubernetes-preserve-unknown-fields=true`,
	},
	{
		crd: "clusterprofiles.clusters.openmcp.cloud", kind: "ClusterProfile", scope: apiextensionsv1.ClusterScoped,
		shortNames: []string{"cprof", "profile"},
		selectable: []string{".spec.providerRef.name", ".spec.providerConfigRef.name"},
		fields: `
			.spec object
			.spec.providerConfigRef object
			.spec.providerConfigRef.name string
			.spec.providerRef object
			.spec.providerRef.name string
			.spec.supportedVersions array
			.spec.supportedVersions[] object
			.spec.supportedVersions[].deprecated boolean
			.spec.supportedVersions[].version string`,
		required: map[string][]string{
			".spec":                     {"providerConfigRef", "providerRef", "supportedVersions"},
			".spec.supportedVersions[]": {"version"},
		},
		constraints: `
			.spec.providerConfigRef x-kubernetes-map-type="atomic"
			.spec.providerConfigRef.name default=""
			.spec.providerRef x-kubernetes-map-type="atomic"
			.spec.providerRef.name default=""
			.spec.supportedVersions[].version minLength=5`,
	},
	{
		crd: "clusterrequests.clusters.openmcp.cloud", kind: "ClusterRequest", scope: apiextensionsv1.NamespaceScoped,
		shortNames: []string{"cr", "creq"},
		selectable: []string{".spec.purpose", ".status.phase"},
		fields: `
			.spec object
			.spec.purpose string
			.spec.waitForClusterDeletion boolean
			.status object
			.status.cluster object
			.status.cluster.name string
			.status.cluster.namespace string
			.status.conditions array
			.status.conditions[] object
			.status.observedGeneration integer
			.status.phase string`,
		required: map[string][]string{
			".spec":           {"purpose"},
			".status":         {"observedGeneration", "phase"},
			".status.cluster": {"name", "namespace"},
		},
		rules: []string{
			".spec: self == oldSelf => spec is immutable",
			".status: !has(oldSelf.cluster) || has(self.cluster) => cluster may not be removed once set",
			".status.cluster: self == oldSelf => cluster is immutable",
		},
		constraints: `
			.spec.purpose minLength=1
			.status.conditions x-kubernetes-list-type="map"
			.status.conditions x-kubernetes-list-map-keys=["type"]
			.status.observedGeneration format="int64"`,
	},
	{
		crd: "accessrequests.clusters.openmcp.cloud", kind: "AccessRequest", scope: apiextensionsv1.NamespaceScoped,
		shortNames: []string{"ar", "areq"},
		selectable: []string{".status.phase"},
		fields: `
			.spec object
			.spec.clusterRef object
			.spec.clusterRef.name string
			.spec.clusterRef.namespace string
			.spec.oidc object
			.spec.oidc.clientID string
			.spec.oidc.extraScopes array
			.spec.oidc.extraScopes[] string
			.spec.oidc.groupsClaim string
			.spec.oidc.groupsPrefix string
			.spec.oidc.issuer string
			.spec.oidc.name string
			.spec.oidc.roleBindings array
			.spec.oidc.roleBindings[] object
			.spec.oidc.roleBindings[].roleRefs array
			.spec.oidc.roleBindings[].roleRefs[] object
			.spec.oidc.roleBindings[].roleRefs[].kind string
			.spec.oidc.roleBindings[].roleRefs[].name string
			.spec.oidc.roleBindings[].roleRefs[].namespace string
			.spec.oidc.roleBindings[].subjects array
			.spec.oidc.roleBindings[].subjects[] object
			.spec.oidc.roles array
			.spec.oidc.roles[] object
			.spec.oidc.roles[].disableAutomaticNamespaceCreation boolean
			.spec.oidc.roles[].name string
			.spec.oidc.roles[].namespace string
			.spec.oidc.roles[].rules array
			.spec.oidc.roles[].rules[] object
			.spec.oidc.usernameClaim string
			.spec.oidc.usernamePrefix string
			.spec.requestRef object
			.spec.requestRef.name string
			.spec.requestRef.namespace string
			.spec.token object
			.spec.token.permissions array
			.spec.token.permissions[] object
			.spec.token.permissions[].disableAutomaticNamespaceCreation boolean
			.spec.token.permissions[].name string
			.spec.token.permissions[].namespace string
			.spec.token.permissions[].rules array
			.spec.token.permissions[].rules[] object
			.spec.token.roleRefs array
			.spec.token.roleRefs[] object
			.spec.token.roleRefs[].kind string
			.spec.token.roleRefs[].name string
			.spec.token.roleRefs[].namespace string
			.spec.ttl string
			.status object
			.status.conditions array
			.status.conditions[] object
			.status.observedGeneration integer
			.status.phase string
			.status.secretRef object
			.status.secretRef.name string`,
		required: map[string][]string{
			".spec.clusterRef":                     {"name", "namespace"},
			".spec.oidc":                           {"clientID", "issuer", "name", "roleBindings"},
			".spec.oidc.roleBindings[]":            {"roleRefs", "subjects"},
			".spec.oidc.roleBindings[].roleRefs[]": {"kind", "name"},
			".spec.oidc.roleBindings[].subjects[]": {"kind", "name"},
			".spec.oidc.roles[]":                   {"rules"},
			".spec.oidc.roles[].rules[]":           {"verbs"},
			".spec.requestRef":                     {"name", "namespace"},
			".spec.token.permissions[]":            {"rules"},
			".spec.token.permissions[].rules[]":    {"verbs"},
			".spec.token.roleRefs[]":               {"kind", "name"},
			".status":                              {"observedGeneration", "phase"},
		},
		rules: []string{
			".spec: !has(oldSelf.clusterRef) || has(self.clusterRef) => clusterRef may not be removed once set",
			".spec: !has(oldSelf.requestRef) || has(self.requestRef) => requestRef may not be removed once set",
			".spec: (has(self.token) && !has(self.oidc)) || (!has(self.token) && has(self.oidc)) => exactly one of spec.token or spec.oidc must be set",
			".spec.clusterRef: self == oldSelf => clusterRef is immutable",
			".spec.requestRef: self == oldSelf => requestRef is immutable",
			`.spec.oidc.name: self != "system" => 'system' is a reserved string and may not be used as OIDC provider name`,
		},
		constraints: `
			.spec.oidc.clientID minLength=1
			.spec.oidc.groupsClaim default="groups"
			.spec.oidc.issuer pattern="^https?://[^\\s/$.?#].[^\\s]*$"
			.spec.oidc.issuer minLength=1
			.spec.oidc.name pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
			.spec.oidc.name minLength=1
			.spec.oidc.name maxLength=253
			.spec.oidc.roleBindings[].roleRefs[].kind enum=["Role","ClusterRole"]
			.spec.oidc.roleBindings[].roleRefs[].name minLength=1
			.spec.oidc.roleBindings[].subjects[] x-kubernetes-map-type="atomic"
			.spec.oidc.roles[].rules[].apiGroups x-kubernetes-list-type="atomic"
			.spec.oidc.roles[].rules[].nonResourceURLs x-kubernetes-list-type="atomic"
			.spec.oidc.roles[].rules[].resourceNames x-kubernetes-list-type="atomic"
			.spec.oidc.roles[].rules[].resources x-kubernetes-list-type="atomic"
			.spec.oidc.roles[].rules[].verbs x-kubernetes-list-type="atomic"
			.spec.oidc.usernameClaim default="sub"
			.spec.token.permissions[].rules[].apiGroups x-kubernetes-list-type="atomic"
			.spec.token.permissions[].rules[].nonResourceURLs x-kubernetes-list-type="atomic"
			.spec.token.permissions[].rules[].resourceNames x-kubernetes-list-type="atomic"
			.spec.token.permissions[].rules[].resources x-kubernetes-list-type="atomic"
			.spec.token.permissions[].rules[].verbs x-kubernetes-list-type="atomic"
			.spec.token.roleRefs[].kind enum=["Role","ClusterRole"]
			.spec.token.roleRefs[].name minLength=1
			.status.conditions x-kubernetes-list-type="map"
			.status.conditions x-kubernetes-list-map-keys=["type"]
			.status.observedGeneration format="int64"
			.status.secretRef x-kubernetes-map-type="atomic"
			.status.secretRef.name default=""`,
	},
}

// keptDifference is a deliberate difference from openMCP's schema of one CRD.
type keptDifference struct {
	// required lists required fields only this provider has, by path.
	required map[string][]string
	// oursOnly are constraints only this provider has; openMCPOnly are openMCP's that it lacks.
	oursOnly, openMCPOnly []string
}

// keptDifferences are the differences this provider keeps, by CRD name. All of them are in
// fields that only controllers write, never users: the name of a reference the provider writes
// (spec.providerRef and spec.providerConfigRef of the ClusterProfiles it publishes, an
// AccessRequest's status.secretRef) is required and a valid object name rather than defaulting
// to "", and a Cluster's status.endpoints is a list keyed by name (the provider writes each name
// once).
var keptDifferences = map[string]keptDifference{
	"clusters.clusters.openmcp.cloud": {
		oursOnly: []string{
			`.status.endpoints x-kubernetes-list-type="map"`,
			`.status.endpoints x-kubernetes-list-map-keys=["name"]`,
		},
	},
	"clusterprofiles.clusters.openmcp.cloud": {
		required: map[string][]string{".spec.providerRef": {"name"}, ".spec.providerConfigRef": {"name"}},
		oursOnly: []string{
			".spec.providerRef.name minLength=1", ".spec.providerRef.name maxLength=253",
			".spec.providerConfigRef.name minLength=1", ".spec.providerConfigRef.name maxLength=253",
		},
		openMCPOnly: []string{`.spec.providerRef.name default=""`, `.spec.providerConfigRef.name default=""`},
	},
	"accessrequests.clusters.openmcp.cloud": {
		required:    map[string][]string{".status.secretRef": {"name"}},
		oursOnly:    []string{".status.secretRef.name minLength=1", ".status.secretRef.name maxLength=253"},
		openMCPOnly: []string{`.status.secretRef.name default=""`},
	},
}

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
