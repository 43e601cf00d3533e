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
	// ReasonNotImplemented: this provider does not grant access yet (token and OIDC access come
	// next); the request stays Pending.
	ReasonNotImplemented = "NotImplemented"
)

// setPendingNotImplemented keeps the request Pending: it is accepted, but this provider does not
// grant access yet.
func setPendingNotImplemented(ar *clustersv1alpha1.AccessRequest) {
	kit.SetCondition(&ar.Status.Status, ar.Generation, ConditionGranted, metav1.ConditionFalse, ReasonNotImplemented,
		"The AccessRequest is accepted by this provider, but granting access (token or OIDC) is not implemented yet, so it stays pending.")
	ar.Status.ObservedGeneration = ar.Generation
	ar.Status.Phase = common.PhasePending
}
