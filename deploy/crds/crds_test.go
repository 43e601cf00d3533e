package crds

import (
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

func TestCRDsAreEmbedded(t *testing.T) {
	objs, err := CRDs()
	require.NoError(t, err)
	var names []string
	for _, crd := range objs {
		names = append(names, crd.Name)
	}
	assert.ElementsMatch(t, []string{
		"accessrequests.clusters.openmcp.cloud",
		"clusterprofiles.clusters.openmcp.cloud",
		"clusterrequests.clusters.openmcp.cloud",
		"clusters.clusters.openmcp.cloud",
		"providerconfigs.providers.clusters.openmcp.cloud",
	}, names)
}

// TestKustomizationListsEveryCRD keeps kustomization.yaml (used by deploy/default) in step with
// the generated files.
func TestKustomizationListsEveryCRD(t *testing.T) {
	names, err := fs.Glob(files, crdFiles)
	require.NoError(t, err)
	data, err := os.ReadFile("kustomization.yaml")
	require.NoError(t, err)
	var k struct {
		Resources []string `json:"resources"`
	}
	require.NoError(t, yaml.Unmarshal(data, &k))
	assert.ElementsMatch(t, names, k.Resources)
}
