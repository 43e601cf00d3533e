package accessrequest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// TestClientHost: kubeconfigs name the Cluster's published endpoint, not the address the provider
// itself uses (the hosted backend reaches API servers on Services inside the host cluster).
func TestClientHost(t *testing.T) {
	admin := &rest.Config{Host: "https://apiserver.hcp-1.svc:443"}
	for _, tc := range []struct {
		name, status, want string
	}{
		{"the status's endpoint", "https://172.18.0.2:30804", "https://172.18.0.2:30804"},
		{"no endpoint yet: the provider's", "", "https://apiserver.hcp-1.svc:443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &clustersv1alpha1.Cluster{Status: clustersv1alpha1.ClusterStatus{APIServer: tc.status}}
			assert.Equal(t, tc.want, clientHost(cl, admin))
		})
	}
}
