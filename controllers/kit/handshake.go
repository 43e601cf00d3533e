package kit

import (
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

// The handshake between the central AccessRequest labeller and the ClusterProviders, as openMCP's
// operator defines it (lib/utils IsClusterProviderResponsibleForAccessRequest, and its generic
// AccessRequest controller): the labeller labels a request and sets it Pending; a provider acts on
// a Pending request, and on a Granted one only while status.observedGeneration matches; when the
// spec of a Granted (or Denied) request changes, the labeller sets it Pending again first. So two
// controllers never write the phase of one request at once, and a request settles Granted.

// ProviderResponsible reports whether a ClusterProvider may act on ar now: it carries both the
// provider and the profile label, and is Pending, or Granted for its current generation. A request
// being deleted is the provider's whatever its phase: its access must be revoked.
func ProviderResponsible(ar *clustersv1alpha1.AccessRequest) bool {
	if !ar.DeletionTimestamp.IsZero() {
		return Labelled(ar)
	}
	switch ar.Status.Phase {
	case common.PhasePending:
		return Labelled(ar)
	case common.PhaseGranted:
		return Labelled(ar) && ar.Status.ObservedGeneration == ar.Generation
	}
	return false
}

// NeedsPending reports whether the labeller must set the labelled request ar Pending before a
// provider acts on it: it has no phase yet, or it was Granted or Denied for an older generation
// (its spec changed since). A Denied request of its current generation stays Denied: it is
// looked at again only when its spec changes.
func NeedsPending(ar *clustersv1alpha1.AccessRequest) bool {
	if !Labelled(ar) {
		return false
	}
	switch ar.Status.Phase {
	case "":
		return true
	case common.PhaseGranted, common.PhaseDenied:
		return ar.Status.ObservedGeneration != ar.Generation
	}
	return false
}

// SetPending sets ar's phase Pending for its current generation; its conditions stay.
func SetPending(ar *clustersv1alpha1.AccessRequest) {
	ar.Status.Phase = common.PhasePending
	ar.Status.ObservedGeneration = ar.Generation
}

// Labelled reports whether o carries both the provider and the profile label.
func Labelled(o client.Object) bool {
	l := o.GetLabels()
	_, provider := l[clustersv1alpha1.ProviderLabel]
	_, profile := l[clustersv1alpha1.ProfileLabel]
	return provider && profile
}

// BecamePending passes updates of an AccessRequest whose phase turned Pending: the labeller's
// handover to the provider, a status-only change that generation filtering drops.
func BecamePending() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return phaseOf(e.ObjectOld) != common.PhasePending && phaseOf(e.ObjectNew) == common.PhasePending
	}}
}

func phaseOf(o client.Object) string {
	if ar, ok := o.(*clustersv1alpha1.AccessRequest); ok {
		return ar.Status.Phase
	}
	return ""
}
