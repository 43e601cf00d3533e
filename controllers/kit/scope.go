package kit

import (
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// ProfileScope is what every per-profile reconciler works with; the reconcilers embed it.
type ProfileScope struct {
	// Client reads from the shared cache and writes to the API server.
	Client client.Client
	// Recorder emits Events; nil emits none.
	Recorder events.EventRecorder
	// ProviderName is this operator's --provider-name.
	ProviderName string
	// Profile is the name of the ClusterProfile this instance serves.
	Profile string
	// BackendName is the ProviderConfig's spec.backend.
	BackendName string
	// Backend runs the profile's clusters, bound to the profile's ProviderConfig
	// (backend.Backend.ForProfile); nil when BackendName is not available in this operator.
	Backend backend.Backend
	// Offer is what the profile offers: the versions published in the ClusterProfile and the
	// default.
	Offer backend.Offer
	// OIDC is the ProviderConfig's spec.oidc: which issuers the profile's Clusters may trust.
	// Nil allows any, verified with the system's roots.
	OIDC *providersv1alpha1.OIDCSettings
	// Backup is the ProviderConfig's spec.backup: the snapshot schedule. Nil is the default one.
	Backup *providersv1alpha1.BackupPolicy
}

// Event emits an Event on obj if there is a Recorder. note is a format for args.
func (s *ProfileScope) Event(obj client.Object, eventType, reason, action, note string, args ...any) {
	if s.Recorder != nil {
		s.Recorder.Eventf(obj, nil, eventType, reason, action, note, args...)
	}
}
