package kit

import (
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
}
