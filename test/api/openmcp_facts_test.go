package api

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// The facts of openMCP's CRDs that openmcp_test.go compares with the generated ones in deploy/crds,
// and the differences this provider keeps on purpose.

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
