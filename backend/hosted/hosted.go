package hosted

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/keymutex"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	apischeme "github.com/openmcp-local/cluster-provider/api/scheme"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/backend/controlplane"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
	"github.com/openmcp-local/cluster-provider/backend/objectstore"
)

// Name is the ProviderConfig spec.backend value of this backend.
const Name = "hosted"

// DefaultMaxRolling is Options.MaxRolling's default.
const DefaultMaxRolling = 2

// DefaultSecretRecheck is Options.SecretRecheck's default.
const DefaultSecretRecheck = 10 * time.Minute

// FieldOwner is the server-side apply field manager of what the backend applies.
const FieldOwner = "cluster-provider-hosted"

// Options configure a Backend.
type Options struct {
	// Platform is the platform cluster: the host of every ProviderConfig without a seed.
	// Required.
	Platform *rest.Config
	// Config returns the ProviderConfig of cl's profile, for a Backend used without ForProfile (tests);
	// the operator binds it to each profile's ProviderConfig instead. Optional.
	Config func(ctx context.Context, cl *clustersv1alpha1.Cluster) (*providersv1alpha1.ProviderConfig, error)
	// SeedConfig returns the rest.Config of a seed from its kubeconfig Secret. Required for
	// ProviderConfigs with spec.hosted.seed.
	SeedConfig func(ctx context.Context, seed providersv1alpha1.SeedRef) (*rest.Config, error)
	// InCluster: the operator runs in the platform cluster and reaches its Services (the API
	// servers' internal endpoints). Otherwise, and always for a seed, it uses the external ones.
	InCluster bool
	// OperatorPod is the operator's own pod in the platform cluster (with InCluster): Start reads
	// its labels once, and with spec.hosted.allowedSourceRanges the pods of its namespace that
	// carry them (but those that differ between replicas: operatorPods) are the only pods of the
	// platform the API servers take clients from. Empty (the default): none.
	OperatorPod types.NamespacedName
	// Namespace is the operator's own namespace in the platform cluster: Secret KeyWrappingSecret
	// there holds the key that wraps the encryption keys kept beside the snapshots. Without it, no
	// snapshot of a control plane with encryption keys is taken (BackupUnavailable), and no wrapped
	// copy is read.
	Namespace string
	// ServiceCIDR is the service range of new clusters. Default controlplane.DefaultServiceCIDR.
	ServiceCIDR string
	// Notify is told when a control plane's workloads change. Optional.
	Notify backend.Notify
	// Probe checks that the API server behind cfg serves. Default: GET /readyz.
	Probe func(ctx context.Context, cfg *rest.Config) error
	// Version reads the version the API server behind cfg reports. Default: GET /version.
	Version func(ctx context.Context, cfg *rest.Config) (string, error)
	// RewriteSecrets rewrites every Secret of the cluster behind cfg with the encryption key that
	// writes and returns how many it rewrote. Default: encryption.Rewrite.
	RewriteSecrets func(ctx context.Context, cfg *rest.Config) (int, error)
	// MaxRolling is how many existing control planes may roll at once (--hosted-max-rolling): a
	// change that reaches many (a new release's template, a ProviderConfig's resources) rolls them
	// a few at a time, never the whole fleet together. Creations do not count. Default 2.
	MaxRolling int
	// Certificates is the lifetime of the control planes' leaf certificates. Default: a year,
	// issued anew 30 days before their end (certs.LeafValidity, certs.RenewBefore).
	Certificates certs.Lifetime
	// SecretRecheck is how long a control plane's Secret (its CAs, certificates, keys), read or
	// written, is trusted before it is read again: Secrets are not watched (reads.go). Default
	// DefaultSecretRecheck; negative: read at every Ensure.
	SecretRecheck time.Duration
	// Clusters reads the platform's Clusters, to count those of a namespace and profile against
	// spec.hosted.maxClusters (quota.go); the operator passes the manager's cached client.
	// Default: a direct client of Platform.
	Clusters client.Reader
	// Logger. Default: discard.
	Logger logr.Logger
}

// Backend runs each Cluster's control plane as workloads in a host cluster.
type Backend struct {
	opts Options

	mu    sync.Mutex
	ctx   context.Context // set by Start; nil before
	hosts map[string]*host
	admin map[types.UID]*rest.Config
	// where is the seed each control plane was found on (nil: the platform).
	where map[types.UID]*providersv1alpha1.SeedRef
	// asleep are the control planes hibernated now (the gauge of backend.SetHibernated).
	asleep map[types.UID]bool
	// wanted are the hibernated control planes the operator needs awake (wakeFor); doors the
	// in-host address of each control plane's front door (AdminConfig goes through it).
	wanted map[types.UID]bool
	doors  map[types.UID]string
	// storeRecords caches the snapshot records read from object stores (a record never
	// changes): Snapshots lists the store at every reconcile, and reads only the new ones.
	storeRecords objectstore.Records
	// rolling are the control planes that hold a turn to roll (takeTurn).
	rolling map[types.UID]bool
	// places serializes, per namespace and profile, the decisions of spec.hosted.maxClusters and
	// the making of the control planes' namespaces they admit (admit).
	places keymutex.KeyMutex
	// waiting are the Clusters refused for their namespace's quota (admit), notified when a
	// place frees (freed).
	waiting map[types.UID]backend.Ref
	// operator are the operator's pods in the platform (operatorPods of Options.OperatorPod); nil:
	// none. Set by Start.
	operator *Pods
}

var (
	_ backend.Backend       = &Backend{}
	_ backend.Authenticator = &Backend{}
)

// New checks opts and returns a Backend; it serves once started (Start).
func New(opts Options) (*Backend, error) {
	switch {
	case opts.Platform == nil:
		return nil, errors.New("hosted backend: Options.Platform is nil")
	}
	if opts.ServiceCIDR == "" {
		opts.ServiceCIDR = controlplane.DefaultServiceCIDR
	}
	if err := controlplane.ValidServiceCIDR(opts.ServiceCIDR); err != nil {
		return nil, fmt.Errorf("hosted backend: service range: %w", err)
	}
	if opts.Probe == nil {
		opts.Probe = backend.ProbeReadyz
	}
	if opts.Version == nil {
		opts.Version = backend.ServerVersion
	}
	if opts.RewriteSecrets == nil {
		opts.RewriteSecrets = encryption.Rewrite
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	opts.Certificates = opts.Certificates.Or()
	if opts.SecretRecheck == 0 {
		opts.SecretRecheck = DefaultSecretRecheck
	}
	if opts.MaxRolling <= 0 {
		opts.MaxRolling = DefaultMaxRolling
	}
	if opts.Clusters == nil {
		c, err := client.New(opts.Platform, client.Options{Scheme: apischeme.New()})
		if err != nil {
			return nil, fmt.Errorf("hosted backend: a client of the platform's Clusters: %w", err)
		}
		opts.Clusters = c
	}
	return &Backend{opts: opts, hosts: map[string]*host{}, admin: map[types.UID]*rest.Config{}, where: map[types.UID]*providersv1alpha1.SeedRef{}, asleep: map[types.UID]bool{}, wanted: map[types.UID]bool{}, doors: map[types.UID]string{},
		rolling: map[types.UID]bool{}, places: keymutex.NewHashed(0), waiting: map[types.UID]backend.Ref{}}, nil
}

// Name returns "hosted".
func (b *Backend) Name() string { return Name }

// Versions is empty: the versions are those of each ProviderConfig's images (ForProfile).
func (b *Backend) Versions() []string { return nil }

// versionsFor returns the versions pc has control-plane images for, newest first.
func (b *Backend) versionsFor(pc *providersv1alpha1.ProviderConfig) []string {
	if pc.Spec.Hosted == nil {
		return nil
	}
	return backend.ImageVersions(pc.Spec.Hosted.Images)
}

// NeedLeaderElection: only the leader runs control planes.
func (b *Backend) NeedLeaderElection() bool { return true }

// Start starts the watches on the platform cluster and serves until ctx ends.
func (b *Backend) Start(ctx context.Context) error {
	h, err := b.newHost(ctx, "", b.opts.Platform, b.opts.InCluster)
	if err != nil {
		return fmt.Errorf("hosted backend: %w", err)
	}
	var operator *Pods
	if self := b.opts.OperatorPod; self.Name != "" {
		pod := &corev1.Pod{}
		if err := h.client.Get(ctx, self, pod); err != nil {
			h.cancel()
			return fmt.Errorf("hosted backend: reading the operator's own pod %s, whose labels admit it to API servers with allowedSourceRanges: %w", self, err)
		}
		op := operatorPods(pod)
		operator = &op
		b.opts.Logger.Info("API servers with allowedSourceRanges take clients from the operator's pods", "namespace", op.Namespace, "labels", op.Labels)
	}
	b.mu.Lock()
	b.ctx = ctx
	b.hosts[""] = h
	b.operator = operator
	b.mu.Unlock()
	<-ctx.Done()
	return nil
}

// Ensure applies what is missing of cl's control plane and reports what it observes. The version
// follows the contract of backend.Backend: the recorded one, or a change Resolve allows made by
// rolling the control plane's image (etcd first, on its claim); a change of a control plane whose
// etcd is on an emptyDir is refused (upgradeRefusal).
func (b *Backend) Ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	pc, err := b.config(ctx, cl)
	if err != nil {
		return backend.State{}, err
	}
	return b.ensure(ctx, cl, want, pc)
}

// config reads the ProviderConfig of cl's profile, for a Backend used without ForProfile.
func (b *Backend) config(ctx context.Context, cl *clustersv1alpha1.Cluster) (*providersv1alpha1.ProviderConfig, error) {
	if b.opts.Config == nil {
		return nil, fmt.Errorf("the hosted backend is used without a ProviderConfig for %s: bind it to its profile's (ForProfile)", backend.RefOf(cl))
	}
	return b.opts.Config(ctx, cl)
}

// Bound is the Backend bound to one ProviderConfig: the profile builder binds it once per spec,
// so every reconciler of the profile works with the same view of the spec, and nothing is read
// again on each call.
type Bound struct {
	*Backend
	pc *providersv1alpha1.ProviderConfig
}

var _ backend.Authenticator = &Bound{}

// ForProfile returns the Backend bound to pc.
func (b *Backend) ForProfile(pc *providersv1alpha1.ProviderConfig) backend.Backend {
	return &Bound{Backend: b, pc: pc.DeepCopy()}
}

// Versions are those pc has control-plane images for, newest first.
func (v *Bound) Versions() []string { return v.Backend.versionsFor(v.pc) }

// Ensure is Backend.Ensure with the bound ProviderConfig.
func (v *Bound) Ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	return v.Backend.ensure(ctx, cl, want, v.pc)
}
