package api

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// TestShortNamesUnique asks the API server's discovery which resource each of our CRDs' names and
// short names resolve to: none may also belong to another resource (kubectl would pick one and
// warn; `pc` used to answer `kubectl get pc` from PriorityClasses). The ProviderConfig's short name
// is the one documented in docs/operations.md.
func TestShortNamesUnique(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	require.NoError(t, err)
	_, lists, err := dc.ServerGroupsAndResources()
	require.NoError(t, err)

	owners := map[string][]string{} // name or short name → the resources that answer to it
	for _, list := range lists {
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // a subresource: it answers to no name of its own
			}
			gv, err := schema.ParseGroupVersion(list.GroupVersion)
			require.NoError(t, err)
			id := r.Name + "." + gv.Group
			for _, n := range append([]string{r.Name, r.SingularName}, r.ShortNames...) {
				if n != "" && !slices.Contains(owners[n], id) {
					owners[n] = append(owners[n], id)
				}
			}
		}
	}
	ours := map[string][]string{ // our CRDs' resources and the short names they must keep
		"providerconfigs." + providersv1alpha1.GroupVersion.Group: {"pcfg"},
		"clusterprofiles.clusters.openmcp.cloud":                  {"profile"},
		"clusterrequests.clusters.openmcp.cloud":                  {"creq"},
		"accessrequests.clusters.openmcp.cloud":                   {"areq"},
	}
	for id, want := range ours {
		for _, short := range want {
			assert.Equal(t, []string{id}, owners[short], "short name %q", short)
		}
	}
	assert.NotContains(t, owners["pc"], "providerconfigs."+providersv1alpha1.GroupVersion.Group, "pc is PriorityClasses' short name")
	for name, ids := range owners {
		for _, id := range ids {
			if _, mine := ours[id]; mine && len(ids) > 1 {
				t.Errorf("%q names %v: ambiguous in kubectl", name, ids)
			}
		}
	}
}
