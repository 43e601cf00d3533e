package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/types"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// ServiceAccountIssuer is the issuer (iss) of the service-account tokens of every backend's
// clusters (kubeadm's default, which kind keeps; the local backend sets it). No OIDC issuer of an
// AccessRequest may be it.
const ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"

// Backend runs the clusters behind Cluster resources. Every method is safe for concurrent use
// and returns quickly: none waits for a cluster to start.
//
// # The version contract
//
// Every Backend keeps it; a platform team relies on it for clusters that live for years.
//
//   - The version a cluster RUNS is recorded by its Backend when it makes the cluster, in what the
//     Backend owns (local: the cluster folder's record; kind: the cluster's state folder; hosted:
//     the control plane's record), and changes only when the Backend has moved the cluster.
//   - A Cluster without spec.kubernetes.version keeps the version it was made with: moving the
//     ProviderConfig's defaultVersion, deprecating a version or adding images never moves an
//     existing cluster (Resolve).
//   - spec.kubernetes.version changed to a later patch or to the next minor is an upgrade in
//     place that keeps data, endpoint, CA and every issued kubeconfig; etcd moves one release
//     line at a time (3.5 → 3.6 → 3.7, EtcdLine). An earlier patch of the same minor may be
//     allowed where the Backend can do it.
//   - A downgrade of the minor, a skipped minor, a version the profile does not offer, or a
//     change the Backend cannot make safely (kind cannot change a node's version; hosted etcd on
//     an emptyDir cannot be replaced without losing its data) is REFUSED: the cluster keeps
//     running and serving its version, and State.VersionChange says in one sentence what was
//     refused and what to do. The Cluster reconciler turns it into the VersionUpToDate
//     condition and a Warning Event.
//   - State.Runs, State.Version (and so the k8sversion label and the providerinfo annotation)
//     say the version the cluster runs, never the one asked for; a pending or refused change
//     shows only in State.VersionChange.
type Backend interface {
	// Name is the ProviderConfig spec.backend value this Backend serves, e.g. "local".
	Name() string

	// Versions are the Kubernetes versions this Backend can run, newest first, as semantic
	// versions without a "v" (1.37.1). A Backend whose versions come from its ProviderConfig
	// (kind: node images; hosted: control-plane images) has none until it is bound (ForProfile).
	Versions() []string

	// ForProfile returns the Backend bound to pc (not nil): every setting of pc it reads (images,
	// seed, storage, exposure, audit) is read from its own copy of pc, taken now. The profile
	// builder binds once per ProviderConfig spec, so every reconciler of a profile works with
	// one view of the spec, and a spec change builds the profile, and so the view, anew. The
	// bound Backend shares the unbound one's clusters: binding starts or copies nothing that runs.
	// The unbound Backend (tests, tools) behaves as if bound to a ProviderConfig with an empty
	// spec where it can (local), else reads its Options' callbacks (kind: NodeImage; hosted:
	// Config) or refuses to make clusters without them.
	ForProfile(pc *providersv1alpha1.ProviderConfig) Backend

	// Ensure starts what is missing of cl's cluster and returns what it observes. The version it
	// runs follows the version contract (above): want.Version for a cluster it makes, the
	// recorded version after that, and a change only as Resolve allows and the Backend can make
	// it. It is idempotent and does not block on a starting or upgrading cluster: the Backend
	// calls its Notify callback when the cluster's state changes. An error that carries a reason
	// (see Error) is a state the user must change (capacity, say); others are worth retrying.
	Ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want Want) (State, error)

	// Delete stops cl's cluster and deletes its data. gone reports that nothing of it is left;
	// until then call it again.
	Delete(ctx context.Context, cl *clustersv1alpha1.Cluster) (gone bool, err error)

	// AdminConfig returns a rest.Config with full rights in cl's cluster, for the provider's own
	// use (granting access). It must never be written to a status, Event, log or Secret.
	AdminConfig(ctx context.Context, cl *clustersv1alpha1.Cluster) (*rest.Config, error)
}

// Authenticator is implemented by a Backend whose clusters can be made to trust OIDC issuers
// (structured authentication configuration, apiserver.config.k8s.io/v1). The per-profile
// AccessRequest reconciler computes, for one cluster, every issuer its OIDC requests ask for and
// hands the whole set over; the Backend makes the cluster's API server use exactly that set.
type Authenticator interface {
	// SetJWTAuthenticators makes cl's API server trust exactly jwt, replacing what it trusted
	// before. The API server reloads its configuration on its own, and only once every issuer
	// in it answers discovery: applied reports whether it now runs with jwt. Call again until it
	// does; a call with the same jwt only checks.
	SetJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator) (applied bool, err error)
}

// State is what a Backend observes of one cluster. It holds nothing specific to one Backend: the
// API server's readiness, where it serves, the version it runs, and a list of Parts for the rest
// of the control plane; the Cluster reconciler maps each Part to a condition of its Type without
// knowing which Backend reported it.
type State struct {
	// Ready is true while the cluster's API server serves requests.
	Ready bool
	// Reason and Message say, in CamelCase and in a sentence, why it is not Ready (or that it is).
	Reason, Message string
	// Endpoint is the https URL of the cluster's API server for clients of the platform.
	Endpoint string
	// Endpoints are further named URLs (the name "apiserver-external" is Endpoint).
	Endpoints map[string]string
	// CABundle is the PEM bundle that verifies the API server's serving certificate.
	CABundle []byte
	// Version is the Kubernetes version the API server reports (/version, without "v"); empty
	// until it has answered once.
	Version string
	// Runs is the Kubernetes version the Backend recorded for the cluster: the one it was made
	// with, or the last one it was moved to (during an upgrade, the one it moves to).
	Runs string
	// VersionChange, when not nil, is a change of version the Cluster asks for that the cluster
	// does not run yet: in progress, or refused (the cluster keeps running Runs).
	VersionChange *VersionChange
	// Info is a short line for the Cluster's providerinfo annotation.
	Info string
	// ProviderStatus is backend-specific detail for status.providerStatus; it is marshalled to
	// JSON and must hold no secret.
	ProviderStatus any
	// Parts are what the Backend observes of the cluster besides its API server, one per Type
	// at most (SetPart). The Cluster reconciler sets a condition of each part's Type and removes
	// the conditions of the PartTypes the State does not report: a Backend reports a part only
	// where it observes it (kind: kubeadm runs the controller manager, so no
	// PartControllerManager).
	Parts []Part
	// Warnings are one-shot observations the Cluster reconciler turns into Warning Events (a
	// damaged record made anew: ReasonStateRepaired). A Backend reports each in one State.
	Warnings []Warning
	// Notices are one-shot observations the Cluster reconciler turns into Normal Events (a
	// hibernation, a wake). A Backend reports each in one State.
	Notices []Warning
	// HibernatedSince, when set, is when the cluster was hibernated (PartHibernated True): no
	// process of it runs, so nothing of its data changed since.
	HibernatedSince *time.Time
	// Restored is the last restore of the cluster from a snapshot (Backups), done or failed; nil
	// if it never was restored.
	Restored *Restored
	// RetryAfter, when not zero, is how soon Ensure should be called again even without a
	// notification: a safety net while the cluster is not Ready.
	RetryAfter time.Duration
}

// Part is what a Backend observes of one part of a cluster's control plane besides its API
// server. It becomes the Cluster condition of its Type.
type Part struct {
	// Type is the Cluster condition type the part becomes: one of PartTypes, or PartProvisioned.
	Type string
	// Ready is true while the part runs and does its work (the condition is True).
	Ready bool
	// Reason and Message say, in CamelCase and in a sentence, why it is not Ready (or that it is).
	Reason, Message string
}

// Part types: the Cluster condition types a Backend may report as Parts.
const (
	// PartControllerManager: the cluster's kube-controller-manager runs its controllers (for a
	// Backend that runs it apart: local, hosted). Without it the cluster is incomplete: aggregated
	// roles stay empty, namespaces never finish deleting. The Cluster is Ready only with it.
	PartControllerManager = "ControllerManagerReady"
	// PartEtcd: the cluster's etcd takes writes (for a Backend that watches it: local, hosted);
	// not Ready with reason EtcdNoSpace while its database is at its quota, EtcdQuorumLost while
	// fewer members than a quorum are ready, EtcdDegraded while a member is missing or not ready
	// but a quorum is left.
	PartEtcd = "EtcdHealthy"
	// PartEndpoint: the cluster's endpoint survives the loss of any one node of its host (for a
	// Backend that reports it: hosted); not Ready with reason SingleNodeEndpoint while it is one
	// node's address. Informational: it does not make the Cluster not Ready.
	PartEndpoint = "EndpointResilient"
	// PartProvisioned: the cluster exists. The Cluster reconciler sets this condition itself
	// (Ready, reason Provisioned); a Backend reports it only to say more: the cluster was made
	// anew, EMPTY, because its data was gone (Ready, reason ReasonDataLost), for the cluster's
	// life. It is not in PartTypes: the condition stays when no part reports it.
	PartProvisioned = "Provisioned"
)

// PartTypes are the part types whose conditions the Cluster reconciler removes when a State does
// not report them.
var PartTypes = []string{PartControllerManager, PartEtcd, PartEndpoint, PartCertificates, PartHibernated}

// Warning is a one-shot observation of a Backend, for a Warning Event of the Cluster (or a Normal
// one: State.Notices).
type Warning struct {
	// Reason is the Event's reason, CamelCase; Message says what happened and what, if anything,
	// to do.
	Reason, Message string
}

// SetPart records p in s, replacing the part of the same Type.
func (s *State) SetPart(p Part) {
	for i := range s.Parts {
		if s.Parts[i].Type == p.Type {
			s.Parts[i] = p
			return
		}
	}
	s.Parts = append(s.Parts, p)
}

// Part returns the part of type t that s reports, or nil. The pointer is into s.Parts.
func (s *State) Part(t string) *Part {
	for i := range s.Parts {
		if s.Parts[i].Type == t {
			return &s.Parts[i]
		}
	}
	return nil
}

// ReasonEtcdNoSpace: the cluster's etcd database reached its quota; it takes no writes (PartEtcd).
const ReasonEtcdNoSpace = "EtcdNoSpace"

// Reasons of a PartEtcd that is not Ready for a Backend that runs several members (hosted):
// ReasonEtcdDegraded, a member is missing or not in the quorum but a quorum is left (etcd takes
// writes; one more loss stops it: the Cluster stays Ready); ReasonEtcdQuorumLost, fewer members
// than a quorum are ready (etcd takes no writes).
const (
	ReasonEtcdDegraded   = "EtcdDegraded"
	ReasonEtcdQuorumLost = "EtcdQuorumLost"
)

// Reasons of PartEndpoint: the endpoint is one node's address (SingleNodeEndpoint), or a host
// name the platform keeps reachable (ExternalHost), or a load balancer's (LoadBalancer).
const (
	ReasonSingleNodeEndpoint = "SingleNodeEndpoint"
	ReasonExternalHost       = "ExternalHost"
	ReasonLoadBalancer       = "LoadBalancer"
)

// ReasonDataLost: the cluster was made anew, EMPTY, because its data was gone (a PartProvisioned
// part; the Cluster gets a Warning Event when its condition first says so).
const ReasonDataLost = "DataLost"

// ReasonStateRepaired: the Backend found part of the cluster's state damaged and made it anew
// without loss (a Warning).
const ReasonStateRepaired = "StateRepaired"

// EndpointAPIServerExternal is the name of the API server's endpoint in status.endpoints.
const EndpointAPIServerExternal = "apiserver-external"

// Ref names the Cluster resource a notification is about.
type Ref struct {
	types.NamespacedName
	// Profile is the Cluster's spec.profile: the engine routes by it.
	Profile string
}

// RefOf returns the Ref of cl.
func RefOf(cl *clustersv1alpha1.Cluster) Ref {
	return Ref{NamespacedName: types.NamespacedName{Namespace: cl.Namespace, Name: cl.Name}, Profile: cl.Spec.Profile}
}

// Notify is called by a Backend when the state of a cluster changed without a call to Ensure. It
// must not block.
type Notify func(Ref)

// Reasons a Backend gives in errors and States.
const (
	// ReasonCapacityExhausted: the backend runs as many clusters as it may.
	ReasonCapacityExhausted = "CapacityExhausted"
	// ReasonQuotaExceeded: the Cluster's namespace has as many clusters of its profile as the
	// ProviderConfig allows one namespace (hosted: spec.hosted.maxClusters). Unlike
	// CapacityExhausted, a limit of the tenant's share, not of the platform.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonVersionNotSupported: no binary or image runs the requested version.
	ReasonVersionNotSupported = "VersionNotSupported"
	// ReasonStarting: the cluster's processes start; it is not Ready yet.
	ReasonStarting = "Starting"
	// ReasonRestarting: a process of the cluster exited and is being restarted.
	ReasonRestarting = "Restarting"
	// ReasonRunning: the API server serves requests.
	ReasonRunning = "Running"
	// ReasonBackendStarting: the backend itself has not finished starting (adopting clusters).
	ReasonBackendStarting = "BackendStarting"
	// ReasonStateDamaged: a file of the cluster's state that cannot be made anew without loss
	// (its CA, its service-account key) is damaged; a person must restore it.
	ReasonStateDamaged = "StateDamaged"
	// ReasonStateDirFull: the backend cannot write the cluster's state: no space left.
	ReasonStateDirFull = "StateDirFull"
	// ReasonNamespaceTaken: the namespace the backend would make the cluster's control plane in
	// exists and was made by someone else; nothing is written into it.
	ReasonNamespaceTaken = "NamespaceTaken"
)

// Error is an error that names the condition reason it must be reported with. Its message says
// what to fix.
type Error struct {
	Reason string
	Err    error
	// RetryAfter, when not zero, is how soon to try again: the fix happens outside the platform's
	// API (a file restored, space freed), so no change of an object would trigger a reconcile.
	RetryAfter time.Duration
}

// Errorf returns an *Error with a formatted message.
func Errorf(reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *Error) Unwrap() error { return e.Err }

// ConditionReason returns the reason; controllers/kit.ReasonOf finds it by this method.
func (e *Error) ConditionReason() string { return e.Reason }

// RetryAfter returns err's RetryAfter if its chain holds an *Error, else zero.
func RetryAfter(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// IsReason reports whether err's chain holds an *Error with reason.
func IsReason(err error, reason string) bool {
	var e *Error
	return errors.As(err, &e) && e.Reason == reason
}

// ProbeReadyz checks that the API server behind cfg serves: GET /readyz answers 200 within 5 s.
func ProbeReadyz(ctx context.Context, cfg *rest.Config) error {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s", resp.Status)
	}
	return nil
}

// ServerVersion is the version the API server behind cfg reports (/version), without the "v".
func ServerVersion(ctx context.Context, cfg *rest.Config) (string, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+"/version", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/version: %s", resp.Status)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return "", fmt.Errorf("/version: %w", err)
	}
	return Normalize(v.GitVersion), nil
}
