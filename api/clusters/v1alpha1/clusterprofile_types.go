package v1alpha1

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-local/cluster-provider/api/common"
)

// ClusterProfileSpec describes what a ClusterProvider offers under one profile.
type ClusterProfileSpec struct {
	// ProviderRef names the ClusterProvider that created this profile (its --provider-name).
	ProviderRef common.LocalObjectReference `json:"providerRef"`

	// ProviderConfigRef names the provider configuration responsible for this profile. It is
	// used as a label value, so it must be a valid one.
	ProviderConfigRef common.LocalObjectReference `json:"providerConfigRef"`

	// SupportedVersions lists the Kubernetes versions clusters of this profile can run. It is
	// required, as in openMCP, and may be empty: it is always written, as [] when empty (see
	// MarshalJSON).
	SupportedVersions []SupportedK8sVersion `json:"supportedVersions"`
}

// MarshalJSON writes spec like encoding/json does, except that a nil supportedVersions is
// written as [] rather than null: the field is required, and the API server does not accept
// null for it.
func (s ClusterProfileSpec) MarshalJSON() ([]byte, error) {
	type plain ClusterProfileSpec // the same fields without this method
	p := plain(s)
	if p.SupportedVersions == nil {
		p.SupportedVersions = []SupportedK8sVersion{}
	}
	return json.Marshal(p)
}

// SupportedK8sVersion is one Kubernetes version a profile supports.
type SupportedK8sVersion struct {
	// Version is a semantic version, e.g. 1.33.3.
	// +kubebuilder:validation:MinLength=5
	Version string `json:"version"`

	// Deprecated versions still work but should not be chosen for new clusters.
	// +optional
	Deprecated bool `json:"deprecated,omitempty"`
}

// ClusterProfile is the service discovery record of a ClusterProvider: one per provider
// configuration. It has no status.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=cprof;profile
// +kubebuilder:metadata:labels="openmcp.cloud/cluster=platform"
// +kubebuilder:selectablefield:JSONPath=".spec.providerRef.name"
// +kubebuilder:selectablefield:JSONPath=".spec.providerConfigRef.name"
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=".spec.providerRef.name"
// +kubebuilder:printcolumn:name="Config",type=string,JSONPath=".spec.providerConfigRef.name"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type ClusterProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ClusterProfileSpec `json:"spec,omitempty"`
}

// ClusterProfileList is a list of ClusterProfiles.
//
// +kubebuilder:object:root=true
type ClusterProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterProfile `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ClusterProfile{}, &ClusterProfileList{})
}
