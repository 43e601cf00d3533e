package common

import "k8s.io/apimachinery/pkg/types"

// LocalObjectReference names an object in the same namespace as the referrer (or a
// cluster-scoped object). It is atomic, as openMCP's (Kubernetes') LocalObjectReference: a
// server-side apply replaces it as a whole.
// +structType=atomic
type LocalObjectReference struct {
	// Name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// Key returns the referenced object's key; an empty namespace means the referrer's.
func (r ObjectReference) Key(referrerNamespace string) types.NamespacedName {
	if r.Namespace == "" {
		return types.NamespacedName{Namespace: referrerNamespace, Name: r.Name}
	}
	return types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
}

// ObjectReference names a namespaced object. Both fields are required, as in openMCP's
// ObjectReference, and both are always written; the schema puts no further limits on them (a
// reference to an object that cannot exist simply finds nothing).
type ObjectReference struct {
	// Name of the referenced object.
	Name string `json:"name"`

	// Namespace of the referenced object. Key reads an empty one as the referrer's namespace.
	Namespace string `json:"namespace"`
}

// RoleRef references a ClusterRole, or a Role in a namespace. A ClusterRole with a namespace is
// bound in that namespace only. A Role needs a namespace; like openMCP, the schema does not check
// that: the provider denies such a request with a reason that says so.
type RoleRef struct {
	// Name of the (Cluster)Role.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Namespace of the Role; empty for a ClusterRole.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Kind is Role or ClusterRole.
	// +kubebuilder:validation:Enum=Role;ClusterRole
	Kind string `json:"kind"`
}
