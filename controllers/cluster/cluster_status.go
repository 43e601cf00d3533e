package cluster

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Condition types of a Cluster.
const (
	// ConditionProvisioned says whether the cluster behind the Cluster resource exists (its
	// processes, containers or machines were created); a Backend's backend.PartProvisioned
	// replaces what the reconciler says of a cluster that exists (DataLost).
	ConditionProvisioned = backend.PartProvisioned
	// ConditionAPIServerReady says whether the cluster's API server serves requests.
	ConditionAPIServerReady = "APIServerReady"
	// ConditionControllerManagerReady says whether the cluster's kube-controller-manager runs its
	// controllers (backend.PartControllerManager).
	ConditionControllerManagerReady = backend.PartControllerManager
	// ConditionEtcdHealthy says whether the cluster's etcd takes writes (backend.PartEtcd).
	ConditionEtcdHealthy = backend.PartEtcd
	// ConditionEndpointResilient says whether the cluster's endpoint survives the loss of any one
	// node of its host (backend.PartEndpoint). Informational: it does not make the Cluster not
	// Ready.
	ConditionEndpointResilient = backend.PartEndpoint
	// ConditionHibernated says whether the cluster's control plane is hibernated
	// (backend.PartHibernated): True (Idle, OnDemand) while no process runs and the first
	// connection wakes it, False (Awake). Informational: a hibernated cluster is Ready.
	ConditionHibernated = backend.PartHibernated
	// ConditionDeleted says, while the Cluster is deleted, what the deletion waits for.
	ConditionDeleted = "Deleted"
	// ConditionVersionUpToDate says whether the cluster runs the version the Cluster asks for:
	// True (VersionCurrent), or False while it is upgraded (Upgrading) or because the change was
	// refused (VersionChangeRefused: the message says why and what to do; the cluster keeps
	// running its version).
	ConditionVersionUpToDate = "VersionUpToDate"
)

// Reasons of the Cluster conditions and Events. The backend's reasons (backend.Reason*) are used
// as they are: VersionNotSupported, CapacityExhausted, QuotaExceeded, Starting, Restarting,
// Running, BackendStarting.
const (
	// ReasonProvisioned: the backend created the cluster.
	ReasonProvisioned = "Provisioned"
	// ReasonBackendUnavailable: the ProviderConfig's backend does not run in this operator.
	ReasonBackendUnavailable = "BackendUnavailable"
	// ReasonProvisioningFailed: the backend failed for a reason worth retrying.
	ReasonProvisioningFailed = "ProvisioningFailed"
	// ReasonWaitingForFinalizers: the deletion waits for other controllers' finalizers.
	ReasonWaitingForFinalizers = "WaitingForFinalizers"
	// ReasonDeleting: the backend deletes the cluster.
	ReasonDeleting = "Deleting"
	// ReasonDeleted: the cluster is gone and the finalizer removed (Event only).
	ReasonDeleted = "Deleted"
	// ReasonReady: the cluster became ready (Event only).
	ReasonReady = "Ready"
	// ReasonProcessRestarted: a process of the cluster exited and is restarted (Event only).
	ReasonProcessRestarted = "ProcessRestarted"
	// ReasonDataLost: the cluster was created anew, empty, because its data was gone (condition
	// Provisioned, and a Warning Event).
	ReasonDataLost = backend.ReasonDataLost
	// ReasonStateRepaired: the backend found part of the cluster's state damaged and made it anew
	// without loss (Warning Event).
	ReasonStateRepaired = backend.ReasonStateRepaired
	// ReasonVersionCurrent: the cluster runs the version asked for (condition VersionUpToDate).
	ReasonVersionCurrent = "VersionCurrent"
	// ReasonUpgraded: an upgrade finished (Event only).
	ReasonUpgraded = "Upgraded"
	// ReasonEtcdHealthy: etcd takes writes again after an alarm (Event only).
	ReasonEtcdHealthy = "EtcdHealthy"
)

func setCondition(cl *clustersv1alpha1.Cluster, condType string, ok bool, reason, message string) {
	status := metav1.ConditionFalse
	if ok {
		status = metav1.ConditionTrue
	}
	kit.SetCondition(&cl.Status.Status, cl.Generation, condType, status, reason, message)
}

// setNotProvisioned records why nothing runs for cl. The API server and the controller manager
// cannot be ready either.
func setNotProvisioned(cl *clustersv1alpha1.Cluster, reason, message string) {
	setCondition(cl, ConditionProvisioned, false, reason, message)
	setCondition(cl, ConditionAPIServerReady, false, reason, "No cluster runs: see condition Provisioned.")
	if meta.FindStatusCondition(cl.Status.Conditions, ConditionControllerManagerReady) != nil {
		setCondition(cl, ConditionControllerManagerReady, false, reason, "No cluster runs: see condition Provisioned.")
	}
}

// setState records what the backend observes of cl's cluster: conditions, endpoints and the
// provider status. It never writes a credential.
func setState(cl *clustersv1alpha1.Cluster, backendName string, s backend.State, snaps []backend.Snapshot) error {
	if s.Reason == backend.ReasonBackendStarting {
		setNotProvisioned(cl, s.Reason, s.Message)
		return nil
	}
	setCondition(cl, ConditionProvisioned, true, ReasonProvisioned,
		fmt.Sprintf("The %s backend runs a cluster of Kubernetes %s for this Cluster.", backendName, s.Runs))
	setVersion(cl, s)
	setCondition(cl, ConditionAPIServerReady, s.Ready, s.Reason, s.Message)
	setParts(cl, s.Parts)
	cl.Status.APIServer = s.Endpoint
	cl.Status.Endpoints = cl.Status.Endpoints[:0]
	for name, url := range s.Endpoints {
		cl.Status.Endpoints = append(cl.Status.Endpoints, clustersv1alpha1.Endpoint{Name: name, URL: url})
	}
	slices.SortFunc(cl.Status.Endpoints, func(a, b clustersv1alpha1.Endpoint) int { return strings.Compare(a.Name, b.Name) })
	if len(cl.Status.Endpoints) == 0 {
		cl.Status.Endpoints = nil
	}
	if s.ProviderStatus == nil {
		cl.Status.ProviderStatus = nil
		return nil
	}
	raw, err := json.Marshal(s.ProviderStatus)
	if err != nil {
		return fmt.Errorf("marshalling the provider status: %w", err)
	}
	if raw, err = withBackups(raw, snaps); err != nil {
		return fmt.Errorf("listing the snapshots in the provider status: %w", err)
	}
	if cl.Status.ProviderStatus == nil || string(cl.Status.ProviderStatus.Raw) != string(raw) {
		cl.Status.ProviderStatus = &runtime.RawExtension{Raw: raw}
	}
	return nil
}

// setParts sets a condition for each part the backend reports and removes those of the part
// types it does not report.
func setParts(cl *clustersv1alpha1.Cluster, parts []backend.Part) {
	for _, p := range parts {
		setCondition(cl, p.Type, p.Ready, p.Reason, p.Message)
	}
	for _, t := range backend.PartTypes {
		if !slices.ContainsFunc(parts, func(p backend.Part) bool { return p.Type == t }) {
			meta.RemoveStatusCondition(&cl.Status.Conditions, t)
		}
	}
}

// listedSnapshot is a snapshot as status.providerStatus.backups lists it.
type listedSnapshot struct {
	Name     string      `json:"name"`
	Taken    metav1.Time `json:"taken"`
	Size     int64       `json:"size"`
	Revision int64       `json:"revision"`
	Keys     int64       `json:"keys"`
	Version  string      `json:"version,omitempty"`
}

// withBackups adds the list of snaps (newest first) to the provider status raw, a JSON object,
// as "backups"; with none it is raw unchanged.
func withBackups(raw []byte, snaps []backend.Snapshot) ([]byte, error) {
	if len(snaps) == 0 {
		return raw, nil
	}
	var ps map[string]json.RawMessage
	if err := json.Unmarshal(raw, &ps); err != nil {
		return nil, err
	}
	list := make([]listedSnapshot, len(snaps))
	for i, s := range snaps {
		list[i] = listedSnapshot{Name: s.Name, Taken: metav1.NewTime(s.Taken), Size: s.Size, Revision: s.Revision, Keys: s.Keys, Version: s.Version}
	}
	b, err := json.Marshal(list)
	if err != nil {
		return nil, err
	}
	ps["backups"] = b
	return json.Marshal(ps)
}

// setVersion records whether the cluster runs the version asked for (condition VersionUpToDate).
func setVersion(cl *clustersv1alpha1.Cluster, s backend.State) {
	switch c := s.VersionChange; {
	case c == nil:
		setCondition(cl, ConditionVersionUpToDate, true, ReasonVersionCurrent, fmt.Sprintf("The cluster runs Kubernetes %s.", s.Runs))
	case c.Refused:
		setCondition(cl, ConditionVersionUpToDate, false, backend.ReasonVersionChangeRefused, c.Message)
	default:
		setCondition(cl, ConditionVersionUpToDate, false, backend.ReasonUpgrading, c.Message)
	}
}

// readyMessage says what serves in a Ready cluster: the API server's condition message, and the
// controller manager's where the backend reports one.
func readyMessage(cl *clustersv1alpha1.Cluster) string {
	var parts []string
	for _, t := range []string{ConditionAPIServerReady, ConditionControllerManagerReady} {
		if c := meta.FindStatusCondition(cl.Status.Conditions, t); c != nil {
			parts = append(parts, c.Message)
		}
	}
	return strings.Join(parts, " ")
}

// setWaitingForFinalizers records a deletion that waits for the finalizers of other controllers.
func setWaitingForFinalizers(cl *clustersv1alpha1.Cluster, foreign []string) {
	setCondition(cl, ConditionDeleted, false, ReasonWaitingForFinalizers, fmt.Sprintf(
		"The cluster is deleted once these finalizers of other controllers are removed: %s.", strings.Join(foreign, ", ")))
}

// setDeleting records that the backend deletes the cluster.
func setDeleting(cl *clustersv1alpha1.Cluster, backendName string) {
	setCondition(cl, ConditionDeleted, false, ReasonDeleting, fmt.Sprintf("The %s backend deletes the cluster.", backendName))
}

// finish sets observedGeneration and the phase. VersionUpToDate, BackedUp, Restored, Hibernated and
// EndpointResilient do not count (a hibernated cluster's endpoint answers): a cluster whose version change was refused keeps serving its
// version and stays Ready (its requests are granted); one that upgrades or is restored is not
// Ready anyway while its API server restarts; a failed snapshot, or an endpoint on one node, is
// worth an alert, not an outage. Nor does EtcdHealthy while it says EtcdDegraded: a member is
// down but the quorum serves.
func finish(cl *clustersv1alpha1.Cluster) {
	informational := []string{ConditionVersionUpToDate, ConditionBackedUp, ConditionRestored, ConditionEndpointResilient, ConditionHibernated}
	if c := meta.FindStatusCondition(cl.Status.Conditions, ConditionEtcdHealthy); c != nil && c.Reason == backend.ReasonEtcdDegraded {
		informational = append(informational, ConditionEtcdHealthy)
	}
	kit.ReconciledPhase(&cl.Status.Status, cl.Generation, !cl.DeletionTimestamp.IsZero(), informational...)
}

// transition describes how a condition changed between two statuses: "" if its status and
// reason are the same.
func transition(before, after []metav1.Condition, condType string) (changed bool, now *metav1.Condition) {
	b, a := meta.FindStatusCondition(before, condType), meta.FindStatusCondition(after, condType)
	if a == nil {
		return false, nil
	}
	return b == nil || b.Status != a.Status || b.Reason != a.Reason, a
}
