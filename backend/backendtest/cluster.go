package backendtest

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"

	"github.com/openmcp-local/cluster-provider/backend"
)

// Cluster is one fake cluster: what a test scripts and what Ensure reports. A test changes it
// with Set and reads it with Get.
type Cluster struct {
	// UID is the UID of the Cluster it runs for; empty while it is only scripted.
	UID types.UID
	// Runs is the version the Fake recorded (backend.State.Runs); Version the one its API server
	// reports (State.Version). A version change moves both, unless HoldUpgrade keeps Version
	// behind: then State.VersionChange says the upgrade is in progress until a test sets Version.
	Runs, Version string
	HoldUpgrade   bool
	// RefuseVersionChange, when set, refuses every change the contract allows, with this message:
	// a backend's own refusal (kind cannot change a node's version, say).
	RefuseVersionChange string

	// Ready, Reason and Message are the API server's state (a made cluster is Ready, reason
	// Running, unless scripted).
	Ready           bool
	Reason, Message string
	// Parts are the parts the Fake reports (State.Parts): backend.PartControllerManager,
	// PartEtcd, PartEndpoint, or PartProvisioned with reason DataLost.
	Parts []backend.Part
	// Warnings are reported by the next Ensure only (State.Warnings), as a real backend does.
	Warnings []backend.Warning
	// RetryAfter is State.RetryAfter.
	RetryAfter time.Duration

	// EnsureError, when set, is what Ensure returns; nothing is made or changed.
	EnsureError error
	// DeleteError, when set, is what Delete returns; DeletePending, when not zero, is how many
	// more Deletes answer "not gone yet".
	DeleteError   error
	DeletePending int
	// AdminConfigError, when set, is what AdminConfig returns.
	AdminConfigError error
	// SnapshotError, when set, is what Snapshot returns.
	SnapshotError error

	// JWT is what SetJWTAuthenticators was last given; HoldJWT makes it answer "not applied yet".
	JWT     []apiserverv1.JWTAuthenticator
	HoldJWT bool

	// Restored is the last restore (State.Restored); HoldRestore keeps a restore under way
	// (reason Restoring) until a test clears it.
	Restored    *backend.Restored
	HoldRestore bool

	ref       backend.Ref
	seq       uint64
	refused   *backend.VersionChange
	restoring *backend.Snapshot
}

// endpoint is where every fake cluster's API server is: Options.Server's.
type endpoint struct {
	host string
	ca   []byte
}

// State is what Ensure reports of c, for the backend named name. It is the one place that builds a
// backend.State from a fake cluster.
func State(c *Cluster, name string, at endpoint) backend.State {
	s := backend.State{
		Ready: c.Ready, Reason: c.Reason, Message: c.Message,
		Version: c.Version, Runs: c.Runs, VersionChange: c.versionChange(),
		Info:           fmt.Sprintf("%s v%s (fake)", name, c.Runs),
		ProviderStatus: map[string]string{"backend": name, "fake": "true"},
		Parts:          slices.Clone(c.Parts), Warnings: slices.Clone(c.Warnings),
		Restored: c.Restored, RetryAfter: c.RetryAfter,
	}
	if at.host != "" {
		s.Endpoint, s.CABundle = at.host, slices.Clone(at.ca)
		s.Endpoints = map[string]string{backend.EndpointAPIServerExternal: at.host}
	}
	switch {
	case c.restoring != nil:
		s.Ready, s.Reason = false, backend.ReasonRestoring
		s.Message = fmt.Sprintf("Restoring snapshot %s: the cluster is not Ready until it serves the snapshot's data.", c.restoring.Name)
	case s.Reason == "" && s.Ready:
		s.Reason, s.Message = backend.ReasonRunning, fmt.Sprintf("The fake API server of Kubernetes %s serves.", c.Version)
	case s.Reason == "":
		s.Reason, s.Message = backend.ReasonStarting, "The fake cluster starts."
	}
	return s
}

// versionChange is the change c makes or refused.
func (c *Cluster) versionChange() *backend.VersionChange {
	if c.refused != nil {
		v := *c.refused
		return &v
	}
	if c.Version != "" && !backend.SameVersion(c.Version, c.Runs) {
		return &backend.VersionChange{From: c.Version, To: c.Runs,
			Message: fmt.Sprintf("Upgrading from Kubernetes %s to %s in place (fake).", c.Version, c.Runs)}
	}
	return nil
}

// finishRestore ends a restore under way unless the script holds it.
func (c *Cluster) finishRestore() {
	if c.restoring == nil || c.HoldRestore {
		return
	}
	c.Restored = &backend.Restored{Snapshot: *c.restoring, At: time.Now()}
	c.restoring = nil
}

// Set changes the cluster of the Cluster key with change and notifies, as a real backend does
// when a cluster's state changes by itself. change runs under the Fake's lock: it must not call
// the Fake. A cluster not made yet is scripted: its Cluster's first
// Ensure makes it from what change set (Ready as set, so a test may start it not Ready).
func (f *Fake) Set(key types.NamespacedName, change func(*Cluster)) {
	f.mu.Lock()
	c := f.newest(key)
	if c == nil {
		if c = f.scripts[key]; c == nil {
			c = &Cluster{Ready: true}
			f.scripts[key] = c
		}
	}
	change(c)
	ref, notify := c.ref, f.notify // a script is notified once its Cluster asked for it
	f.mu.Unlock()
	if notify != nil && ref.Name != "" {
		notify(ref)
	}
}

// Get returns a copy of the cluster of the Cluster key (the newest, if a name was reused), and
// whether one is made.
func (f *Fake) Get(key types.NamespacedName) (Cluster, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.newest(key)
	if c == nil {
		return Cluster{}, false
	}
	return c.copy(), true
}

// copy is a deep copy of c, for a test to read while the Fake goes on.
func (c *Cluster) copy() Cluster {
	out := *c
	out.JWT = slices.Clone(c.JWT)
	out.Parts, out.Warnings = slices.Clone(c.Parts), slices.Clone(c.Warnings)
	if c.Restored != nil {
		r := *c.Restored
		out.Restored = &r
	}
	out.refused, out.restoring = nil, nil
	return out
}

// Running reports whether a cluster runs for the Cluster of uid.
func (f *Fake) Running(uid types.UID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.clusters[uid]
	return ok
}

// newest is the cluster made last for key; the caller holds mu.
func (f *Fake) newest(key types.NamespacedName) *Cluster {
	var found *Cluster
	for _, c := range f.clusters {
		if c.ref.NamespacedName == key && (found == nil || c.seq > found.seq) {
			found = c
		}
	}
	return found
}
