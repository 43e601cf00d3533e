package backendtest

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"

	"github.com/openmcp-local/cluster-provider/backend"
)

// The methods a Call records.
const (
	MethodEnsure               = "Ensure"
	MethodDelete               = "Delete"
	MethodAdminConfig          = "AdminConfig"
	MethodSetJWTAuthenticators = "SetJWTAuthenticators"
	MethodSnapshot             = "Snapshot"
	MethodRestore              = "Restore"
)

// Call is one call of the Fake, with its arguments.
type Call struct {
	// Method is one of the Method* constants.
	Method string
	// Cluster and UID name the Cluster it was about.
	Cluster types.NamespacedName
	UID     types.UID
	// Want is Ensure's argument.
	Want backend.Want
	// JWT is SetJWTAuthenticators' argument.
	JWT []apiserverv1.JWTAuthenticator
	// Snapshot is the snapshot Restore was asked for; Retention Snapshot's retention.
	Snapshot  string
	Retention backend.Retention
}

// Calls returns the calls of method about the Cluster key, oldest first.
func (f *Fake) Calls(method string, key types.NamespacedName) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if c.Method == method && c.Cluster == key {
			c.JWT = slices.Clone(c.JWT)
			out = append(out, c)
		}
	}
	return out
}

// Count returns how many calls of method about the Cluster key were made.
func (f *Fake) Count(method string, key types.NamespacedName) int {
	return len(f.Calls(method, key))
}

// Log returns every call about the Cluster key, oldest first: the order of calls of different
// methods.
func (f *Fake) Log(key types.NamespacedName) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Call
	for _, c := range f.calls {
		if c.Cluster == key {
			c.JWT = slices.Clone(c.JWT)
			out = append(out, c)
		}
	}
	return out
}
