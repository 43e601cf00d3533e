package common

import (
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

// Defaults applied by OIDCProviderConfig.Default.
const (
	DefaultOIDCUsernameClaim = "sub"
	DefaultOIDCGroupsClaim   = "groups"
)

// OIDCProviderConfig describes a trust relationship with an OIDC identity provider and the
// bindings granted to the identities it issues. Call Default before reading it.
type OIDCProviderConfig struct {
	// Name identifies this provider configuration; it must be a DNS subdomain other than
	// "system" (reserved, as in openMCP).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:XValidation:rule=`self != "system"`,message="'system' is a reserved string and may not be used as OIDC provider name"
	Name string `json:"name"`

	// Issuer is the URL of the OIDC issuer. The schema asks for what openMCP's does (an http or
	// https URL); the provider denies a request whose issuer is not an https URL.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Pattern=`^https?://[^\s/$.?#].[^\s]*$`
	Issuer string `json:"issuer"`

	// ClientID is the OIDC client ID (the token audience).
	// +kubebuilder:validation:MinLength=1
	ClientID string `json:"clientID"`

	// UsernameClaim is the token claim holding the user name. Defaults to "sub" (the API server
	// fills it in when it is left out; Default does the same in Go).
	// +kubebuilder:default="sub"
	// +optional
	UsernameClaim string `json:"usernameClaim,omitempty"`

	// UsernamePrefix is prepended to user names. Default appends a ':' if it is missing.
	// +optional
	UsernamePrefix string `json:"usernamePrefix,omitempty"`

	// GroupsClaim is the token claim holding the groups. Defaults to "groups" (the API server
	// fills it in when it is left out; Default does the same in Go).
	// +kubebuilder:default="groups"
	// +optional
	GroupsClaim string `json:"groupsClaim,omitempty"`

	// GroupsPrefix is prepended to group names. Default appends a ':' if it is missing.
	// +optional
	GroupsPrefix string `json:"groupsPrefix,omitempty"`

	// ExtraScopes are requested in addition to "openid" (used by the oidc-login kubectl plugin).
	// +optional
	ExtraScopes []string `json:"extraScopes,omitempty"`

	// RoleBindings to create for identities of this provider. Required, as in openMCP; it may
	// be empty. A nil list would be written as null, which the API server does not accept for a
	// required list: the API type embedding this one writes [] instead (see
	// clusters/v1alpha1.OIDCConfig.MarshalJSON).
	RoleBindings []RoleBindings `json:"roleBindings"`
}

// RoleBindings binds each subject to each referenced (Cluster)Role.
type RoleBindings struct {
	// Subjects to bind.
	Subjects []rbacv1.Subject `json:"subjects"`

	// RoleRefs are the (Cluster)Roles bound to the subjects.
	RoleRefs []RoleRef `json:"roleRefs"`
}

// Default fills in the defaults: the claims become "sub" and "groups" if unset, and non-empty
// username and groups prefixes get a trailing ':' if they lack one. It is safe on a nil
// receiver and returns its receiver, so that `cfg.Default().Issuer` reads well.
func (c *OIDCProviderConfig) Default() *OIDCProviderConfig {
	if c == nil {
		return nil
	}
	if c.UsernameClaim == "" {
		c.UsernameClaim = DefaultOIDCUsernameClaim
	}
	if c.GroupsClaim == "" {
		c.GroupsClaim = DefaultOIDCGroupsClaim
	}
	c.UsernamePrefix = withColon(c.UsernamePrefix)
	c.GroupsPrefix = withColon(c.GroupsPrefix)
	return c
}

func withColon(prefix string) string {
	if prefix == "" || strings.HasSuffix(prefix, ":") {
		return prefix
	}
	return prefix + ":"
}
