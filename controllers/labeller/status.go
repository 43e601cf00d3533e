package labeller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// ConditionProviderResolved is the labeller's condition on an AccessRequest: True once the
// responsible ClusterProvider and ClusterProfile are known (the labels follow in the same pass),
// False with a reason saying what the AccessRequest waits for or what to fix, Unknown after an
// unexpected error.
const ConditionProviderResolved = "ProviderResolved"

// Reasons of the ProviderResolved condition. Every False reason except the last two is cleared
// by a watch as soon as the missing object appears or changes; no timer retries them.
const (
	// ReasonResolved (True): the provider and profile are known; the message names them.
	ReasonResolved = "Resolved"
	// ReasonNoReference (False): neither spec.clusterRef nor spec.requestRef is set.
	ReasonNoReference = "NoReference"
	// ReasonClusterRequestNotFound (False): spec.requestRef names no existing ClusterRequest.
	ReasonClusterRequestNotFound = "ClusterRequestNotFound"
	// ReasonWaitingForClusterRequest (False): the ClusterRequest is not Granted with
	// status.cluster set yet.
	ReasonWaitingForClusterRequest = "WaitingForClusterRequest"
	// ReasonClusterRequestDenied (False): the ClusterRequest was denied; it has no Cluster.
	ReasonClusterRequestDenied = "ClusterRequestDenied"
	// ReasonClusterNotFound (False): the referenced Cluster does not exist.
	ReasonClusterNotFound = "ClusterNotFound"
	// ReasonClusterProfileNotFound (False): the Cluster's spec.profile names no ClusterProfile.
	ReasonClusterProfileNotFound = "ClusterProfileNotFound"
	// ReasonInvalidLabelValue (False): the provider or profile name cannot be a label value.
	ReasonInvalidLabelValue = "InvalidLabelValue"
	// ReasonLabelConflict (False): a label is already set to another value than the resolved
	// one; the labeller changes nothing until a user removes or corrects it.
	ReasonLabelConflict = "LabelConflict"
	// ReasonResolutionFailed (Unknown): an unexpected error, retried with backoff.
	ReasonResolutionFailed = "ResolutionFailed"
	// ReasonExpired: the AccessRequest's spec.ttl passed and the labeller deleted it (an Event
	// reason, not a condition's).
	ReasonExpired = "Expired"
)

// setResolution records the outcome of one pass in ar's status: the ProviderResolved condition
// (from t when err is nil, else from err's reason and message), and phase Pending for the current
// generation unless a provider answered this generation already (Granted or Denied): the
// handshake of kit.ProviderResponsible, which hands a request to its provider by setting it
// Pending. The labeller never answers a request.
func setResolution(ar *clustersv1alpha1.AccessRequest, t target, err error) {
	s := &ar.Status.Status
	if answered := s.Phase == common.PhaseGranted || s.Phase == common.PhaseDenied; !answered || s.ObservedGeneration != ar.Generation {
		kit.SetPending(ar)
	}
	status, reason, message := metav1.ConditionTrue, ReasonResolved, t.String()
	if err != nil {
		status, reason, message = metav1.ConditionFalse, kit.ReasonOf(err, ReasonResolutionFailed), err.Error()
		if reason == ReasonResolutionFailed {
			status = metav1.ConditionUnknown
		}
	}
	kit.SetCondition(s, ar.Generation, ConditionProviderResolved, status, reason, message)
}
