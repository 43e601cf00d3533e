package scheduler

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// ConditionScheduled is the scheduler's condition on a ClusterRequest (openMCP's scheduler writes
// none): True once a Cluster is assigned and holds the request's finalizer; False with a reason
// that says what the request waits for or what to fix; Unknown after an unexpected error, which is
// retried with backoff.
const ConditionScheduled = "Scheduled"

// Reasons of the Scheduled condition, also the reasons of the Events the scheduler emits.
const (
	// ReasonGranted (True): the request has its Cluster; the message names it.
	ReasonGranted = "Granted"
	// ReasonNoPurposeMapping (False): the configuration has no purposeMapping for spec.purpose.
	ReasonNoPurposeMapping = "NoPurposeMapping"
	// ReasonClusterConflict (False): the Cluster the request would get exists and is used by
	// other requests, or is not a Cluster of the purpose.
	ReasonClusterConflict = "ClusterConflict"
	// ReasonWaitingForCluster (False): the Cluster the request would get (or has) is being
	// deleted; it is created anew once it is gone.
	ReasonWaitingForCluster = "WaitingForCluster"
	// ReasonClusterRejected (False): the API server rejected the new Cluster (the template breaks
	// a rule of the Cluster API); fix scheduler.purposeMappings and restart the operator.
	ReasonClusterRejected = "ClusterRejected"
	// ReasonWaitingForClusterDeletion (False): the request is being deleted with
	// spec.waitForClusterDeletion and waits until its Cluster is gone.
	ReasonWaitingForClusterDeletion = "WaitingForClusterDeletion"
	// ReasonSchedulingFailed (Unknown): an unexpected error, retried with backoff.
	ReasonSchedulingFailed = "SchedulingFailed"
)

// Reasons of Events only.
const (
	// ReasonClusterCreated: the scheduler created a Cluster for the request.
	ReasonClusterCreated = "ClusterCreated"
	// ReasonClusterRecreated: the request's Cluster was gone and was created anew, empty.
	ReasonClusterRecreated = "ClusterRecreated"
	// ReasonClusterReleased: the deleted request's finalizer was removed from its Cluster.
	ReasonClusterReleased = "ClusterReleased"
	// ReasonClusterDeleted: the released Cluster served no other request and was deleted.
	ReasonClusterDeleted = "ClusterDeleted"
)

// setGranted records that cr has Cluster cl: status.cluster (kept if set: it never changes),
// phase Granted, and the Scheduled condition.
func setGranted(cr *clustersv1alpha1.ClusterRequest, cl *clustersv1alpha1.Cluster, how string) {
	if cr.Status.Cluster == nil {
		cr.Status.Cluster = &common.ObjectReference{Namespace: cl.Namespace, Name: cl.Name}
	}
	cr.Status.Phase = common.PhaseGranted
	cr.Status.ObservedGeneration = cr.Generation
	kit.SetCondition(&cr.Status.Status, cr.Generation, ConditionScheduled, metav1.ConditionTrue, ReasonGranted,
		fmt.Sprintf("Cluster %s/%s (%s)", cl.Namespace, cl.Name, how))
}

// setNotScheduled records why cr is not (or no longer fully) served: the reason of err, False, or
// Unknown for an unexpected error. A request without a Cluster is Pending; a Granted one stays
// Granted (status.cluster never changes) with the condition saying what is wrong.
func setNotScheduled(cr *clustersv1alpha1.ClusterRequest, err error) {
	if cr.Status.Cluster == nil {
		cr.Status.Phase = common.PhasePending
	}
	cr.Status.ObservedGeneration = cr.Generation
	status, reason := metav1.ConditionFalse, kit.ReasonOf(err, ReasonSchedulingFailed)
	if reason == ReasonSchedulingFailed {
		status = metav1.ConditionUnknown
	}
	kit.SetCondition(&cr.Status.Status, cr.Generation, ConditionScheduled, status, reason, err.Error())
}

// reasonOf is the reason of cr's Scheduled condition, empty without one.
func reasonOf(cr *clustersv1alpha1.ClusterRequest) string {
	if c := meta.FindStatusCondition(cr.Status.Conditions, ConditionScheduled); c != nil {
		return c.Reason
	}
	return ""
}

func statusOf(cr *clustersv1alpha1.ClusterRequest) any { return cr.Status }
