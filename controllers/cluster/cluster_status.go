package cluster

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Condition types of a Cluster.
const (
	// ConditionProvisioned says whether the cluster behind the Cluster resource exists.
	ConditionProvisioned = "Provisioned"
)

// Reasons of the Cluster conditions and Events.
const (
	// ReasonNoBackend: this build has no cluster backend wired in yet.
	ReasonNoBackend = "NoBackend"
	// ReasonDeleted: the Cluster's finalizer was removed.
	ReasonDeleted = "Deleted"
)

// setNoBackend records that the Cluster is accepted but not provisioned, because no backend is
// wired in yet.
func setNoBackend(cl *clustersv1alpha1.Cluster) {
	kit.SetCondition(&cl.Status.Status, cl.Generation, ConditionProvisioned, metav1.ConditionFalse, ReasonNoBackend,
		"The Cluster is accepted by this provider, but no cluster backend is wired in yet, so nothing is provisioned.")
	kit.ReconciledPhase(&cl.Status.Status, cl.Generation, !cl.DeletionTimestamp.IsZero())
}
