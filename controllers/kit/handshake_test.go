package kit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

// TestHandshake is openMCP's IsClusterProviderResponsibleForAccessRequest, case by case, with the
// labeller's side of it (NeedsPending): for every state at most one of the two may act (a Denied
// answer of the current generation waits for a spec change), but for a request being deleted:
// the provider revokes at once, and the labeller's optimistically locked Pending, which openMCP's
// labeller writes too, changes nothing the revocation relies on.
func TestHandshake(t *testing.T) {
	now := metav1.Now()
	both := map[string]string{clustersv1alpha1.ProviderLabel: "p", clustersv1alpha1.ProfileLabel: "e.p.c"}
	tests := []struct {
		name                string
		labels              map[string]string
		phase               string
		gen, observed       int64
		deleting            bool
		provider, toPending bool
	}{
		{name: "unlabelled", phase: "", gen: 1},
		{name: "one label", labels: map[string]string{clustersv1alpha1.ProviderLabel: "p"}, phase: common.PhasePending, gen: 1, observed: 1},
		{name: "labelled, no phase", labels: both, gen: 1, toPending: true},
		{name: "Pending", labels: both, phase: common.PhasePending, gen: 1, observed: 1, provider: true},
		{name: "Pending, spec changed", labels: both, phase: common.PhasePending, gen: 2, observed: 1, provider: true},
		{name: "Granted", labels: both, phase: common.PhaseGranted, gen: 1, observed: 1, provider: true},
		{name: "Granted, spec changed", labels: both, phase: common.PhaseGranted, gen: 2, observed: 1, toPending: true},
		{name: "Denied", labels: both, phase: common.PhaseDenied, gen: 1, observed: 1},
		{name: "Denied, spec changed", labels: both, phase: common.PhaseDenied, gen: 2, observed: 1, toPending: true},
		{name: "Granted, being deleted (generation bumped)", labels: both, phase: common.PhaseGranted, gen: 2, observed: 1, deleting: true, provider: true, toPending: true},
		{name: "unlabelled, being deleted", phase: common.PhaseGranted, gen: 2, observed: 1, deleting: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels, Generation: tt.gen}}
			ar.Status.Phase, ar.Status.ObservedGeneration = tt.phase, tt.observed
			if tt.deleting {
				ar.DeletionTimestamp = &now
			}
			assert.Equal(t, tt.provider, ProviderResponsible(ar), "ProviderResponsible")
			assert.Equal(t, tt.toPending, NeedsPending(ar), "NeedsPending")
			if tt.toPending {
				SetPending(ar)
				assert.True(t, ProviderResponsible(ar), "after the labeller's hand-over the provider acts")
				assert.False(t, NeedsPending(ar), "and the labeller is done")
			}
		})
	}
}

func TestBecamePending(t *testing.T) {
	ar := func(phase string) *clustersv1alpha1.AccessRequest {
		a := &clustersv1alpha1.AccessRequest{}
		a.Status.Phase = phase
		return a
	}
	p := BecamePending()
	for _, tt := range []struct {
		from, to string
		want     bool
	}{
		{"", common.PhasePending, true},
		{common.PhaseGranted, common.PhasePending, true},
		{common.PhaseDenied, common.PhasePending, true},
		{common.PhasePending, common.PhasePending, false},
		{common.PhasePending, common.PhaseGranted, false},
		{"", "", false},
	} {
		assert.Equal(t, tt.want, p.Update(event.UpdateEvent{ObjectOld: ar(tt.from), ObjectNew: ar(tt.to)}), "%q → %q", tt.from, tt.to)
	}
}
