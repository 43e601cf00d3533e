package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// TestNetworkPolicySelectsOpenMCPDeployment: deploy/openmcp/networkpolicy.yaml applies to the pods
// of the Deployment openMCP makes from each of deploy/openmcp's ClusterProviders (local and
// hosted), in the same namespace, and admits their metrics port.
func TestNetworkPolicySelectsOpenMCPDeployment(t *testing.T) {
	for _, file := range []string{"clusterprovider.yaml", "clusterprovider-hosted.yaml"} {
		t.Run(file, func(t *testing.T) { testNetworkPolicySelects(t, "../../deploy/openmcp/"+file) })
	}
}

func testNetworkPolicySelects(t *testing.T, clusterProvider string) {
	in, err := os.ReadFile(clusterProvider)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, run([]string{"--part", "run"}, bytes.NewReader(in), &out))
	d := &appsv1.Deployment{}
	require.NoError(t, yaml.Unmarshal(bytes.TrimPrefix(out.Bytes(), []byte("---\n")), d))

	data, err := os.ReadFile("../../deploy/openmcp/networkpolicy.yaml")
	require.NoError(t, err)
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, yaml.UnmarshalStrict(data, np))

	assert.Equal(t, d.Namespace, np.Namespace)
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	require.NoError(t, err)
	assert.True(t, sel.Matches(k8slabels.Set(d.Spec.Template.Labels)), "%s selects %v", sel, d.Spec.Template.Labels)
	require.Len(t, d.Spec.Template.Spec.Containers, 1)
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		admitted := false
		for _, r := range np.Spec.Ingress {
			for _, rp := range r.Ports {
				admitted = admitted || rp.Port.IntVal == p.ContainerPort
			}
		}
		assert.True(t, admitted, "ingress admits container port %d", p.ContainerPort)
	}
}
