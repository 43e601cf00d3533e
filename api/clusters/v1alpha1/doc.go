// Package v1alpha1 is the clusters.openmcp.cloud/v1alpha1 API, wire-compatible with openMCP:
// ClusterProfile, Cluster, ClusterRequest and AccessRequest, the well-known label, annotation and
// Secret key names, and the cluster selector library (selectors.go).
//
// It holds types, constants and pure functions; it must not talk to an API server.
//
// +kubebuilder:object:generate=true
// +groupName=clusters.openmcp.cloud
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of this API.
	GroupVersion = schema.GroupVersion{Group: "clusters.openmcp.cloud", Version: "v1alpha1"}

	// SchemeBuilder registers this API's types with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
