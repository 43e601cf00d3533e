package accessrequest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Condition types of an AccessRequest set by the provider.
const (
	// ConditionGranted says whether the access was granted.
	ConditionGranted = "Granted"
)

// Reasons of the AccessRequest conditions.
const (
	// ReasonNoBackend: this build has no access backend wired in yet.
	ReasonNoBackend = "NoBackend"
)

// setPendingNoBackend keeps the request Pending: it is accepted, but nothing can grant it yet.
func setPendingNoBackend(ar *clustersv1alpha1.AccessRequest) {
	kit.SetCondition(&ar.Status.Status, ar.Generation, ConditionGranted, metav1.ConditionFalse, ReasonNoBackend,
		"The AccessRequest is accepted by this provider, but no access backend is wired in yet, so it stays pending.")
	ar.Status.ObservedGeneration = ar.Generation
	ar.Status.Phase = common.PhasePending
}
