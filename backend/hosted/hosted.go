package hosted

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/keymutex"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	apischeme "github.com/openmcp-local/cluster-provider/api/scheme"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/backend/controlplane"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// Name is the ProviderConfig spec.backend value of this backend.
const Name = "hosted"

// DefaultMaxRolling is Options.MaxRolling's default.
const DefaultMaxRolling = 2

// FieldOwner is the server-side apply field manager of what the backend applies.
const FieldOwner = "cluster-provider-hosted"

// authnKey is the key of the authentication configuration in its ConfigMap.
const authnKey = authconfig.FileName

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
	return &Backend{opts: opts, hosts: map[string]*host{}, admin: map[types.UID]*rest.Config{}, where: map[types.UID]*providersv1alpha1.SeedRef{},
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

// Delete is Backend.Delete with the bound ProviderConfig.
func (v *Bound) Delete(ctx context.Context, cl *clustersv1alpha1.Cluster) (bool, error) {
	return v.Backend.delete(ctx, cl, v.pc)
}

// AdminConfig is Backend.AdminConfig with the bound ProviderConfig.
func (v *Bound) AdminConfig(ctx context.Context, cl *clustersv1alpha1.Cluster) (*rest.Config, error) {
	return v.Backend.adminConfig(ctx, cl, v.pc)
}

// SetJWTAuthenticators is Backend.SetJWTAuthenticators with the bound ProviderConfig.
func (v *Bound) SetJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator) (bool, error) {
	return v.Backend.setJWTAuthenticators(ctx, cl, jwt, v.pc)
}

// ensure is Ensure with cl's ProviderConfig pc.
func (b *Backend) ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want, pc *providersv1alpha1.ProviderConfig) (backend.State, error) {
	settings := pc.Spec.Hosted
	if settings == nil {
		settings = &providersv1alpha1.HostedBackendConfig{}
	}
	h, ps, found, err := b.locate(ctx, cl, settings.Seed)
	if err != nil {
		return backend.State{}, err
	}
	if h == nil {
		return backend.State{Reason: backend.ReasonBackendStarting, Message: "the hosted backend is starting", RetryAfter: 2 * time.Second}, nil
	}
	release := func() {}
	if !found { // a control plane that exists is never refused: a lowered cap applies to new ones
		if release, err = b.admit(ctx, h, cl, settings, pc.Name); err != nil {
			return backend.State{}, err // refused: nothing made
		}
		defer release()
	}
	if !found || ps.Version == "" {
		// A new control plane: the ProviderConfig of now decides its seed and storage, for its life.
		ps = providerStatus{StorageClassName: settings.StorageClassName, HighAvailability: settings.HighAvailability}
		if settings.StorageSize != nil {
			ps.StorageSize = settings.StorageSize.String()
		}
		if settings.Seed != nil {
			ps.Seed, ps.SeedKey = settings.Seed.SecretName, settings.Seed.Key
		}
		if !found {
			if err := restoreFrom(ctx, h, cl, &ps); err != nil {
				return backend.State{}, err // refused: nothing made
			}
		}
	}
	version, change, err := backend.Resolve(ps.Version, want)
	if err != nil {
		return backend.State{}, err
	}
	if change != nil && !change.Refused {
		if change, err = b.upgradeRefusal(ctx, h, cl, change); err != nil {
			return backend.State{}, err
		}
		if change.Refused {
			version = change.From // the control plane stays as it runs
		}
	}
	upgradeFrom := ps.UpgradeFrom
	if change != nil && !change.Refused {
		upgradeFrom = change.From
		b.opts.Logger.Info("Upgrading a hosted control plane", "cluster", backend.RefOf(cl).String(), "from", change.From, "to", change.To)
	}
	if change == nil && found {
		if change, err = b.imageRefresh(ctx, h, cl, settings, pc.Name, &ps); err != nil {
			return backend.State{}, err
		}
	}
	s, err := b.spec(cl, pc, settings, version, ps)
	if err != nil {
		return backend.State{}, err
	}
	if err := b.hostSpec(ctx, h, s); err != nil {
		return backend.State{}, err
	}
	// From the ProviderConfig, as every setting of the control plane: Ensure is not the only caller
	// (adminConfig ensures with an empty Want), and what it applies must not depend on who calls.
	s.Audit = pc.Spec.Audit.On()
	ps = providerStatus{Backend: Name, Namespace: s.Namespace, Version: backend.Normalize(version), Image: s.Image,
		ServiceCIDR: s.ServiceCIDR, Exposure: string(s.exposure()), ExternalHost: ps.ExternalHost, UpgradeFrom: upgradeFrom,
		Seed: ps.Seed, SeedKey: ps.SeedKey, StorageClassName: s.StorageClassName, StorageSize: ps.StorageSize, ImageRefresh: ps.ImageRefresh,
		HighAvailability: s.HighAvailability, EtcdDataDir: ps.EtcdDataDir, EtcdRestoredFrom: ps.EtcdRestoredFrom, RestoredMark: ps.RestoredMark,
		Restore: ps.Restore, Restored: ps.Restored, Etcd: ps.Etcd}

	if err := h.apply(ctx, s.NamespaceObject()); err != nil {
		return backend.State{}, err
	}
	b.mu.Lock()
	b.where[cl.UID] = ps.seedRef()
	b.mu.Unlock()
	release() // the namespace made, the control plane counts for the others (hasControlPlane)
	if err := h.createIfMissing(ctx, b.authnConfigMap(s)); err != nil {
		return backend.State{}, err
	}
	if s.HighAvailability {
		if err := h.ensurePriorityClass(ctx, b.opts.Logger); err != nil {
			return backend.State{}, err
		}
	}
	for _, obj := range s.Objects() {
		if err := h.apply(ctx, obj); err != nil {
			return backend.State{}, err
		}
	}
	external, waiting, err := b.external(ctx, h, s, settings, &ps)
	if err != nil {
		return backend.State{}, err
	}
	// Recorded before the workloads are made from it; the external host, once known, is kept.
	if err := writeRecord(ctx, h, s, ps); err != nil {
		return backend.State{}, err
	}
	// Every reconcile: a certificate due for renewal, or a deleted leaf Secret, is made anew now.
	p, err := ensurePKI(ctx, h.client, s, ServingHosts(s.Namespace, s.ServiceCIDR, []string{ps.ExternalHost}), b.opts.Certificates)
	if err != nil {
		return backend.State{}, err
	}
	backend.RecordCertificates(backend.RefOf(cl), p.NotAfter)
	s.Certificates = p.Checksum
	// The keys first: a restore adopts the snapshot's before its serve reads the snapshot, so a
	// snapshot removed meanwhile (its keys go only after its file) fails the serve instead.
	keys, err := b.encryptionKeys(ctx, h, cl, s, ps)
	if err != nil {
		return backend.State{}, err
	}
	// A restore under way goes on by a step where it can (restore.go); the workloads follow.
	restoring, err := b.advanceRestore(ctx, h, cl, s, &ps)
	if err != nil {
		return backend.State{}, err
	}
	s.restoreSpec(ps)
	if err := writeRecord(ctx, h, s, ps); err != nil {
		return backend.State{}, err
	}
	ps.Encryption = keys.Status("")
	cfg := adminConfig(h, s.Namespace, external, p)
	b.mu.Lock()
	b.admin[cl.UID] = cfg
	b.mu.Unlock()
	// A restore rolls at once: it is not one of a fleet's changes.
	turn := func() bool { return ps.Restore != nil || b.takeTurn(cl.UID) }
	etcdOut, err := h.applyWorkload(ctx, s.EtcdStatefulSet(), turn)
	if err != nil {
		return backend.State{}, err
	}
	apiOut := workloadKept
	// The API server starts once etcd serves: started before, it gives up on etcd after 20 s and
	// the kubelet's crash-loop backoff (up to 5 minutes) would delay it long after etcd is up.
	// Once made, its Deployment stays whatever etcd does.
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, &appsv1.Deployment{}); err == nil || etcdReady(ctx, h, s) {
		if apiOut, err = h.applyWorkload(ctx, s.APIServerDeployment(), turn); err != nil {
			return backend.State{}, err
		}
	} else if !apierrors.IsNotFound(err) {
		return backend.State{}, err
	}
	st, err := b.observe(ctx, h, cl, s, ps, external, waiting)
	if err != nil {
		return st, err
	}
	if restoring == "" {
		wait, err := b.maintainEtcd(ctx, h, cl, s, &ps, st.Ready)
		if err != nil {
			return st, err
		}
		if wait > 0 {
			st.RetryAfter = min(nonZero(st.RetryAfter, wait), wait)
		}
		if st.Ready {
			if keys, err = b.rewriteSecrets(ctx, h, cl, s, keys, cfg); err != nil {
				b.opts.Logger.Error(err, "Encryption at rest: tried again soon", "cluster", backend.RefOf(cl).String())
				ps.Encryption = keys.Status(err.Error())
				st.RetryAfter = min(nonZero(st.RetryAfter, encryptionRetry), encryptionRetry)
			} else {
				ps.Encryption = keys.Status("")
			}
		}
		st.ProviderStatus = ps
	}
	if etcd := ps.Etcd.part(); etcd != nil {
		etcd.Type = backend.PartEtcd
		st.SetPart(*etcd)
	}
	endpoint := exposure(s, settings, ps.ExternalHost, pc.Name)
	endpoint.Type = backend.PartEndpoint
	st.SetPart(*endpoint)
	if etcd := st.Part(backend.PartEtcd); etcd != nil && !etcd.Ready && !st.Ready {
		// etcd's readiness check fails on its alarm: what keeps the cluster from Ready is that.
		st.Reason, st.Message = backend.ReasonEtcdNoSpace, etcd.Message
	}
	waitsTurn := etcdOut == workloadWaits || apiOut == workloadWaits
	if !waitsTurn && etcdOut == workloadKept && apiOut == workloadKept && rolledOutAll(ctx, h, s) {
		b.endTurn(cl.UID)
	}
	if waitsTurn {
		st.RetryAfter = min(nonZero(st.RetryAfter, time.Hour), rollRetry)
	}
	st.Runs = ps.Version
	st.Restored = ps.Restored
	if restoring != "" {
		st.Ready, st.Reason, st.Message = false, backend.ReasonRestoring, restoring
		st.SetPart(backend.Part{Type: backend.PartControllerManager, Reason: backend.ReasonRestoring, Message: restoring})
		st.RetryAfter = min(nonZero(st.RetryAfter, time.Hour), 3*time.Second)
	}
	if renew := max(time.Until(p.RenewAt), time.Second); st.RetryAfter == 0 || renew < st.RetryAfter {
		st.RetryAfter = renew // back in time to renew the first certificate due
	}
	switch {
	case change != nil && change.Refused:
		st.VersionChange = change
	case ps.UpgradeFrom != "" && st.Ready && backend.SameVersion(st.Version, ps.Version) && !oldAPIServers(ctx, h, s):
		ps.UpgradeFrom = "" // done: the rolled API server serves the new version, and no old one does
		st.ProviderStatus = ps
		if err := writeRecord(ctx, h, s, ps); err != nil {
			return backend.State{}, err
		}
	case ps.UpgradeFrom != "":
		st.Runs = ps.UpgradeFrom
		st.VersionChange = &backend.VersionChange{From: ps.UpgradeFrom, To: ps.Version, Message: fmt.Sprintf(
			"Upgrading from Kubernetes %s to %s: etcd rolls first on its claim, then the API server and the controller manager.", ps.UpgradeFrom, ps.Version)}
		if waitsTurn {
			st.VersionChange.Message = fmt.Sprintf("Upgrading from Kubernetes %s to %s: waiting for its turn, %d control planes roll at once (--hosted-max-rolling).",
				ps.UpgradeFrom, ps.Version, b.opts.MaxRolling)
		}
		st.RetryAfter = min(nonZero(st.RetryAfter, time.Hour), 5*time.Second) // a safety net besides the pods' watch
	}
	return st, nil
}

// oldAPIServers reports whether an API server pod of s is still terminating: it serves its
// shutdown delay (and its version) after the rollout has counted it out.
func oldAPIServers(ctx context.Context, h *host, s *Spec) bool {
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels{LabelComponent: ComponentAPIServer}); err != nil {
		return true
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			return true
		}
	}
	return false
}

// rollRetry is how soon a control plane waiting for its turn to roll is looked at again.
const rollRetry = 10 * time.Second

func nonZero(d, or time.Duration) time.Duration {
	if d == 0 {
		return or
	}
	return d
}

// takeTurn reports whether the control plane of uid may roll now: it rolls already, or fewer than
// MaxRolling do. A turn is held until its workloads are rolled out (endTurn).
func (b *Backend) takeTurn(uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rolling[uid] {
		return true
	}
	if len(b.rolling) >= b.opts.MaxRolling {
		return false
	}
	b.rolling[uid] = true
	return true
}

// endTurn gives back the turn of uid, if it holds one.
func (b *Backend) endTurn(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.rolling, uid)
}

// rolledOutAll reports whether etcd's StatefulSet and the API server's Deployment of s run their
// current templates, ready.
func rolledOutAll(ctx context.Context, h *host, s *Spec) bool {
	sts, dep := &appsv1.StatefulSet{}, &appsv1.Deployment{}
	if h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts) != nil ||
		h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep) != nil {
		return false
	}
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	stsDone := sts.Status.ObservedGeneration >= sts.Generation && sts.Status.ReadyReplicas >= want &&
		(sts.Status.UpdateRevision == "" || sts.Status.UpdateRevision == sts.Status.CurrentRevision)
	return stsDone && rolledOut(dep)
}

// AnnotationImageRefresh on a Cluster rolls its control plane to the image the ProviderConfig
// names now for the version it runs: the one deliberate way to bring a patched image of the SAME
// version to an existing Cluster (images otherwise stay as recorded at creation). Each new value
// refreshes once; the value refreshed is recorded.
const AnnotationImageRefresh = backend.AnnotationImageRefresh

// imageRefresh records the ProviderConfig's image of the running version in ps when cl asks for a
// refresh it has not had (AnnotationImageRefresh). A control plane whose etcd is on an emptyDir
// refuses: a new etcd pod would start empty; the refusal is returned as a refused change.
func (b *Backend) imageRefresh(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, settings *providersv1alpha1.HostedBackendConfig, pcName string, ps *providerStatus) (*backend.VersionChange, error) {
	want := cl.Annotations[AnnotationImageRefresh]
	if want == "" || want == ps.ImageRefresh {
		return nil, nil
	}
	image, err := imageFor(settings, ps.Version, pcName)
	if err != nil {
		return nil, err
	}
	if image == ps.Image {
		ps.ImageRefresh = want // nothing to roll
		return nil, nil
	}
	if refused, err := b.upgradeRefusal(ctx, h, cl, &backend.VersionChange{From: ps.Version, To: ps.Version}); err != nil || refused.Refused {
		if err != nil {
			return nil, err
		}
		return backend.Refuse(ps.Version, ps.Version, fmt.Sprintf(
			"the image refresh %q (to %s) is refused: this control plane's etcd keeps its data on an emptyDir, which a new etcd pod would start without; the cluster keeps running %s. Remove the annotation %s, or create a new Cluster",
			want, image, ps.Image, AnnotationImageRefresh)), nil
	}
	b.opts.Logger.Info("Rolling a hosted control plane to a new image of its version", "cluster", backend.RefOf(cl).String(), "from", ps.Image, "to", image)
	ps.Image, ps.ImageRefresh = image, want
	return nil, nil
}

// upgradeRefusal returns change refused when this control plane cannot make it without losing
// data (its etcd keeps its data on an emptyDir, which a new etcd pod does not have), else change.
func (b *Backend) upgradeRefusal(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, change *backend.VersionChange) (*backend.VersionChange, error) {
	sts := &appsv1.StatefulSet{}
	err := h.cache.Get(ctx, client.ObjectKey{Namespace: NamespaceFor(cl.UID), Name: NameEtcd}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return change, nil // nothing runs yet: nothing to lose
	case err != nil:
		return nil, fmt.Errorf("reading etcd's StatefulSet to check an upgrade: %w", err)
	case len(sts.Spec.VolumeClaimTemplates) == 0:
		return backend.Refuse(change.From, change.To, fmt.Sprintf(
			"upgrade from %s to %s is refused: this control plane's etcd keeps its data on an emptyDir, which a new etcd pod would start without; "+
				"the cluster keeps running %s. Create a new Cluster with spec.kubernetes.version %s (give the ProviderConfig spec.hosted.storageClassName so that new control planes keep etcd on a claim), or set spec.kubernetes.version back to %s",
			change.From, change.To, change.From, change.To, change.From)), nil
	}
	return change, nil
}

// spec builds the Spec of cl's control plane: the image, service range and exposure it was
// created with (its status) or, for a new one, those of now.
func (b *Backend) spec(cl *clustersv1alpha1.Cluster, pc *providersv1alpha1.ProviderConfig,
	settings *providersv1alpha1.HostedBackendConfig, version string, ps providerStatus) (*Spec, error) {
	s := &Spec{
		Namespace: NamespaceFor(cl.UID),
		Cluster:   ClusterRef{Namespace: cl.Namespace, Name: cl.Name, Profile: cl.Spec.Profile, UID: cl.UID},
		Image:     ps.Image, ServiceCIDR: ps.ServiceCIDR,
		StorageClassName: ps.StorageClassName,
		HighAvailability: ps.HighAvailability,
		Exposure:         settings.Exposure,
		APIServer:        DefaultAPIServer, ControllerManager: DefaultControllerManager, Etcd: DefaultEtcd,
	}
	if s.HighAvailability {
		if s.StorageClassName == "" {
			return nil, backend.Errorf(backend.ReasonStateDamaged,
				"the control plane in namespace %s is recorded highly available without a storage class: an etcd member cannot keep its data on an emptyDir; delete the Cluster and create it again with spec.hosted.storageClassName set",
				s.Namespace)
		}
		// Memory requested as much as its limit: the host never overcommits a highly available
		// control plane's memory, and evicts it under memory pressure only after pods that use
		// more than they requested. CPU is requested, not limited (no throttling).
		for _, r := range []*corev1.ResourceRequirements{&s.APIServer, &s.ControllerManager, &s.Etcd} {
			*r = memoryAsLimited(*r)
		}
	}
	if ps.Exposure != "" {
		s.Exposure = corev1.ServiceType(ps.Exposure)
	}
	s.Exposure = s.exposure() // the same inputs whether defaulted or recorded
	if ps.StorageSize != "" {
		q, err := resource.ParseQuantity(ps.StorageSize)
		if err != nil {
			return nil, fmt.Errorf("the record of namespace %s: storage size %q: %w", s.Namespace, ps.StorageSize, err)
		}
		s.StorageSize = q
	}
	if r := settings.Resources; r != nil {
		for _, x := range []struct {
			from *corev1.ResourceRequirements
			to   *corev1.ResourceRequirements
		}{{r.APIServer, &s.APIServer}, {r.ControllerManager, &s.ControllerManager}, {r.Etcd, &s.Etcd}} {
			if x.from != nil {
				*x.to = *x.from.DeepCopy()
			}
		}
	}
	s.AllowedSourceRanges = settings.AllowedSourceRanges // a live setting: not recorded
	if pc.Spec.OIDC != nil {
		s.IssuerPorts = IssuerPorts(pc.Spec.OIDC.AllowedIssuers)
		s.PrivateIssuers = pc.Spec.OIDC.AllowPrivateIssuers
	}
	if s.ServiceCIDR == "" {
		s.ServiceCIDR = b.opts.ServiceCIDR
	}
	if s.Image == "" || !backend.SameVersion(ps.Version, version) {
		image, err := imageFor(settings, version, pc.Name)
		if err != nil {
			return nil, err
		}
		s.Image = image
	}
	s.restoreSpec(ps)
	return s, nil
}

// hostSpec sets what s takes from its host h rather than from the ProviderConfig: the host's API
// endpoints, read anew at every reconcile so that a change of them reaches the NetworkPolicy, and
// the operator's pods when the operator runs in h.
func (b *Backend) hostSpec(ctx context.Context, h *host, s *Spec) error {
	endpoints, err := h.apiEndpoints(ctx)
	if err != nil {
		return err
	}
	s.HostAPIEndpoints = endpoints
	if h.internal {
		b.mu.Lock()
		s.OperatorPods = b.operator
		b.mu.Unlock()
	}
	return nil
}

// memoryAsLimited returns r with its memory request raised to its memory limit, if it has one.
func memoryAsLimited(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	r = *r.DeepCopy()
	if limit, ok := r.Limits[corev1.ResourceMemory]; ok {
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Requests[corev1.ResourceMemory] = limit
	}
	return r
}

// imageFor is the control-plane image of version in the ProviderConfig pcName's settings.
func imageFor(settings *providersv1alpha1.HostedBackendConfig, version, pcName string) (string, error) {
	if image, ok := backend.ImageFor(settings.Images, version); ok {
		return image, nil
	}
	return "", backend.Errorf(backend.ReasonVersionNotSupported,
		"ProviderConfig %s has no control-plane image for Kubernetes %s in spec.hosted.images; add one (make controlplane-image builds cluster-provider/controlplane:v%s)",
		pcName, version, backend.Normalize(version))
}

// external finds the API server's external host and port. ps.ExternalHost is kept once set;
// waiting says why there is none yet (a load balancer without an address).
func (b *Backend) external(ctx context.Context, h *host, s *Spec, settings *providersv1alpha1.HostedBackendConfig, ps *providerStatus) (string, string, error) {
	svc := &corev1.Service{}
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameExternal}, svc); err != nil {
		return "", "", fmt.Errorf("reading Service %s/%s: %w", s.Namespace, NameExternal, err)
	}
	if s.exposure() == corev1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a := in.IP + in.Hostname; a != "" {
				ps.ExternalHost = a
				return externalURL(a, PortService), "", nil
			}
		}
		return "", fmt.Sprintf("Service %s/%s (LoadBalancer) has no address yet", s.Namespace, NameExternal), nil
	}
	var port int32
	for _, p := range svc.Spec.Ports {
		port = p.NodePort
	}
	if port == 0 {
		return "", fmt.Sprintf("Service %s/%s has no node port yet", s.Namespace, NameExternal), nil
	}
	if settings.ExternalHost != "" {
		ps.ExternalHost = settings.ExternalHost
	}
	if ps.ExternalHost == "" {
		host, err := firstNodeAddress(ctx, h.client)
		if err != nil {
			return "", "", err
		}
		ps.ExternalHost = host
	}
	return externalURL(ps.ExternalHost, port), "", nil
}

// exposure says whether the endpoint of s survives the loss of one node: not while it is the
// address of the host's first node, which a NodePort control plane without externalHost gets.
func exposure(s *Spec, settings *providersv1alpha1.HostedBackendConfig, host, pcName string) *backend.Part {
	switch {
	case s.exposure() == corev1.ServiceTypeLoadBalancer:
		return &backend.Part{Ready: true, Reason: backend.ReasonLoadBalancer, Message: "The endpoint is the load balancer of Service " + s.Namespace + "/" + NameExternal + "."}
	case settings.ExternalHost != "":
		return &backend.Part{Ready: true, Reason: backend.ReasonExternalHost, Message: fmt.Sprintf(
			"The endpoint is spec.hosted.externalHost %s of ProviderConfig %s, which the platform keeps reaching a node.", settings.ExternalHost, pcName)}
	}
	return &backend.Part{Reason: backend.ReasonSingleNodeEndpoint, Message: fmt.Sprintf(
		"The endpoint %s is one node's address (spec.hosted.externalHost of ProviderConfig %s is not set): while that node is down, clients cannot reach this API server. Set spec.hosted.externalHost to a load balancer or DNS name in front of the nodes, or use exposure LoadBalancer.",
		host, pcName)}
}

// firstNodeAddress is the InternalIP of the host cluster's first node by name.
func firstNodeAddress(ctx context.Context, c client.Client) (string, error) {
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return "", fmt.Errorf("listing the host cluster's nodes for the clusters' external address (or set spec.hosted.externalHost): %w", err)
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return a.Address, nil
			}
		}
	}
	return "", errors.New("no node of the host cluster has an InternalIP: set spec.hosted.externalHost")
}

// authnConfigMap is the authentication configuration the API server starts with: no issuer.
func (b *Backend) authnConfigMap(s *Spec) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: s.meta(NameAuthn, ComponentAPIServer),
		Data: map[string]string{authnKey: authconfig.Empty}}
}

// adminConfig is the operator's rest.Config for a control plane: the internal endpoint when the
// operator runs in the host cluster, else the external one.
func adminConfig(h *host, namespace, external string, p *pki) *rest.Config {
	cfg := &rest.Config{Host: external, TLSClientConfig: rest.TLSClientConfig{CAData: p.ca.CertPEM, CertData: p.AdminCert, KeyData: p.AdminKey},
		QPS: -1, Timeout: 30 * time.Second}
	if h.internal {
		cfg.Host = internalURL(namespace)
	}
	return cfg
}

// observe reports the state of the workloads and probes the API server.
func (b *Backend) observe(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, s *Spec, ps providerStatus, external, waiting string) (backend.State, error) {
	st := backend.State{
		Endpoint: external, Endpoints: map[string]string{clustersv1alpha1.APIServerEndpointInternal: internalURL(s.Namespace)},
		Info: fmt.Sprintf("hosted in namespace %s", s.Namespace), ProviderStatus: ps, Reason: backend.ReasonStarting,
		RetryAfter: 10 * time.Second,
	}
	if external != "" {
		st.Endpoints[backend.EndpointAPIServerExternal] = external
	}
	if ps.Seed != "" {
		st.Info += " of seed " + ps.Seed
	}
	b.mu.Lock()
	cfg := b.admin[cl.UID]
	b.mu.Unlock()
	if cfg != nil {
		st.CABundle = cfg.CAData
	}
	st.SetPart(backend.Part{Type: backend.PartControllerManager, Reason: backend.ReasonStarting, Message: "kube-controller-manager has not started yet"})
	kcm := st.Part(backend.PartControllerManager)

	sts := &appsv1.StatefulSet{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts); err != nil {
		st.Message = fmt.Sprintf("etcd (StatefulSet %s/%s) is being made", s.Namespace, NameEtcd)
		return st, client.IgnoreNotFound(err)
	}
	dep := &appsv1.Deployment{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep); client.IgnoreNotFound(err) != nil {
		return st, err
	}
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods, client.InNamespace(s.Namespace)); err != nil {
		return st, err
	}
	members := s.replicas(ComponentEtcd)
	switch {
	case sts.Status.ObservedGeneration < sts.Generation || sts.Status.ReadyReplicas < members/2+1:
		st.Message = fmt.Sprintf("etcd (StatefulSet %s/%s) is not ready%s", s.Namespace, NameEtcd, podProblem(pods.Items, ComponentEtcd))
		if members > 1 {
			st.Message = fmt.Sprintf("etcd (StatefulSet %s/%s) has no quorum: %d of %d members ready%s", s.Namespace, NameEtcd,
				sts.Status.ReadyReplicas, members, podProblem(pods.Items, ComponentEtcd))
		}
		return st, nil
	case !serves(dep):
		st.Message = fmt.Sprintf("the API server (Deployment %s/%s) is not rolled out%s", s.Namespace, NameAPIServer, podProblem(pods.Items, ComponentAPIServer))
		return st, nil
	case waiting != "":
		st.Message = waiting
		return st, nil
	}
	if kcmReady(pods.Items) {
		kcm.Ready, kcm.Reason, kcm.Message = true, backend.ReasonRunning, "kube-controller-manager runs"
	}
	if cfg == nil {
		st.Message = "the operator has no credentials for the API server yet"
		return st, nil
	}
	if err := b.opts.Probe(ctx, cfg); err != nil {
		st.Message = fmt.Sprintf("the API server does not answer the operator on %s: %v", cfg.Host, err)
		st.RetryAfter = 5 * time.Second
		return st, nil
	}
	st.Ready, st.Reason, st.RetryAfter = true, backend.ReasonRunning, 0
	st.Message = fmt.Sprintf("the control plane in namespace %s serves on %s", s.Namespace, external)
	if apis := s.replicas(ComponentAPIServer); sts.Status.ReadyReplicas < members || dep.Status.AvailableReplicas < apis {
		// Serving, but one more loss away from an outage: say so (a drained node, a pod starting).
		st.Message += fmt.Sprintf(", degraded: %d of %d etcd members and %d of %d API servers ready%s", sts.Status.ReadyReplicas, members,
			dep.Status.AvailableReplicas, apis, podProblem(pods.Items, ComponentEtcd)+podProblem(pods.Items, ComponentAPIServer))
		st.RetryAfter = 30 * time.Second
	}
	if v, err := b.opts.Version(ctx, cfg); err == nil {
		st.Version = v
	}
	return st, nil
}

// etcdReady reports whether etcd's StatefulSet has a ready replica.
func etcdReady(ctx context.Context, h *host, s *Spec) bool {
	sts := &appsv1.StatefulSet{}
	return h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts) == nil && sts.Status.ReadyReplicas > 0
}

// rolledOut reports whether every replica of dep runs its current template and one is available.
func rolledOut(dep *appsv1.Deployment) bool {
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	return dep.Status.ObservedGeneration >= dep.Generation && dep.Status.UpdatedReplicas >= want &&
		dep.Status.AvailableReplicas >= want && dep.Status.Replicas == dep.Status.UpdatedReplicas
}

// serves reports whether dep runs its current template only, with an API server available: a
// highly available control plane that lost one serves while its replacement starts.
func serves(dep *appsv1.Deployment) bool {
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	return dep.Status.ObservedGeneration >= dep.Generation && dep.Status.UpdatedReplicas >= want &&
		dep.Status.AvailableReplicas >= 1 && dep.Status.Replicas == dep.Status.UpdatedReplicas
}

// kcmReady reports whether a kube-controller-manager container runs and has passed its startup probe.
func kcmReady(pods []corev1.Pod) bool {
	for _, p := range pods {
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == containerKCM && c.Ready && p.DeletionTimestamp == nil {
				return true
			}
		}
	}
	return false
}

// podProblem says why a component's pods do not run, from their conditions and container states.
func podProblem(pods []corev1.Pod, component string) string {
	for _, p := range pods {
		if p.Labels[LabelComponent] != component {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return fmt.Sprintf(": pod %s is not scheduled: %s", p.Name, c.Message)
			}
		}
		for _, c := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if w := c.State.Waiting; w != nil && w.Reason != "" {
				return fmt.Sprintf(": container %s of pod %s waits: %s", c.Name, p.Name, w.Reason)
			}
			if c.LastTerminationState.Terminated != nil && !c.Ready {
				return fmt.Sprintf(": container %s of pod %s restarted %d times (last exit %d)", c.Name, p.Name, c.RestartCount, c.LastTerminationState.Terminated.ExitCode)
			}
		}
		if p.Status.Phase == corev1.PodPending {
			return fmt.Sprintf(": pod %s is Pending", p.Name)
		}
	}
	return ""
}

// Delete deletes cl's namespace in its host cluster; it is gone when the namespace is.
func (b *Backend) Delete(ctx context.Context, cl *clustersv1alpha1.Cluster) (bool, error) {
	pc, err := b.config(ctx, cl)
	if err != nil {
		pc = &providersv1alpha1.ProviderConfig{} // gone: look on the status's seed and the platform
	}
	return b.delete(ctx, cl, pc)
}

// delete is Delete with cl's ProviderConfig pc.
func (b *Backend) delete(ctx context.Context, cl *clustersv1alpha1.Cluster, pc *providersv1alpha1.ProviderConfig) (bool, error) {
	var seed *providersv1alpha1.SeedRef
	if pc.Spec.Hosted != nil {
		seed = pc.Spec.Hosted.Seed
	}
	h, _, found, err := b.locate(ctx, cl, seed)
	if err != nil || h == nil {
		return false, err
	}
	name := NamespaceFor(cl.UID)
	if !found {
		return b.gone(ctx, h, cl)
	}
	ns := &corev1.Namespace{}
	if err := h.client.Get(ctx, client.ObjectKey{Name: name}, ns); apierrors.IsNotFound(err) {
		return b.gone(ctx, h, cl)
	} else if err != nil {
		return false, err
	}
	if ns.DeletionTimestamp == nil {
		b.opts.Logger.Info("Deleting a hosted control plane", "cluster", backend.RefOf(cl).String(), "namespace", name)
		if err := h.client.Delete(ctx, ns, client.PropagationPolicy(metav1.DeletePropagationForeground)); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting namespace %s: %w", name, err)
		}
	}
	return false, nil
}

// gone finishes the deletion of cl, whose namespace on h is gone: its snapshots stay (they
// outlive the Cluster), and the encryption keys beside them that they need (those none needs
// go, and the copy with the last snapshot); its snapshot, maintenance and serve Jobs and their
// Secrets (their certificates, the serve's token) go, and so does the long-lived etcd client
// certificate of an earlier version.
func (b *Backend) gone(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster) (bool, error) {
	names := namesFor(NamespaceFor(cl.UID))
	serve := serveName(NamespaceFor(cl.UID))
	for _, obj := range []client.Object{
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.maintain}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.job}},
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: serve}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.maintain}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.job}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: serve}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: names.shared}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: serve}},
	} {
		if err := h.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("deleting %T %s/%s: %w", obj, BackupNamespace, obj.GetName(), err)
		}
	}
	if removed, err := b.settleGoneKeys(ctx, h, cl); err != nil {
		b.opts.Logger.Error(err, "Removing the encryption keys no snapshot of a deleted Cluster needs failed; they stay beside the snapshots", "cluster", backend.RefOf(cl).String())
	} else if len(removed) > 0 {
		b.opts.Logger.Info("Removed encryption keys no snapshot of a deleted Cluster needs", "cluster", backend.RefOf(cl).String(), "keys", removed)
	}
	h.owned.Delete(NamespaceFor(cl.UID))
	b.forget(cl)
	b.freed(cl)
	return true, nil
}

func (b *Backend) forget(cl *clustersv1alpha1.Cluster) {
	b.mu.Lock()
	delete(b.admin, cl.UID)
	delete(b.where, cl.UID)
	delete(b.rolling, cl.UID)
	delete(b.waiting, cl.UID)
	b.mu.Unlock()
	backend.ForgetCertificates(backend.RefOf(cl))
}

// AdminConfig returns the operator's rest.Config for cl's API server.
func (b *Backend) AdminConfig(ctx context.Context, cl *clustersv1alpha1.Cluster) (*rest.Config, error) {
	pc, err := b.config(ctx, cl)
	if err != nil {
		return nil, err
	}
	return b.adminConfig(ctx, cl, pc)
}

// adminConfig is AdminConfig with cl's ProviderConfig pc.
func (b *Backend) adminConfig(ctx context.Context, cl *clustersv1alpha1.Cluster, pc *providersv1alpha1.ProviderConfig) (*rest.Config, error) {
	b.mu.Lock()
	cfg := b.admin[cl.UID]
	b.mu.Unlock()
	if cfg != nil {
		return rest.CopyConfig(cfg), nil
	}
	if _, err := b.ensure(ctx, cl, backend.Want{}, pc); err != nil {
		return nil, err
	}
	b.mu.Lock()
	cfg = b.admin[cl.UID]
	b.mu.Unlock()
	if cfg == nil {
		return nil, fmt.Errorf("the hosted control plane of %s has no credentials yet", backend.RefOf(cl))
	}
	return rest.CopyConfig(cfg), nil
}

// SetJWTAuthenticators writes jwt into the control plane's authentication ConfigMap, makes the
// kubelet refresh the API server pods' copy at once, and reports whether the API server runs with it.
func (b *Backend) SetJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator) (bool, error) {
	pc, err := b.config(ctx, cl)
	if err != nil {
		return false, err
	}
	return b.setJWTAuthenticators(ctx, cl, jwt, pc)
}

// setJWTAuthenticators is SetJWTAuthenticators with cl's ProviderConfig pc.
func (b *Backend) setJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator, pc *providersv1alpha1.ProviderConfig) (bool, error) {
	data, err := authconfig.Render(jwt)
	if err != nil {
		return false, err
	}
	var seed *providersv1alpha1.SeedRef
	if pc.Spec.Hosted != nil {
		seed = pc.Spec.Hosted.Seed
	}
	h, _, found, err := b.locate(ctx, cl, seed)
	if err != nil || h == nil {
		return false, err
	}
	if !found {
		return false, fmt.Errorf("the hosted control plane of %s does not exist yet", backend.RefOf(cl))
	}
	ns := NamespaceFor(cl.UID)
	cm := &corev1.ConfigMap{}
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: NameAuthn}, cm); err != nil {
		return false, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, NameAuthn, err)
	}
	if cm.Data[authnKey] != string(data) {
		cm.Data = map[string]string{authnKey: string(data)}
		if err := h.client.Update(ctx, cm); err != nil {
			return false, fmt.Errorf("updating ConfigMap %s/%s: %w", ns, NameAuthn, err)
		}
	}
	sum := hashOf([]string{string(data)})
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{LabelComponent: ComponentAPIServer}); err != nil {
		return false, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[AnnotationAuthn] == sum || p.DeletionTimestamp != nil {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[AnnotationAuthn] = sum
		if err := h.client.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("annotating pod %s/%s: %w", ns, p.Name, err)
		}
	}
	cfg, err := b.adminConfig(ctx, cl, pc)
	if err != nil {
		return false, err
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return false, err
	}
	return authconfig.Applied(ctx, hc, cfg.Host, data)
}

func hashOf(ss []string) string {
	h := sha256.New()
	for _, s := range ss {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
