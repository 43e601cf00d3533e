package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// TestWant: what the backend is asked is the version only (the ProviderConfig's settings, as
// spec.audit, reach the backend through its binding, backend.Backend.ForProfile): the profile's
// default for a Cluster that names none, else the one it names.
func TestWant(t *testing.T) {
	offer := backend.Offer{Versions: []clustersv1alpha1.SupportedK8sVersion{{Version: "1.37.1"}, {Version: "1.36.3"}}, Default: "1.37.1"}
	r := &Reconciler{ProfileScope: kit.ProfileScope{Offer: offer}}
	for _, c := range []struct {
		name, asks string
		want       backend.Want
	}{
		{"none named", "", backend.Want{Version: "1.37.1"}},
		{"named", "v1.36.3", backend.Want{Version: "1.36.3", Requested: "1.36.3"}},
	} {
		cl := &clustersv1alpha1.Cluster{Spec: clustersv1alpha1.ClusterSpec{Kubernetes: clustersv1alpha1.K8sConfiguration{Version: c.asks}}}
		assert.Equal(t, c.want, r.want(cl), c.name)
	}
}
