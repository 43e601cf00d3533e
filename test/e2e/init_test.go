package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/deploy/crds"
)

// TestInitLeavesOpenMCPCRDs: openMCP's operator installs the four clusters.openmcp.cloud CRDs
// itself. `init`, run exactly as openMCP's init Job runs it (its flags after the command), must
// leave every one of them byte-identical when they exist, even with another schema, and install
// only our own ProviderConfig CRD. Before, it force-applied our copies over openMCP's.
func TestInitLeavesOpenMCPCRDs(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, initUser(t))
	ctx := t.Context()

	// openMCP's operator owns the CRDs, with a schema that differs from our copies: a property
	// of its own in Cluster's spec.
	const name = "clusters.clusters.openmcp.cloud"
	original := &apiextensionsv1.CustomResourceDefinition{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Name: name}, original))
	t.Cleanup(func() { // our copy's schema back for the package's other tests
		ctx := context.Background() // the test's context is done by now
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				return err
			}
			crd.Spec = original.Spec
			return env.Client.Update(ctx, crd)
		}))
	})
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return err
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		spec.Properties["fromOpenMCP"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		return env.Client.Update(ctx, crd, client.FieldOwner("openmcp-operator"))
	}))
	before := openMCPCRDs(t)

	out, err := exec.CommandContext(ctx, bin, "init", "--environment=e2e", "--verbosity=INFO", "--provider-name=e2e",
		"--kubeconfig", kubeconfig).CombinedOutput()
	require.NoError(t, err, "cluster-provider init:\n%s", out)
	t.Logf("init:\n%s", out)
	assert.Equal(t, before, openMCPCRDs(t), "openMCP's CRDs are byte-identical after init")
	for crdName := range before {
		assert.Contains(t, string(out), "customresourcedefinition.apiextensions.k8s.io/"+crdName+" exists, left unchanged (owned by ")
	}
	assert.Contains(t, string(out), "customresourcedefinition.apiextensions.k8s.io/providerconfigs.providers.clusters.openmcp.cloud serverside-applied")
	assert.Contains(t, string(out), "customresourcedefinition.apiextensions.k8s.io/"+name+" established")
	// The admission policy of deploy/policy, with the rights of init_role.yaml only.
	for _, applied := range []string{"validatingadmissionpolicy.admissionregistration.k8s.io/cluster-provider-references",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/cluster-provider-references",
		"clusterrole.rbac.authorization.k8s.io/cluster-provider-use-clusters"} {
		assert.Contains(t, string(out), applied+" serverside-applied")
	}

	// --verbosity ERROR prints nothing on success.
	out, err = exec.CommandContext(ctx, bin, "init", "--verbosity=error", "--kubeconfig", kubeconfig).CombinedOutput()
	require.NoError(t, err, "cluster-provider init:\n%s", out)
	assert.Empty(t, string(out))
}

// openMCPCRDs returns the JSON of every embedded CRD that is not our own (openMCP's four), as the
// API server stores it: metadata (resourceVersion and managed fields among it) and spec.
func openMCPCRDs(t *testing.T) map[string]string {
	t.Helper()
	objs, err := crds.CRDs()
	require.NoError(t, err)
	out := map[string]string{}
	for _, want := range objs {
		if want.Spec.Group != "clusters.openmcp.cloud" {
			continue
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, env.Client.Get(t.Context(), client.ObjectKey{Name: want.Name}, crd))
		data, err := json.Marshal(struct {
			Meta any
			Spec any
		}{crd.ObjectMeta, crd.Spec})
		require.NoError(t, err)
		out[crd.Name] = string(data)
	}
	require.Len(t, out, 4)
	return out
}
