package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-local/cluster-provider/api/common"
)

// ClusterRequestSpec asks the scheduler for a cluster of a purpose. It cannot be changed once
// the ClusterRequest exists.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
type ClusterRequestSpec struct {
	// Purpose of the requested cluster.
	// +kubebuilder:validation:MinLength=1
	Purpose string `json:"purpose"`

	// WaitForClusterDeletion keeps the ClusterRequest, once it is deleted, until the Cluster the
	// scheduler deleted with it (because no other request used it) is gone. Default: false, the
	// request goes as soon as its Cluster is released.
	// +optional
	WaitForClusterDeletion *bool `json:"waitForClusterDeletion,omitempty"`
}

// ClusterRequestStatus is the observed state of a ClusterRequest. Phase is Pending, Granted or
// Denied.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.cluster) || has(self.cluster)",message="cluster may not be removed once set"
type ClusterRequestStatus struct {
	common.Status `json:",inline"`

	// Cluster references the Cluster assigned to this request once it is Granted. Once set, it
	// can neither change nor be removed.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="cluster is immutable"
	// +optional
	Cluster *common.ObjectReference `json:"cluster,omitempty"`
}

// ClusterRequest asks for a cluster; the scheduler answers it with a Cluster reference.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cr;creq
// +kubebuilder:metadata:labels="openmcp.cloud/cluster=platform"
// +kubebuilder:selectablefield:JSONPath=".spec.purpose"
// +kubebuilder:selectablefield:JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Purpose",type=string,JSONPath=".spec.purpose"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=".status.cluster.name"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type ClusterRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterRequestSpec   `json:"spec,omitempty"`
	Status ClusterRequestStatus `json:"status,omitempty"`
}

// GetPurposes returns the request's single purpose; it makes ClusterRequest an
// ObjectWithPurposes.
func (r *ClusterRequest) GetPurposes() []string {
	if r.Spec.Purpose == "" {
		return nil
	}
	return []string{r.Spec.Purpose}
}

// ClusterRequestList is a list of ClusterRequests.
//
// +kubebuilder:object:root=true
type ClusterRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterRequest `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ClusterRequest{}, &ClusterRequestList{})
}
