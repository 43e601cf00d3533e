package accessrequest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Condition types of an AccessRequest set by the provider.
const (
	// ConditionGranted says whether the access is granted, and if not, why.
	ConditionGranted = "Granted"
)

// Reasons of the Granted condition.
const (
	// ReasonGranted: the Secret in status.secretRef holds a working access.
	ReasonGranted = "Granted"
	// ReasonClusterNotReady: the Cluster is not Ready yet; the request is granted once it is.
	ReasonClusterNotReady = "ClusterNotReady"
	// ReasonClusterGone: the Cluster does not exist or is being deleted; the request is denied.
	ReasonClusterGone = "ClusterGone"
	// ReasonBackendUnavailable: the profile's backend does not run in this operator.
	ReasonBackendUnavailable = "BackendUnavailable"
	// ReasonOIDCNotSupported: the profile's backend cannot make its clusters trust OIDC issuers.
	ReasonOIDCNotSupported = "OIDCNotSupported"
	// ReasonInvalidPermissions: the cluster's API server rejected a Role, binding or name of the
	// request; the message quotes it.
	ReasonInvalidPermissions = "InvalidPermissions"
	// ReasonNameConflict: a (Cluster)Role or binding of the requested name exists in the cluster
	// and was not made for this request.
	ReasonNameConflict = "NameConflict"
	// ReasonProfileMismatch: the request's profile label names another profile than the one its
	// Cluster belongs to; nothing is granted.
	ReasonProfileMismatch = "ProfileMismatch"
	// ReasonSecretConflict: the request's kubeconfig Secret (<name>.kubeconfig) exists and is not
	// controlled by the request: it is never written or deleted; the message names it.
	ReasonSecretConflict = "SecretConflict"
	// ReasonNamespaceNotFound: a permission's namespace does not exist and its automatic creation
	// is disabled; the request is granted once someone creates it.
	ReasonNamespaceNotFound = "NamespaceNotFound"
	// ReasonExpired: spec.ttl has passed; the request is about to be deleted.
	ReasonExpired = "Expired"
	// ReasonGrantFailed: granting failed for a reason worth retrying (the cluster did not answer).
	ReasonGrantFailed = "GrantFailed"
	// ReasonRevoking: the request is being deleted; its access is being removed from the cluster.
	ReasonRevoking = "Revoking"
	// ReasonClusterRecreated: the cluster was created anew after its data was lost; the access is
	// granted again with a new kubeconfig (Event only).
	ReasonClusterRecreated = "ClusterRecreated"
	// ReasonGrantLost: what was made in the cluster for a Granted request is gone (the cluster
	// restored, replaced or changed by hand); the access is granted again (Warning Event only).
	ReasonGrantLost = "GrantLost"
)

// setPending keeps the request Pending with the reason it waits for.
func setPending(ar *clustersv1alpha1.AccessRequest, reason, message string) {
	setPhase(ar, common.PhasePending, metav1.ConditionFalse, reason, message)
}

// setDenied answers the request negatively. A Denied request is looked at again only when its
// spec changes.
func setDenied(ar *clustersv1alpha1.AccessRequest, reason, message string) {
	setPhase(ar, common.PhaseDenied, metav1.ConditionFalse, reason, message)
	ar.Status.SecretRef = nil
}

// setGranted answers the request with the Secret named secret.
func setGranted(ar *clustersv1alpha1.AccessRequest, secret, message string) {
	setPhase(ar, common.PhaseGranted, metav1.ConditionTrue, ReasonGranted, message)
	ar.Status.SecretRef = &common.LocalObjectReference{Name: secret}
}

func setPhase(ar *clustersv1alpha1.AccessRequest, phase string, status metav1.ConditionStatus, reason, message string) {
	kit.SetCondition(&ar.Status.Status, ar.Generation, ConditionGranted, status, reason, message)
	ar.Status.ObservedGeneration = ar.Generation
	ar.Status.Phase = phase
}

// grantedForGeneration reports whether ar is Granted for its current spec.
func grantedForGeneration(ar *clustersv1alpha1.AccessRequest) bool {
	return ar.Status.Phase == common.PhaseGranted && ar.Status.ObservedGeneration == ar.Generation
}

// deniedForGeneration reports whether ar is Denied for its current spec.
func deniedForGeneration(ar *clustersv1alpha1.AccessRequest) bool {
	return ar.Status.Phase == common.PhaseDenied && ar.Status.ObservedGeneration == ar.Generation
}

// handles reports whether the provider may act on a prepared request now: openMCP's handshake
// (kit.ProviderResponsible). A Granted request whose spec changed, or a Denied one, waits until
// the labeller sets it Pending; a request being deleted is always the provider's.
func handles(ar *clustersv1alpha1.AccessRequest) bool {
	return kit.ProviderResponsible(ar)
}
