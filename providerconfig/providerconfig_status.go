package providerconfig

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Condition types of a ProviderConfig.
const (
	// ConditionSpecValid says whether the spec passed the checks admission cannot make.
	ConditionSpecValid = "SpecValid"
	// ConditionProfilePublished says whether the ClusterProfile exists as the spec asks.
	ConditionProfilePublished = "ProfilePublished"
	// ConditionControllersRunning says whether the profile's reconcilers run.
	ConditionControllersRunning = "ControllersRunning"
	// ConditionVersionsServed says whether the backend serves every version spec.supportedVersions
	// lists; those it does not serve are left out of the ClusterProfile.
	ConditionVersionsServed = "VersionsServed"
	// ConditionClustersDeleted says, while deleting, whether Clusters still use the profile.
	ConditionClustersDeleted = "ClustersDeleted"
	// ConditionPoolReady says, with spec.pool, whether every spare cluster it asks for is ready.
	ConditionPoolReady = "PoolReady"
)

// Reasons of the ProviderConfig conditions and Events.
const (
	ReasonValid              = "Valid"
	ReasonInvalidSpec        = "InvalidSpec"
	ReasonPublished          = "Published"
	ReasonProfileNameTaken   = "ProfileNameTaken"
	ReasonPublishFailed      = "PublishFailed"
	ReasonRunning            = "Running"
	ReasonVersionsServed     = "VersionsServed"
	ReasonVersionsNotServed  = "VersionsNotServed"
	ReasonBackendUnavailable = "BackendUnavailable"
	ReasonStarted            = "ControllersStarted"
	ReasonRestarted          = "ControllersRestarted"
	ReasonStartFailed        = "StartFailed"
	ReasonNotStarted         = "NotStarted"
	ReasonClustersRemaining  = "ClustersRemaining"
	ReasonDeleted            = "Deleted"
	ReasonProfileDeleteError = "ProfileDeleteFailed"
	ReasonPoolFull           = "PoolFull"
	ReasonPoolFilling        = "PoolFilling"
	ReasonPoolUnavailable    = "PoolUnavailable"
)

func setCondition(pc *providersv1alpha1.ProviderConfig, condType string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	kit.SetCondition(&pc.Status.Status, pc.Generation, condType, status, reason, message)
}

// setInvalid records an invalid spec: nothing else is done until the spec changes.
func setInvalid(pc *providersv1alpha1.ProviderConfig, err error) {
	setCondition(pc, ConditionSpecValid, false, ReasonInvalidSpec, err.Error())
}

// setClustersRemaining records a deletion that waits for Clusters.
func setClustersRemaining(pc *providersv1alpha1.ProviderConfig, profile string, n int, example string) {
	setCondition(pc, ConditionClustersDeleted, false, ReasonClustersRemaining, fmt.Sprintf(
		"%d Cluster(s) still use ClusterProfile %s (for example %s); the profile's controllers keep running and delete them. Delete those Clusters to finish.",
		n, profile, example))
}

// finish sets observedGeneration and the phase from the conditions. PoolReady is informational:
// the profile serves while its pool fills.
func finish(pc *providersv1alpha1.ProviderConfig) {
	kit.ReconciledPhase(&pc.Status.Status, pc.Generation, !pc.DeletionTimestamp.IsZero(), ConditionPoolReady)
}
