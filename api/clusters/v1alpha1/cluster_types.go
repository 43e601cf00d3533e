package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/openmcp-local/cluster-provider/api/common"
)

// Tenancy says whether a cluster may be shared between requests.
// +kubebuilder:validation:Enum=Exclusive;Shared
type Tenancy string

const (
	// TenancyExclusive clusters serve one request.
	TenancyExclusive Tenancy = "Exclusive"
	// TenancyShared clusters may serve several requests.
	TenancyShared Tenancy = "Shared"
)

// ClusterSpec is the desired state of a Cluster.
type ClusterSpec struct {
	// Profile names the ClusterProfile of this cluster. It decides which ClusterProvider is
	// responsible and cannot be changed: delete and recreate the Cluster to change it.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="profile is immutable"
	Profile string `json:"profile"`

	// ClusterConfigs references provider-specific cluster configuration objects in the Cluster's
	// namespace; their kind depends on the provider the profile names. The local and kind
	// backends of this provider have none and ignore the field.
	// +optional
	ClusterConfigs []corev1.LocalObjectReference `json:"clusterConfigs,omitempty"`

	// Kubernetes holds the desired Kubernetes configuration.
	// +optional
	Kubernetes K8sConfiguration `json:"kubernetes,omitempty"`

	// Purposes of this cluster, evaluated by the scheduler. If set, it must not be empty.
	// +kubebuilder:validation:MinItems=1
	// +optional
	Purposes []string `json:"purposes,omitempty"`

	// Tenancy is Exclusive or Shared.
	Tenancy Tenancy `json:"tenancy"`
}

// K8sConfiguration holds Kubernetes settings of a Cluster.
type K8sConfiguration struct {
	// Version is the desired Kubernetes version; empty means the profile's default.
	// +optional
	Version string `json:"version,omitempty"`
}

// ClusterStatus is the observed state of a Cluster. It never holds a kubeconfig: access is
// granted through AccessRequests.
type ClusterStatus struct {
	common.Status `json:",inline"`

	// APIServer is the cluster's API server endpoint, as soon as it is known.
	// +optional
	APIServer string `json:"apiServer,omitempty"`

	// ProviderStatus is provider-specific; no other controller reads it.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +optional
	ProviderStatus *runtime.RawExtension `json:"providerStatus,omitempty"`

	// Endpoints lists further named endpoints of the cluster.
	// +optional
	// +listType=map
	// +listMapKey=name
	Endpoints []Endpoint `json:"endpoints,omitempty"`
}

// Endpoint is a named URL of a cluster.
type Endpoint struct {
	// Name of the endpoint.
	Name string `json:"name"`
	// URL of the endpoint.
	URL string `json:"url"`
}

// Cluster is a Kubernetes cluster managed by the ClusterProvider its profile names.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:metadata:labels="openmcp.cloud/cluster=platform"
// +kubebuilder:selectablefield:JSONPath=".spec.profile"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=".spec.profile"
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=".metadata.labels.clusters\\.openmcp\\.cloud/provider"
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=".metadata.labels.clusters\\.openmcp\\.cloud/k8sversion"
// +kubebuilder:printcolumn:name="Info",type=string,JSONPath=".metadata.annotations.clusters\\.openmcp\\.cloud/providerinfo",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ClusterSpec   `json:"spec,omitempty"`
	Status ClusterStatus `json:"status,omitempty"`
}

// GetPurposes returns spec.purposes; it makes Cluster an ObjectWithPurposes.
func (c *Cluster) GetPurposes() []string { return c.Spec.Purposes }

// ClusterList is a list of Clusters.
//
// +kubebuilder:object:root=true
type ClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cluster `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Cluster{}, &ClusterList{})
}
