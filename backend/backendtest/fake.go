package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// Options say how a Fake behaves. Zero values take the defaults named.
type Options struct {
	// Name is the ProviderConfig spec.backend the Fake serves. Default "local", so that the
	// ProviderConfigs of the tests need no other backend.
	Name string
	// Versions are what the Fake runs, newest first. Default 1.37.1.
	Versions []string
	// Server is the API server every fake cluster's AdminConfig reaches, as its administrator
	// (envtest's configuration). Nil: AdminConfig fails and says so.
	Server *rest.Config
	// MaxClusters, when not zero, is how many clusters the Fake runs at once: a new one beyond is
	// refused with reason CapacityExhausted, and the refused ones are notified, the longest
	// waiting first, when a deletion frees a place.
	MaxClusters int
	// Notify is called when a test changes a cluster (Set, Update). SetNotify sets it later.
	Notify backend.Notify
}

// Fake is an in-memory Backend, Authenticator and Backups. It is safe for concurrent use.
type Fake struct {
	name     string
	versions []string
	server   *rest.Config
	max      int

	mu sync.Mutex
	// notify is called, outside mu, for every change a test makes.
	notify backend.Notify
	// clusters are the clusters made, by the UID of their Cluster.
	clusters map[types.UID]*Cluster
	// scripts are clusters scripted before their Cluster's first Ensure, by its key.
	scripts map[types.NamespacedName]*Cluster
	// waiting are the Clusters refused for capacity, in the order of their first refusal.
	waiting []backend.Ref
	// snapshots are the snapshots by Cluster UID, oldest first; they outlive Delete.
	snapshots map[types.UID][]backend.Snapshot
	calls     []Call
	// seq orders the clusters made.
	seq uint64
	// bound are the ProviderConfigs of ForProfile.
	bound []*providersv1alpha1.ProviderConfig
}

var (
	_ backend.Backend       = (*Fake)(nil)
	_ backend.Authenticator = (*Fake)(nil)
	_ backend.Backups       = (*Fake)(nil)
)

// New returns a Fake that runs no cluster yet.
func New(o Options) *Fake {
	if o.Name == "" {
		o.Name = "local"
	}
	if len(o.Versions) == 0 {
		o.Versions = []string{"1.37.1"}
	}
	return &Fake{
		name: o.Name, versions: slices.Clone(o.Versions), server: o.Server, max: o.MaxClusters, notify: o.Notify,
		clusters: map[types.UID]*Cluster{}, scripts: map[types.NamespacedName]*Cluster{},
		snapshots: map[types.UID][]backend.Snapshot{},
	}
}

// SetNotify sets the callback that a test's changes call (the harness sets the engine's).
func (f *Fake) SetNotify(n backend.Notify) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notify = n
}

// Name is Options.Name.
func (f *Fake) Name() string { return f.name }

// Versions are Options.Versions.
func (f *Fake) Versions() []string { return slices.Clone(f.versions) }

// ForProfile is the Fake itself: it reads nothing of a ProviderConfig. It records pc
// (ProviderConfigs), so that a test sees what the profile builder bound.
func (f *Fake) ForProfile(pc *providersv1alpha1.ProviderConfig) backend.Backend {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bound = append(f.bound, pc.DeepCopy())
	return f
}

// ProviderConfigs are the ProviderConfigs the Fake was bound to (ForProfile), oldest first.
func (f *Fake) ProviderConfigs() []*providersv1alpha1.ProviderConfig {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]*providersv1alpha1.ProviderConfig, len(f.bound))
	for i, pc := range f.bound {
		out[i] = pc.DeepCopy()
	}
	return out
}

// Ensure makes cl's cluster if it is not made (at the version backend.Resolve chooses, Ready
// unless scripted otherwise), moves or refuses a version change as the contract and the script
// say, and reports the cluster's state (State).
func (f *Fake) Ensure(_ context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(Call{Method: MethodEnsure, Cluster: keyOf(cl), UID: cl.UID, Want: want})
	c, made := f.clusters[cl.UID]
	if !made {
		return f.make(cl, want)
	}
	if c.EnsureError != nil {
		return backend.State{}, c.EnsureError
	}
	target, change, err := backend.Resolve(c.Runs, want)
	if err != nil {
		return backend.State{}, err
	}
	switch {
	case change == nil || change.Refused:
	case c.RefuseVersionChange != "":
		change = backend.Refuse(c.Runs, target, c.RefuseVersionChange)
	default:
		c.Runs = target
		if !c.HoldUpgrade {
			c.Version = target
		}
	}
	if change != nil && change.Refused {
		c.refused = change
	} else {
		c.refused = nil
	}
	c.finishRestore()
	return f.report(c), nil
}

// report is c's State; a warning is reported once, as a real backend does.
func (f *Fake) report(c *Cluster) backend.State {
	s := State(c, f.name, f.endpoint())
	c.Warnings = nil
	return s
}

// make makes the cluster of cl, from its script if a test wrote one.
func (f *Fake) make(cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	key := keyOf(cl)
	c := f.scripts[key]
	if c == nil {
		c = &Cluster{Ready: true}
	} else {
		c.ref = backend.RefOf(cl) // a change of the script notifies it
	}
	if c.EnsureError != nil {
		return backend.State{}, c.EnsureError
	}
	target, _, err := backend.Resolve("", want)
	if err != nil {
		return backend.State{}, err
	}
	if f.max > 0 && len(f.clusters) >= f.max {
		ref := backend.RefOf(cl)
		if !slices.Contains(f.waiting, ref) {
			f.waiting = append(f.waiting, ref)
		}
		return backend.State{}, &backend.Error{Reason: backend.ReasonCapacityExhausted, RetryAfter: time.Minute, Err: fmt.Errorf(
			"the fake %s backend runs %d clusters, its limit (Options.MaxClusters); this one starts by itself once one is deleted", f.name, f.max)}
	}
	delete(f.scripts, key)
	f.waiting = slices.DeleteFunc(f.waiting, func(r backend.Ref) bool { return r.NamespacedName == key })
	c.ref, c.UID, c.Runs = backend.RefOf(cl), cl.UID, target
	if c.Version == "" {
		c.Version = target
	}
	f.seq++
	c.seq = f.seq
	f.clusters[cl.UID] = c
	return f.report(c), nil
}

// Delete deletes cl's cluster: gone at once, unless scripted (DeleteError, DeletePending). Its
// snapshots stay.
func (f *Fake) Delete(_ context.Context, cl *clustersv1alpha1.Cluster) (bool, error) {
	f.mu.Lock()
	f.record(Call{Method: MethodDelete, Cluster: keyOf(cl), UID: cl.UID})
	c, ok := f.clusters[cl.UID]
	if !ok {
		delete(f.scripts, keyOf(cl))
		f.waiting = slices.DeleteFunc(f.waiting, func(r backend.Ref) bool { return r.NamespacedName == keyOf(cl) })
		f.mu.Unlock()
		return true, nil
	}
	if c.DeleteError != nil {
		f.mu.Unlock()
		return false, c.DeleteError
	}
	if c.DeletePending > 0 {
		c.DeletePending--
		f.mu.Unlock()
		return false, nil
	}
	delete(f.clusters, cl.UID)
	waiting := slices.Clone(f.waiting)
	notify := f.notify
	f.mu.Unlock()
	if notify != nil {
		for _, r := range waiting {
			notify(r)
		}
	}
	return true, nil
}

// AdminConfig is a copy of Options.Server for a cluster that is made.
func (f *Fake) AdminConfig(_ context.Context, cl *clustersv1alpha1.Cluster) (*rest.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(Call{Method: MethodAdminConfig, Cluster: keyOf(cl), UID: cl.UID})
	c, ok := f.clusters[cl.UID]
	switch {
	case !ok:
		return nil, fmt.Errorf("the fake %s backend runs no cluster for Cluster %s (UID %s)", f.name, keyOf(cl), cl.UID)
	case c.AdminConfigError != nil:
		return nil, c.AdminConfigError
	case f.server == nil:
		return nil, errors.New("the fake backend has no API server to hand out (backendtest.Options.Server)")
	}
	return rest.CopyConfig(f.server), nil
}

// SetJWTAuthenticators records jwt as what cl's cluster trusts; applied is true unless the
// script holds it (HoldJWT). No API server is configured: tests of real OIDC trust use a real
// backend.
func (f *Fake) SetJWTAuthenticators(_ context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(Call{Method: MethodSetJWTAuthenticators, Cluster: keyOf(cl), UID: cl.UID, JWT: slices.Clone(jwt)})
	c, ok := f.clusters[cl.UID]
	if !ok {
		return false, fmt.Errorf("the fake %s backend runs no cluster for Cluster %s", f.name, keyOf(cl))
	}
	c.JWT = slices.Clone(jwt)
	return !c.HoldJWT, nil
}

func (f *Fake) endpoint() endpoint {
	if f.server == nil {
		return endpoint{}
	}
	return endpoint{host: f.server.Host, ca: f.server.CAData}
}

func (f *Fake) record(c Call) { f.calls = append(f.calls, c) }

func keyOf(cl *clustersv1alpha1.Cluster) types.NamespacedName {
	return types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}
}
