package v1alpha1

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

// Backend is the kind of machinery that runs the clusters of a profile.
// +kubebuilder:validation:Enum=local;kind;hosted
type Backend string

const (
	// BackendLocal runs a kube-apiserver and etcd per Cluster as local processes.
	BackendLocal Backend = "local"
	// BackendKind runs a kind cluster per Cluster (needs a Docker engine).
	BackendKind Backend = "kind"
	// BackendHosted runs each Cluster's control plane as workloads (etcd StatefulSet, API server
	// Deployment) in a namespace of its own of the platform cluster or of a seed cluster.
	BackendHosted Backend = "hosted"
)

// ProviderConfigSpec configures one ClusterProfile of this ClusterProvider.
//
// +kubebuilder:validation:XValidation:rule="!has(self.local) || self.backend == 'local'",message="spec.local is only allowed with backend local"
// +kubebuilder:validation:XValidation:rule="!has(self.kind) || self.backend == 'kind'",message="spec.kind is only allowed with backend kind"
// +kubebuilder:validation:XValidation:rule="!has(self.hosted) || self.backend == 'hosted'",message="spec.hosted is only allowed with backend hosted"
// +kubebuilder:validation:XValidation:rule="!has(self.hibernation) || self.backend in ['local', 'hosted']",message="spec.hibernation is only supported with backends local and hosted (kind does not hibernate)"
// +kubebuilder:validation:XValidation:rule="!has(self.pool) || self.pool.size == 0 || self.backend == 'local'",message="spec.pool is only supported with backend local (hosted and kind keep no spare clusters yet)"
type ProviderConfigSpec struct {
	// Backend runs the clusters: local, kind or hosted. It cannot be changed.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.backend is immutable; create a new ProviderConfig for another backend"
	Backend Backend `json:"backend"`

	// SupportedVersions are the Kubernetes versions offered, published in the ClusterProfile.
	// +optional
	SupportedVersions []clustersv1alpha1.SupportedK8sVersion `json:"supportedVersions,omitempty"`

	// DefaultVersion is used for Clusters that do not ask for a version. It must be one of the
	// supported, non-deprecated versions.
	// +optional
	DefaultVersion string `json:"defaultVersion,omitempty"`

	// Local holds settings of the local backend.
	// +optional
	Local *LocalBackendConfig `json:"local,omitempty"`

	// Kind holds settings of the kind backend.
	// +optional
	Kind *KindBackendConfig `json:"kind,omitempty"`

	// Hosted holds settings of the hosted backend.
	// +optional
	Hosted *HostedBackendConfig `json:"hosted,omitempty"`

	// OIDC limits and configures OIDC AccessRequests of the profile's Clusters.
	// +optional
	OIDC *OIDCSettings `json:"oidc,omitempty"`

	// Backup schedules etcd snapshots of the profile's Clusters, for the backends that run their
	// etcd (local). Unset: a snapshot every hour, the newest 24 of each Cluster kept. Snapshots
	// on demand (annotation backup.clusters.openmcp.cloud/snapshot) are taken either way.
	// +optional
	Backup *BackupPolicy `json:"backup,omitempty"`

	// Audit switches the audit logs of the profile's Clusters, for the backends that run their API
	// servers (local, hosted). Unset: on. A change restarts (local) or rolls (hosted) each
	// Cluster's API server with or without them; the logs written stay.
	// +optional
	Audit *AuditPolicy `json:"audit,omitempty"`

	// Hibernation stops the control planes of the profile's Clusters while nobody uses them, for
	// the backends that run them (local, hosted): their data, certificates and keys stay, their
	// endpoint keeps answering, and the first connection wakes them (HibernationPolicy). Unset:
	// never idle-hibernated; the annotation hibernation.clusters.openmcp.cloud/hibernate works
	// either way on local. Hosted: set, the endpoint is a front door (a small Deployment in front
	// of the API servers, which keeps answering while they are scaled to zero); without it the
	// annotation is ignored, and control planes whose etcd has no claim (no
	// spec.hosted.storageClassName) never hibernate.
	// +optional
	Hibernation *HibernationPolicy `json:"hibernation,omitempty"`

	// Pool keeps spare control planes of the default version ready, for the backends that run
	// them (local): a new Cluster of that version claims one (its own CA, keys and data, never
	// shared) and is Ready at once, and the pool refills behind it (PoolPolicy). Unset: none.
	// +optional
	Pool *PoolPolicy `json:"pool,omitempty"`
}

// PoolPolicy says how many spare control planes a profile keeps, and how.
type PoolPolicy struct {
	// Size is how many spare clusters of the profile's default version are kept, 0 to 20. Spares
	// take places of the operator's --local-max-clusters while they run, and give them up to
	// Clusters that need one.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=20
	Size int32 `json:"size"`

	// Hibernated keeps the spares hibernated once they are made (no process runs: they cost
	// disk, not memory), so a claim wakes one, in about two seconds; unset, they run, and a
	// claimed one is Ready at once.
	// +optional
	Hibernated bool `json:"hibernated,omitempty"`
}

// SizeOf is the pool size of p; 0 for a nil policy.
func (p *PoolPolicy) SizeOf() int {
	if p == nil {
		return 0
	}
	return int(p.Size)
}

// HibernationPolicy says when a profile's Clusters hibernate by themselves.
type HibernationPolicy struct {
	// IdleAfter hibernates a Cluster once no client connection went through its endpoint for
	// this long, at least 10s (e.g. 15m). The operator's own probes and the cluster's own
	// components do not count; an open connection (a watch) keeps it awake. Unset: never.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="hibernation.idleAfter must be at least 10s, e.g. 15m"
	// +optional
	IdleAfter *metav1.Duration `json:"idleAfter,omitempty"`
}

// Idle is how long a Cluster of the policy p may go without a client before it hibernates; 0
// for never (a nil policy, or no IdleAfter).
func (p *HibernationPolicy) Idle() time.Duration {
	if p == nil || p.IdleAfter == nil {
		return 0
	}
	return p.IdleAfter.Duration
}

// AuditPolicy switches the audit logs of a profile's Clusters.
type AuditPolicy struct {
	// Disabled turns the audit logs off.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
}

// On reports whether the audit logs are on; a nil policy is the default one: on.
func (p *AuditPolicy) On() bool { return p == nil || !p.Disabled }

// BackupPolicy schedules the etcd snapshots of a profile's Clusters.
type BackupPolicy struct {
	// Disabled turns scheduled snapshots off. Snapshots already taken are kept; snapshots on
	// demand are still taken.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// Interval is the time between two scheduled snapshots of a Cluster, at least 1m. Default 1h.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="backup.interval must be at least 1m, e.g. 1h"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Keep is how many snapshots of each Cluster are kept, the newest; older ones are removed
	// when a new one was taken and verified (unless Retention keeps them). Default 24 without
	// Retention; with Retention, unset keeps only what Retention says (and always the newest).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Keep int32 `json:"keep,omitempty"`

	// Retention keeps snapshots by age tiers besides the newest Keep: the newest snapshot of each
	// of the last Hourly hours, Daily days, Weekly weeks and Monthly months (UTC, counted back
	// from now). A snapshot either rule keeps is kept; the newest snapshot (every listed snapshot
	// was verified when taken) is never removed. Applied at the next snapshot of each Cluster.
	// +optional
	Retention *BackupRetention `json:"retention,omitempty"`

	// SnapshotBeforeDelete takes a snapshot of a Cluster's etcd before its cluster is deleted (a
	// Cluster that is not Ready is deleted without one, said in an Event). Default true. A
	// snapshot that fails blocks the deletion (condition Deleted, reason SnapshotBeforeDeleteFailed)
	// until it succeeds, this is false, or the Cluster has annotation
	// backup.clusters.openmcp.cloud/skip-snapshot-before-delete.
	// +optional
	SnapshotBeforeDelete *bool `json:"snapshotBeforeDelete,omitempty"`

	// ObjectStore keeps the snapshots in an S3-compatible object store as well, encrypted, for
	// the local and the hosted backends: the store's list is the catalog, and a Cluster whose
	// state (local) or snapshot claim (hosted: a lost node) is lost is restored from it
	// (BackupObjectStore).
	// +optional
	ObjectStore *BackupObjectStore `json:"objectStore,omitempty"`
}

// BackupRetention are the age tiers of a BackupPolicy: how many of the last hours, days, weeks
// and months keep their newest snapshot. 0 (or unset) turns a tier off.
type BackupRetention struct {
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Hourly int32 `json:"hourly,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Daily int32 `json:"daily,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Weekly int32 `json:"weekly,omitempty"`
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Monthly int32 `json:"monthly,omitempty"`
}

// SnapshotsBeforeDelete reports whether a Cluster's etcd is snapshotted before it is deleted; a
// nil policy is the default one: yes.
func (p *BackupPolicy) SnapshotsBeforeDelete() bool {
	return p == nil || p.SnapshotBeforeDelete == nil || *p.SnapshotBeforeDelete
}

// Defaults of a BackupPolicy.
const (
	DefaultBackupInterval = time.Hour
	DefaultBackupKeep     = 24
)

// Scheduled is the interval between scheduled snapshots, 0 when they are turned off, and how
// many snapshots are kept; a nil policy is the default one.
func (p *BackupPolicy) Scheduled() (interval time.Duration, keep int) {
	interval, keep = DefaultBackupInterval, DefaultBackupKeep
	if p == nil {
		return interval, keep
	}
	if p.Interval != nil && p.Interval.Duration > 0 {
		interval = p.Interval.Duration
	}
	if p.Keep > 0 {
		keep = int(p.Keep)
	}
	if p.Disabled {
		interval = 0
	}
	return interval, keep
}

// OIDCSettings limit and configure the OIDC issuers a profile's Clusters may be made to trust.
type OIDCSettings struct {
	// AllowedIssuers are the issuers an OIDC AccessRequest may name: one is allowed when its
	// scheme and host (with the port) equal an entry's and its path is the entry's path or below
	// it, segment by segment (https://idp.example.com/realms allows
	// https://idp.example.com/realms/corp, not https://idp.example.com/realmsx nor
	// https://idp.example.com.evil.net). Others are Denied. Empty allows any https issuer.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=2048
	// +kubebuilder:validation:items:XValidation:rule="isURL(self) && url(self).getScheme() == 'https'",message="allowedIssuers entries must be https URLs, e.g. https://idp.example.com/"
	// +optional
	AllowedIssuers []string `json:"allowedIssuers,omitempty"`

	// IssuerCABundle is a PEM bundle of CA certificates that verify the issuers' serving
	// certificates, for the API servers and the provider alike; empty uses the system's roots.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	IssuerCABundle string `json:"issuerCABundle,omitempty"`

	// AllowPrivateIssuers lets issuers be reached on loopback, link-local (cloud metadata),
	// private (RFC 1918, IPv6 ULA) and shared (100.64.0.0/10) addresses. The provider fetches each
	// issuer's discovery document from the operator's pod, so by default such addresses, which
	// reach the platform's own network, are refused (the request is Denied IssuerNotAllowed).
	// Allow them for an identity provider inside your network, together with AllowedIssuers.
	// Hosted control planes' API servers then reach private addresses on the issuers' ports too,
	// but never link-local ones (cloud metadata) nor the host cluster's own API server.
	// +optional
	AllowPrivateIssuers bool `json:"allowPrivateIssuers,omitempty"`
}

// LocalBackendConfig holds settings of the local backend. It has none yet.
type LocalBackendConfig struct{}

// KindBackendConfig holds settings of the kind backend.
type KindBackendConfig struct {
	// NodeImages are the kind node images by Kubernetes version (1.37.1 →
	// kindest/node:v1.37.1@sha256:…): the versions the kind backend can run for this profile.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	NodeImages map[string]string `json:"nodeImages,omitempty"`
}

// HostedBackendConfig holds settings of the hosted backend: where and how each Cluster's control
// plane runs. Settings are read when a Cluster's workloads are made or changed; the image a Cluster
// was created with is kept in its status, so a change of Images affects new Clusters only.
// +kubebuilder:validation:XValidation:rule="!has(self.highAvailability) || !self.highAvailability || (has(self.storageClassName) && size(self.storageClassName) > 0)",message="spec.hosted.highAvailability needs spec.hosted.storageClassName: each etcd member keeps its data on a claim of that class"
// +kubebuilder:validation:XValidation:rule="!has(self.allowedSourceRanges) || size(self.allowedSourceRanges) == 0 || (has(self.exposure) && self.exposure == 'LoadBalancer') || (has(self.externalHost) && size(self.externalHost) > 0)",message="spec.hosted.allowedSourceRanges with NodePort exposure needs spec.hosted.externalHost: with source ranges only the nodes running an API server answer on its NodePort (externalTrafficPolicy Local keeps the client's address for the NetworkPolicy), so clients need a load balancer in front of the nodes that checks the port; or use exposure LoadBalancer"
type HostedBackendConfig struct {
	// Images are the control-plane images by Kubernetes version (1.37.1 →
	// cluster-provider/controlplane:v1.37.1): each holds kube-apiserver, kube-controller-manager
	// and etcd in /usr/local/bin (make controlplane-image). They are the versions the profile offers.
	// +kubebuilder:validation:MaxProperties=32
	// +optional
	Images map[string]string `json:"images,omitempty"`

	// Seed runs the control planes in another cluster instead of the platform: the kubeconfig in a
	// Secret of the operator's namespace. Its API server and the nodes' external endpoint must be
	// reachable from the operator's pod.
	// +optional
	Seed *SeedRef `json:"seed,omitempty"`

	// StorageClassName keeps each Cluster's etcd data on a PersistentVolumeClaim of this class.
	// Without it etcd's data is on an emptyDir: it is LOST when the etcd pod is deleted or moved.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName string `json:"storageClassName,omitempty"`

	// HighAvailability runs each new Cluster's control plane highly available: three etcd members
	// (TLS between them, one per node, a quorum survives the loss of one), two API servers with a
	// kube-controller-manager each (leader election), PodDisruptionBudgets that let a drain take
	// one member or API server at a time, anti-affinity that keeps them on different nodes, the
	// PriorityClass cluster-provider-control-plane (scheduled before workloads, but never
	// preempting another pod), and memory requests equal to the limits. It
	// needs storageClassName (a member keeps its data on its claim) and three schedulable nodes.
	// Recorded per Cluster when it is created: a change applies to new Clusters only. Without it a
	// control plane is one etcd and one API server: a node drain or loss stops it until its pods
	// run again.
	// +optional
	HighAvailability bool `json:"highAvailability,omitempty"`

	// StorageSize is the size of each etcd claim. Default 1Gi.
	// +optional
	StorageSize *resource.Quantity `json:"storageSize,omitempty"`

	// Exposure is how clients outside the host cluster reach an API server: NodePort (default) on
	// ExternalHost, or LoadBalancer on the address the Service is given.
	// +kubebuilder:validation:Enum=NodePort;LoadBalancer
	// +optional
	Exposure corev1.ServiceType `json:"exposure,omitempty"`

	// ExternalHost is the host name or IP address clients use with NodePort exposure: a node's
	// address or a load balancer in front of the nodes. Default: the InternalIP of the host
	// cluster's first node (by name) when the Cluster is created, kept for its life.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	ExternalHost string `json:"externalHost,omitempty"`

	// AllowedSourceRanges, when set, are the only client addresses (CIDRs, e.g. 203.0.113.0/24)
	// that reach the API servers; of the host cluster's pods only the operator's own still reach
	// them (list the host's pod range to admit the others). LoadBalancer exposure: the Service's
	// loadBalancerSourceRanges; both: the API server's NetworkPolicy admits port 6443 only from
	// these ranges and the operator's pods, and the external Service keeps the client's address
	// (externalTrafficPolicy Local). It applies to existing Clusters at once. NodePort exposure
	// needs externalHost with it. Enforced by the host's CNI (NetworkPolicy) and load balancer.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=49
	// +kubebuilder:validation:XValidation:rule="self.all(c, isCIDR(c))",message="spec.hosted.allowedSourceRanges entries must be CIDRs, e.g. 203.0.113.0/24 or 2001:db8::/32"
	// +listType=set
	// +optional
	AllowedSourceRanges []string `json:"allowedSourceRanges,omitempty"`

	// Resources of each control plane's containers. Defaults: apiServer requests 100m CPU and
	// 256Mi (limit 768Mi), controllerManager 20m and 64Mi (limit 256Mi), etcd 20m and 64Mi
	// (limit 512Mi). A container's Go memory limit (GOMEMLIMIT) follows its memory limit.
	// +optional
	Resources *HostedResources `json:"resources,omitempty"`

	// MaxClusters is the most Clusters of this profile that one namespace may have control planes
	// for: a fair share of the host per tenant. A Cluster beyond it gets none (condition Provisioned
	// False, reason QuotaExceeded, and a Warning Event say so and what to do) and gets one by
	// itself once a place frees (a Cluster of this profile in its namespace deleted, or the cap
	// raised). The places go to the oldest Clusters, by creationTimestamp then name; a Cluster
	// holds its place from the moment its control plane is made until the control plane is gone.
	// Lowering it refuses new Clusters only: a control plane that exists is never stopped, so a
	// namespace may stay above the cap until Clusters are deleted. Unset: no cap.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxClusters *int32 `json:"maxClusters,omitempty"`
}

// SeedRef names the kubeconfig of a seed cluster.
type SeedRef struct {
	// SecretName is a Secret in the operator's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SecretName string `json:"secretName"`
	// Key of the kubeconfig in the Secret. Default "kubeconfig".
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// HostedResources are the resources of a hosted control plane's containers; each one set replaces
// that container's default.
type HostedResources struct {
	// +optional
	APIServer *corev1.ResourceRequirements `json:"apiServer,omitempty"`
	// +optional
	ControllerManager *corev1.ResourceRequirements `json:"controllerManager,omitempty"`
	// +optional
	Etcd *corev1.ResourceRequirements `json:"etcd,omitempty"`
}

// ProviderConfigStatus is the observed state of a ProviderConfig. Phase is Ready, Progressing
// or Terminating.
type ProviderConfigStatus struct {
	common.Status `json:",inline"`

	// Profile names the ClusterProfile generated from this ProviderConfig.
	// +optional
	Profile string `json:"profile,omitempty"`

	// Pool is the state of the spare clusters spec.pool asks for; unset without a pool.
	// +optional
	Pool *PoolStatus `json:"pool,omitempty"`
}

// PoolStatus counts a profile's spare clusters.
type PoolStatus struct {
	// Version is the Kubernetes version of the spares: the profile's default.
	Version string `json:"version"`
	// Ready is how many spares a new Cluster can claim now (running, or hibernated once made).
	Ready int32 `json:"ready"`
	// Starting is how many are being made.
	Starting int32 `json:"starting"`
}

// ProviderConfig configures one ClusterProfile of this ClusterProvider and the controllers that
// serve it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=pcfg
// +kubebuilder:metadata:labels="openmcp.cloud/cluster=platform"
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=".spec.backend"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=".status.phase"
// +kubebuilder:printcolumn:name="Profile",type=string,JSONPath=".status.profile"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type ProviderConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProviderConfigSpec   `json:"spec"`
	Status ProviderConfigStatus `json:"status,omitempty"`
}

// ProviderConfigList is a list of ProviderConfigs.
//
// +kubebuilder:object:root=true
type ProviderConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProviderConfig `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ProviderConfig{}, &ProviderConfigList{})
}
