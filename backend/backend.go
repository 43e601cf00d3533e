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
	// versions without a "v" (1.37.1).
	Versions() []string

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

// Binder is implemented by a Backend whose clusters depend on their ProviderConfig (kind: its
// node images; hosted: its images, seed, storage and exposure). The profile builder binds it once
// per ProviderConfig spec (Bound): every reconciler of the profile then works with that one view
// of the spec, and a spec change builds the profile, and so the view, anew. The bound Backend's
// Versions are those the ProviderConfig offers; the unbound one's are empty.
type Binder interface {
	// Bind returns the Backend bound to pc; it keeps its own copy of pc.
	Bind(pc *providersv1alpha1.ProviderConfig) Backend
}

// Bound is be bound to pc when it is a Binder, else be itself (nil stays nil).
func Bound(be Backend, pc *providersv1alpha1.ProviderConfig) Backend {
	if b, ok := be.(Binder); ok {
		return b.Bind(pc)
	}
	return be
}

// State is what a Backend observes of one cluster.
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
	// Restarts counts the restarts of the cluster's processes since it was adopted.
	Restarts int
	// ControllerManager is the state of the cluster's kube-controller-manager, for a Backend that
	// supervises it (local); nil where the Backend does not report it (kind: kubeadm runs it).
	// The cluster is complete only while it is Ready too.
	ControllerManager *Part
	// Etcd is the state of the cluster's etcd beyond answering (its NOSPACE alarm), for a Backend
	// that keeps it (local, hosted); nil where the Backend does not report it (or not yet).
	Etcd *Part
	// Exposure is whether the cluster's endpoint survives the loss of any one node of the host
	// that runs it (hosted: not while it is one node's address); nil where the Backend does not
	// report it. A warning, not an outage: the cluster stays Ready either way.
	Exposure *Part
	// Repaired, when not empty, says what of the cluster's state the backend found damaged and
	// made anew without loss (a garbled record rebuilt from the Cluster's status). It is reported
	// by one Ensure only: the reconciler turns it into a Warning Event.
	Repaired string
	// DataLost, when not empty, says that the cluster was created anew, empty, because its data
	// disappeared (a lost volume); it stays set for the cluster's life so nobody misses it.
	DataLost string
	// Restored is the last restore of the cluster from a snapshot (Backups), done or failed; nil
	// if it never was restored.
	Restored *Restored
	// RetryAfter, when not zero, is how soon Ensure should be called again even without a
	// notification: a safety net while the cluster is not Ready.
	RetryAfter time.Duration
}

// Part is what a Backend observes of one part of a cluster's control plane besides its API
// server.
type Part struct {
	// Ready is true while the part runs and does its work.
	Ready bool
	// Reason and Message say, in CamelCase and in a sentence, why it is not Ready (or that it is).
	Reason, Message string
}

// ReasonEtcdNoSpace: the cluster's etcd database reached its quota; it takes no writes (State.Etcd).
const ReasonEtcdNoSpace = "EtcdNoSpace"

// Reasons of State.Exposure: the endpoint is one node's address (SingleNodeEndpoint), or a
// host name the platform keeps reachable (ExternalHost), or a load balancer's (LoadBalancer).
const (
	ReasonSingleNodeEndpoint = "SingleNodeEndpoint"
	ReasonExternalHost       = "ExternalHost"
	ReasonLoadBalancer       = "LoadBalancer"
)

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
