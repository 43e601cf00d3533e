package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// TestWantAudit: what the backend is asked carries the ProviderConfig's spec.audit (on unless
// disabled) besides the version.
func TestWantAudit(t *testing.T) {
	offer := backend.Offer{Versions: []clustersv1alpha1.SupportedK8sVersion{{Version: "1.37.1"}}, Default: "1.37.1"}
	cl := &clustersv1alpha1.Cluster{}
	for _, c := range []struct {
		name   string
		policy *providersv1alpha1.AuditPolicy
		want   bool
	}{
		{"unset", nil, true},
		{"on", &providersv1alpha1.AuditPolicy{}, true},
		{"disabled", &providersv1alpha1.AuditPolicy{Disabled: true}, false},
	} {
		r := &Reconciler{ProfileScope: kit.ProfileScope{Offer: offer, Audit: c.policy}}
		w := r.want(cl)
		assert.Equal(t, c.want, w.Audit, c.name)
		assert.Equal(t, "1.37.1", w.Version, c.name)
	}
}
