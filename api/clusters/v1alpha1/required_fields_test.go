package v1alpha1_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

// The fields openMCP's CRDs require must be written by the Go types even when they are empty:
// the API server rejects an object that leaves a required field out, and it does not accept
// null for a required list. These tests pin how the zero values are encoded, by encoding/json,
// by sigs.k8s.io/yaml and by the unstructured converter (used by server-side apply and the fake
// client).

// encodings returns obj encoded as JSON, by way of YAML, and by the unstructured converter, each
// decoded into a generic map.
func encodings(t *testing.T, obj any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}

	data, err := json.Marshal(obj)
	require.NoError(t, err)
	var fromJSON map[string]any
	require.NoError(t, json.Unmarshal(data, &fromJSON))
	out["json"] = fromJSON

	data, err = yaml.Marshal(obj)
	require.NoError(t, err)
	var fromYAML map[string]any
	require.NoError(t, yaml.Unmarshal(data, &fromYAML))
	out["yaml"] = fromYAML

	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	require.NoError(t, err)
	out["unstructured"] = u
	return out
}

// field walks m along path and returns the value and whether it is there.
func field(m map[string]any, path ...string) (any, bool) {
	var cur any = m
	for _, p := range path {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

func TestEmptySupportedVersionsAreWrittenAsEmptyList(t *testing.T) {
	for name, versions := range map[string][]v1alpha1.SupportedK8sVersion{
		"nil":   nil,
		"empty": {},
	} {
		t.Run(name, func(t *testing.T) {
			cp := &v1alpha1.ClusterProfile{
				ObjectMeta: metav1.ObjectMeta{Name: "default.local.p"},
				Spec: v1alpha1.ClusterProfileSpec{
					ProviderRef:       common.LocalObjectReference{Name: "local"},
					ProviderConfigRef: common.LocalObjectReference{Name: "p"},
					SupportedVersions: versions,
				},
			}
			data, err := json.Marshal(cp)
			require.NoError(t, err)
			assert.Contains(t, string(data), `"supportedVersions":[]`)
			assert.Contains(t, string(data), `"providerRef":{"name":"local"}`, "the other fields are written as before")

			for enc, m := range encodings(t, cp) {
				v, ok := field(m, "spec", "supportedVersions")
				require.True(t, ok, "%s: supportedVersions must be written", enc)
				assert.NotNil(t, v, "%s: supportedVersions must not be null", enc)
				assert.Empty(t, v, enc)
			}

			// The value survives a round trip (as an empty list).
			var back v1alpha1.ClusterProfile
			require.NoError(t, json.Unmarshal(data, &back))
			assert.Empty(t, back.Spec.SupportedVersions)
			assert.Equal(t, cp.Spec.ProviderRef, back.Spec.ProviderRef)
		})
	}
}

func TestSupportedVersionsAreWrittenAsTheyAre(t *testing.T) {
	spec := v1alpha1.ClusterProfileSpec{
		ProviderRef:       common.LocalObjectReference{Name: "local"},
		ProviderConfigRef: common.LocalObjectReference{Name: "p"},
		SupportedVersions: []v1alpha1.SupportedK8sVersion{{Version: "1.37.1"}, {Version: "1.36.3", Deprecated: true}},
	}
	data, err := json.Marshal(spec)
	require.NoError(t, err)
	assert.JSONEq(t, `{
		"providerRef": {"name": "local"},
		"providerConfigRef": {"name": "p"},
		"supportedVersions": [{"version": "1.37.1"}, {"version": "1.36.3", "deprecated": true}]
	}`, string(data))
	var back v1alpha1.ClusterProfileSpec
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, spec, back)
}

func TestEmptyOIDCRoleBindingsAreWrittenAsEmptyList(t *testing.T) {
	ar := &v1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "ar"},
		Spec: v1alpha1.AccessRequestSpec{
			ClusterRef: &common.ObjectReference{Name: "c", Namespace: "ns"},
			OIDC: &v1alpha1.OIDCConfig{
				OIDCProviderConfig: common.OIDCProviderConfig{Name: "idp", Issuer: "https://idp.example.com", ClientID: "client"},
				Roles:              []v1alpha1.PermissionsRequest{{Name: "reader", Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}}}}},
			},
		},
	}
	for enc, m := range encodings(t, ar) {
		v, ok := field(m, "spec", "oidc", "roleBindings")
		require.True(t, ok, "%s: roleBindings must be written", enc)
		assert.NotNil(t, v, "%s: roleBindings must not be null", enc)
		assert.Empty(t, v, enc)
		// The inline provider configuration and the roles are still written.
		for _, path := range [][]string{{"name"}, {"issuer"}, {"clientID"}, {"roles"}} {
			_, ok := field(m, append([]string{"spec", "oidc"}, path...)...)
			assert.True(t, ok, "%s: spec.oidc.%s must be written", enc, path[0])
		}
	}

	data, err := json.Marshal(ar)
	require.NoError(t, err)
	var back v1alpha1.AccessRequest
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Empty(t, back.Spec.OIDC.RoleBindings)
	back.Spec.OIDC.RoleBindings = nil
	assert.Equal(t, ar.Spec, back.Spec, "the OIDC configuration survives a round trip")

	// Role bindings that are set are written as they are.
	ar.Spec.OIDC.RoleBindings = []common.RoleBindings{{
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}},
		RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "reader"}},
	}}
	data, err = json.Marshal(ar)
	require.NoError(t, err)
	back = v1alpha1.AccessRequest{}
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, ar.Spec, back.Spec)
}

// TestReferencesAlwaysHaveANamespace: openMCP requires name and namespace in clusterRef,
// requestRef and a ClusterRequest's status.cluster; an empty namespace is written, not left out.
func TestReferencesAlwaysHaveANamespace(t *testing.T) {
	ar := &v1alpha1.AccessRequest{Spec: v1alpha1.AccessRequestSpec{
		ClusterRef: &common.ObjectReference{Name: "c"},
		RequestRef: &common.ObjectReference{Name: "r"},
		Token:      &v1alpha1.TokenConfig{},
	}}
	cr := &v1alpha1.ClusterRequest{Status: v1alpha1.ClusterRequestStatus{Cluster: &common.ObjectReference{Name: "c"}}}
	for enc, m := range encodings(t, ar) {
		for _, ref := range []string{"clusterRef", "requestRef"} {
			v, ok := field(m, "spec", ref, "namespace")
			assert.True(t, ok, "%s: spec.%s.namespace must be written", enc, ref)
			assert.Equal(t, "", v, enc)
		}
	}
	for enc, m := range encodings(t, cr) {
		v, ok := field(m, "status", "cluster", "namespace")
		assert.True(t, ok, "%s: status.cluster.namespace must be written", enc)
		assert.Equal(t, "", v, enc)
	}
}

// TestStatusAlwaysHasObservedGenerationAndPhase: openMCP requires both in every status; the zero
// values are written, so a status write never leaves them out.
func TestStatusAlwaysHasObservedGenerationAndPhase(t *testing.T) {
	for name, obj := range map[string]runtime.Object{
		"Cluster":        &v1alpha1.Cluster{},
		"ClusterRequest": &v1alpha1.ClusterRequest{},
		"AccessRequest":  &v1alpha1.AccessRequest{},
	} {
		t.Run(name, func(t *testing.T) {
			for enc, m := range encodings(t, obj) {
				gen, ok := field(m, "status", "observedGeneration")
				assert.True(t, ok, "%s: status.observedGeneration must be written", enc)
				assert.EqualValues(t, 0, gen, enc)
				phase, ok := field(m, "status", "phase")
				assert.True(t, ok, "%s: status.phase must be written", enc)
				assert.Equal(t, "", phase, enc)
			}
		})
	}
}
