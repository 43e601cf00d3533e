package common

import "k8s.io/apimachinery/pkg/types"

// LocalObjectReference names an object in the same namespace as the referrer (or a
// cluster-scoped object).
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

// ObjectReference names a namespaced object.
type ObjectReference struct {
	// Name of the referenced object.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Namespace of the referenced object.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// RoleRef references a ClusterRole, or a Role in a namespace. A ClusterRole with a namespace is
// bound in that namespace only.
// +kubebuilder:validation:XValidation:rule="self.kind != 'Role' || (has(self.namespace) && size(self.namespace) > 0)",message="a roleRef of kind Role needs a namespace"
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
