package crds

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
