package common

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Status is the common status that every status of this API embeds inline
// (see controller-guidelines.md, "Status Reporting"). Like openMCP's, it has observedGeneration
// and phase as required fields, so every status write must carry both: a controller sets them in
// the same write as its first condition.
type Status struct {
	// ObservedGeneration is the metadata.generation the controller saw when it last wrote
	// this status. Required, as in openMCP's status: it is always written, 0 included.
	ObservedGeneration int64 `json:"observedGeneration"`

	// Phase aggregates the state into one word: Ready, Progressing or Terminating for most
	// kinds; Pending, Granted or Denied for requests. Required, as in openMCP's status: it is
	// always written, "" included.
	Phase string `json:"phase"`

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
