package v1alpha1

import (
	"encoding/json"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-local/cluster-provider/api/common"
)

// AccessRequestSpec asks for access to a cluster, by token or by OIDC. clusterRef and requestRef
// cannot change or be removed once set. A request with neither is accepted (as by openMCP) and
// waits: the central AccessRequest controller reports that it has no reference.
//
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.clusterRef) || has(self.clusterRef)",message="clusterRef may not be removed once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.requestRef) || has(self.requestRef)",message="requestRef may not be removed once set"
// +kubebuilder:validation:XValidation:rule="(has(self.token) && !has(self.oidc)) || (!has(self.token) && has(self.oidc))",message="exactly one of spec.token or spec.oidc must be set"
type AccessRequestSpec struct {
	// ClusterRef references the Cluster to access. It takes precedence over requestRef; the
	// central AccessRequest controller fills it from requestRef when empty.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="clusterRef is immutable"
	// +optional
	ClusterRef *common.ObjectReference `json:"clusterRef,omitempty"`

	// RequestRef references a ClusterRequest whose granted Cluster is to be accessed.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="requestRef is immutable"
	// +optional
	RequestRef *common.ObjectReference `json:"requestRef,omitempty"`

	// Token requests token-based access through a ServiceAccount and RBAC.
	// +optional
	Token *TokenConfig `json:"token,omitempty"`

	// OIDC requests OIDC-based access.
	// +optional
	OIDC *OIDCConfig `json:"oidc,omitempty"`

	// TTL limits the access's lifetime, counted from the AccessRequest's creationTimestamp: the
	// AccessRequest is deleted when it ends, and no token outlives it. A TTL that is not
	// positive has ended at once.
	// +optional
	TTL *metav1.Duration `json:"ttl,omitempty"`
}

// TokenConfig describes the permissions a token-based access grants.
type TokenConfig struct {
	// Permissions become a Role (namespace set) or ClusterRole (namespace empty) each, bound to
	// the access's ServiceAccount.
	// +optional
	Permissions []PermissionsRequest `json:"permissions,omitempty"`

	// RoleRefs are existing (Cluster)Roles bound to the access's ServiceAccount.
	// +optional
	RoleRefs []common.RoleRef `json:"roleRefs,omitempty"`
}

// PermissionsRequest is a set of RBAC rules, granted cluster-wide or in one namespace.
type PermissionsRequest struct {
	// Name of the generated (Cluster)Role; generated when empty.
	// +optional
	Name string `json:"name,omitempty"`

	// Namespace makes this a Role in that namespace; empty makes it a ClusterRole.
	// +optional
	Namespace string `json:"namespace,omitempty"`

	// Rules of the (Cluster)Role.
	Rules []rbacv1.PolicyRule `json:"rules"`

	// DisableAutomaticNamespaceCreation keeps the provider from creating Namespace when it does
	// not exist; the Role is then granted only once someone else creates it.
	// +optional
	DisableAutomaticNamespaceCreation bool `json:"disableAutomaticNamespaceCreation,omitempty"`
}

// OIDCConfig requests OIDC-based access: the trust relationship plus additional roles.
type OIDCConfig struct {
	common.OIDCProviderConfig `json:",inline"`

	// Roles are additional (Cluster)Roles to create, for the role bindings to reference.
	// +optional
	Roles []PermissionsRequest `json:"roles,omitempty"`
}

// MarshalJSON writes c like encoding/json does, except that a nil roleBindings is written as []
// rather than null: the field is required, and the API server does not accept null for it.
func (c OIDCConfig) MarshalJSON() ([]byte, error) {
	type plain OIDCConfig // the same fields without this method
	p := plain(c)
	if p.RoleBindings == nil {
		p.RoleBindings = []common.RoleBindings{}
	}
	return json.Marshal(p)
}

// AccessRequestStatus is the observed state of an AccessRequest. Phase is Pending, Granted or
// Denied.
type AccessRequestStatus struct {
	common.Status `json:",inline"`

	// SecretRef names the Secret, in the AccessRequest's namespace, that holds the access
	// (keys kubeconfig, expirationTimestamp, creationTimestamp).
	// +optional
	SecretRef *common.LocalObjectReference `json:"secretRef,omitempty"`
}

// AccessRequest asks the responsible ClusterProvider for access to a cluster. The central
// AccessRequest controller labels it with that provider and profile first.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ar;areq
// +kubebuilder:metadata:labels="openmcp.cloud/cluster=platform"
// +kubebuilder:selectablefield:JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=".metadata.labels.clusters\\.openmcp\\.cloud/provider"
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=".metadata.labels.clusters\\.openmcp\\.cloud/profile",priority=1
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=".spec.clusterRef.name"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type AccessRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AccessRequestSpec   `json:"spec,omitempty"`
	Status AccessRequestStatus `json:"status,omitempty"`
}

// AccessRequestList is a list of AccessRequests.
//
// +kubebuilder:object:root=true
type AccessRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AccessRequest `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AccessRequest{}, &AccessRequestList{})
}
