package common

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Status is the common status that every status of this API embeds inline
// (see controller-guidelines.md, "Status Reporting").
type Status struct {
	// ObservedGeneration is the metadata.generation the controller saw when it last wrote
	// this status.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase aggregates the state into one word: Ready, Progressing or Terminating for most
	// kinds; Pending, Granted or Denied for requests.
	// +optional
	Phase string `json:"phase,omitempty"`

	// Conditions describe the latest observations. Each type appears at most once.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
}

// The phases a status reports for resources that are reconciled towards a desired state.
const (
	// PhaseReady means the resource is not being deleted and all of its conditions are True.
	PhaseReady = "Ready"
	// PhaseProgressing means at least one condition is not True; that condition says why.
	PhaseProgressing = "Progressing"
	// PhaseTerminating means the resource has a deletion timestamp.
	PhaseTerminating = "Terminating"
)

// The phases of requests (ClusterRequest, AccessRequest).
const (
	// PhasePending means the request is not answered yet.
	PhasePending = "Pending"
	// PhaseGranted means the request was answered positively.
	PhaseGranted = "Granted"
	// PhaseDenied means the request was answered negatively.
	PhaseDenied = "Denied"
)
