// Package v1alpha1 is the providers.clusters.openmcp.cloud/v1alpha1 API: ProviderConfig, the
// configuration resource from which this ClusterProvider publishes one ClusterProfile and runs
// that profile's controllers.
//
// It holds types only; the ProviderConfig controller lives in providerconfig/.
//
// +kubebuilder:object:generate=true
// +groupName=providers.clusters.openmcp.cloud
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "providers.clusters.openmcp.cloud", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
