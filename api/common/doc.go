// Package common holds the API types shared by every kind of this operator: the common status
// (observedGeneration, phase, conditions) that each status embeds inline, object references and
// the OIDC provider configuration. It holds types and their small helpers only; it must not
// import controller code.
//
// +kubebuilder:object:generate=true
package common
