package hosted

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"net"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/controlplane"
)

// Labels and annotations on everything the backend makes in a host cluster.
const (
	// LabelManagedBy (app.kubernetes.io/managed-by) is ManagedBy on every object: the backend's
	// watches select by it.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "cluster-provider-hosted"
	// LabelComponent names the part of the control plane: etcd or apiserver.
	LabelComponent = "app.kubernetes.io/component"
	// LabelClusterUID, LabelClusterNamespace and LabelClusterName name the Cluster (the latter two
	// only when they fit a label value; the annotations always hold them).
	LabelClusterUID       = "hosted.clusters.openmcp.cloud/uid"
	LabelClusterNamespace = "hosted.clusters.openmcp.cloud/namespace"
	LabelClusterName      = "hosted.clusters.openmcp.cloud/name"
	// AnnotationCluster is the Cluster's namespace/name, AnnotationProfile its spec.profile.
	AnnotationCluster = "hosted.clusters.openmcp.cloud/cluster"
	AnnotationProfile = "hosted.clusters.openmcp.cloud/profile"
	// AnnotationCertificates on the API server's pod template is Spec.Certificates.
	AnnotationCertificates = "hosted.clusters.openmcp.cloud/certificates"
	// AnnotationTrust on the API server's and etcd's pod templates is Spec.Trust.
	AnnotationTrust = "hosted.clusters.openmcp.cloud/trust"
	// AnnotationEncryption on the API server's pod template is Spec.Encryption.
	AnnotationEncryption = "hosted.clusters.openmcp.cloud/encryption"
	// AnnotationInputs on the workloads is the hash of the rendered object (Rendered): the
	// backend applies a workload only when it is missing or its inputs changed, so a new operator
	// version whose plan differs never rolls a running control plane.
	AnnotationInputs = "hosted.clusters.openmcp.cloud/inputs"
	// AnnotationRestored on the API server's pod template is Spec.RestoredMark.
	AnnotationRestored = "hosted.clusters.openmcp.cloud/restored"
	// AnnotationAuthn on the API server's pods is the hash of the authentication configuration
	// they should have: setting it makes the kubelet sync the pod, and so its mounted ConfigMap,
	// at once instead of within its sync period (a minute or more).
	AnnotationAuthn = "hosted.clusters.openmcp.cloud/authn"
)

// Components.
const (
	ComponentEtcd      = "etcd"
	ComponentAPIServer = "apiserver"
)

// Names of the objects in a control plane's namespace.
const (
	NameEtcd           = "etcd"
	NameAPIServer      = "apiserver"
	NameExternal       = "apiserver-external"
	NameAuthn          = "authentication"
	SecretCA           = "ca"
	SecretEtcdCA       = "etcd-ca"
	SecretEtcdServer   = "etcd-server"
	SecretEtcdClient   = "etcd-client"
	SecretServiceAcct  = "service-account"
	SecretServing      = "apiserver-serving"
	SecretAdmin        = "admin"
	SecretKCMKubeconf  = "kube-controller-manager"
	containerAPIServer = "kube-apiserver"
	containerKCM       = "kube-controller-manager"
	containerEtcd      = "etcd"
	containerFrontDoor = "front-door"
)

// Ports.
const (
	PortAPIServer = 6443
	PortService   = 443
	portEtcd      = 2379
	portEtcdPeer  = 2380
	portEtcdHTTP  = 2381 // /health and /metrics, plain HTTP
	portKCM       = 10257
)

// Paths in the containers. The control-plane image holds the binaries in /usr/local/bin.
const (
	binDir       = "/usr/local/bin/"
	pkiMount     = "/etc/kubernetes/pki"
	etcdPKIMount = "/etc/etcd/pki"
	authnMount   = "/etc/kubernetes/authn"
	kcmMount     = "/etc/kubernetes/kcm"
	etcdDataDir  = "/var/lib/etcd"
	tmpMount     = "/tmp"
	// uid and gid of the containers (the image has no passwd: any non-root id does).
	runAsID = 65532
)

// Spec is everything a control plane's objects are made from.
type Spec struct {
	// ObjectStore is the ProviderConfig's object store of snapshots (nil: none): a restore whose
	// snapshot the claim lacks serves it from there (objectstore.go).
	ObjectStore *providersv1alpha1.BackupObjectStore
	// Namespace is the control plane's namespace in the host cluster.
	Namespace string
	// Cluster is the Cluster resource it serves.
	Cluster ClusterRef
	// Image is the control-plane image (kube-apiserver, kube-controller-manager, etcd).
	Image string
	// ControllerManagerImage, when set, is the controller manager's image instead of Image: the
	// one it keeps while an upgrade's API servers roll (heldControllerManager).
	ControllerManagerImage string
	// ServiceCIDR is the cluster's service range.
	ServiceCIDR string
	// StorageClassName, when set, keeps etcd's data on a claim of StorageSize.
	StorageClassName string
	StorageSize      resource.Quantity
	// Exposure is the external Service's type: NodePort or LoadBalancer.
	Exposure corev1.ServiceType
	// Resources of the containers.
	APIServer, ControllerManager, Etcd corev1.ResourceRequirements
	// IssuerPorts are the TCP ports of the OIDC issuers the API server may reach (443 when none
	// is named); PrivateIssuers lets it reach them on private addresses too. Never on link-local
	// addresses (cloud metadata) nor on HostAPIEndpoints (issuerExcept).
	IssuerPorts    []int32
	PrivateIssuers bool
	// HostAPIEndpoints are the addresses of the host cluster's own API server: the ClusterIP of
	// Service default/kubernetes and the addresses of its EndpointSlices, read from the host at
	// every reconcile. The API server never reaches them, whatever PrivateIssuers says.
	HostAPIEndpoints []string
	// HighAvailability runs haEtcdMembers etcd members and haAPIServers API servers (with their
	// controller managers), each on its own node, with PodDisruptionBudgets and
	// PriorityClassControlPlane. It needs StorageClassName. Without it: one of each.
	HighAvailability bool
	// EtcdDataDir is etcd's data folder on its volume: "" for "data", or the folder a restore made.
	EtcdDataDir string
	// EtcdRestore, when set, makes each etcd pod restore the snapshot into EtcdDataDir before etcd
	// starts (an init container that does nothing once the folder exists).
	EtcdRestore *RestoreSource
	// Restoring lets etcd's pods reach the snapshot serves of BackupNamespace (NetworkPolicy).
	Restoring bool
	// APIServersStopped scales the API servers' Deployment to zero while a restore swaps etcd's
	// data and until every member runs the restored data (restore.go).
	APIServersStopped bool
	// RestoredMark on the API server's pod template rolls the API servers after a restore: their
	// watches and caches start anew on the restored data.
	RestoredMark string
	// Certificates is the checksum of the leaf certificates the API server's pod mounts
	// (pki.Checksum): the pod template carries it (AnnotationCertificates), so a renewal rolls
	// the Deployment, blue/green, and no process keeps a certificate that ends.
	Certificates string
	// Trust is the checksum of the CAs' trust bundles (trustOf), empty while neither CA was ever
	// rotated: the API server's and etcd's pod templates carry it (AnnotationTrust), so each phase
	// of a CA rotation rolls them onto the bundle (etcd reads its trusted CAs only at its start).
	Trust string
	// AllowedSourceRanges, when set, are the only addresses that reach the API server besides
	// OperatorPods (its NetworkPolicy; LoadBalancer: loadBalancerSourceRanges); the external
	// Service keeps clients' addresses (externalTrafficPolicy Local).
	AllowedSourceRanges []string
	// OperatorPods, when set, are the operator's own pods in the host cluster, which reach the API
	// server on its internal Service: with AllowedSourceRanges the only pods of the host it takes
	// clients from. Nil on a seed and for an operator outside the host: it reaches the API server
	// on its external endpoint, from an address that must be in AllowedSourceRanges.
	OperatorPods *Pods
	// Audit: the API server writes an audit log (controlplane.AuditPolicy) onto a volume of its
	// pod, rotated at its size cap, and a sidecar (cmd/audit-log) streams it to its output
	// (`kubectl logs … -c audit`). The ProviderConfig's spec.audit.disabled turns it off.
	Audit bool
	// Encryption, when set, is the checksum of the EncryptionConfiguration in Secret
	// SecretEncryption (encryption.go): the API servers encrypt Secrets with it, and the pod
	// template carries it (AnnotationEncryption), so a change of keys rolls them.
	Encryption string
	// FrontDoor: the ProviderConfig sets spec.hibernation, so the endpoint is a front door
	// (component_frontdoor.go) that keeps answering while the control plane hibernates.
	FrontDoor bool
	// Hibernated scales etcd and the API servers to zero, their data, certificates and keys kept
	// (component_hibernation.go).
	Hibernated bool
	// DoorServes: the front door has a ready pod (or the control plane is hibernated behind it),
	// so the external Service selects it; until then the API servers, so that turning
	// spec.hibernation on never leaves the endpoint without a backend.
	DoorServes bool
}

// Pods selects pods of one namespace by their labels (none: every pod of the namespace).
type Pods struct {
	Namespace string
	Labels    map[string]string
}

// RestoreSource is where etcd's pods fetch the snapshot they restore: a serve of BackupNamespace
// (backup.go) and the snapshot's SHA-256.
type RestoreSource struct {
	URL    string `json:"url"`
	SHA256 string `json:"sha256"`
}

// ClusterRef names a Cluster resource.
type ClusterRef struct {
	Namespace, Name, Profile string
	UID                      types.UID
}

// NamespaceFor is the host namespace of the Cluster with uid: "hcp-" and the UID's first 20 hex
// digits; stable for the Cluster's life and new for a re-created Cluster of the same name.
func NamespaceFor(uid types.UID) string {
	s := strings.ReplaceAll(string(uid), "-", "")
	if len(s) > 20 {
		s = s[:20]
	}
	return "hcp-" + strings.ToLower(s)
}

// Defaults of the containers' resources (HostedBackendConfig.Resources documents them).
var (
	DefaultAPIServer = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("768Mi")},
	}
	DefaultControllerManager = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
	}
	DefaultEtcd = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
	}
	DefaultStorageSize = resource.MustParse("1Gi")
)

// labels are the labels of every object of s (component empty: none).
func (s *Spec) labels(component string) map[string]string {
	l := map[string]string{LabelManagedBy: ManagedBy, LabelClusterUID: string(s.Cluster.UID)}
	for k, v := range map[string]string{LabelClusterNamespace: s.Cluster.Namespace, LabelClusterName: s.Cluster.Name} {
		if len(v) <= 63 {
			l[k] = v
		}
	}
	if component != "" {
		l[LabelComponent] = component
	}
	return l
}

// selector is the label selector of a component's pods.
func (s *Spec) selector(component string) map[string]string {
	return map[string]string{LabelManagedBy: ManagedBy, LabelClusterUID: string(s.Cluster.UID), LabelComponent: component}
}

func (s *Spec) meta(name, component string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: name, Namespace: s.Namespace, Labels: s.labels(component),
		Annotations: map[string]string{
			AnnotationCluster: s.Cluster.Namespace + "/" + s.Cluster.Name,
			AnnotationProfile: s.Cluster.Profile,
		},
	}
}

// podMeta is a pod template's metadata: the labels and the annotations that name the Cluster.
func (s *Spec) podMeta(component string) metav1.ObjectMeta {
	m := s.meta("", component)
	m.Namespace = ""
	return m
}

// Rendered is the hash of a rendered object without its AnnotationInputs: what AnnotationInputs
// holds, so that any change of what the backend would write (a Spec field, a default or a
// template changed by a new release) shows, and nothing else does.
func Rendered(obj client.Object) string {
	obj = obj.DeepCopyObject().(client.Object)
	if a := obj.GetAnnotations(); a != nil {
		delete(a, AnnotationInputs)
		obj.SetAnnotations(a)
	}
	data, err := json.Marshal(obj)
	if err != nil {
		panic(fmt.Sprintf("a hosted object does not marshal: %v", err))
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// stamp sets obj's AnnotationInputs to Rendered(obj) and returns obj.
func stamp[T client.Object](obj T) T {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[AnnotationInputs] = Rendered(obj)
	obj.SetAnnotations(a)
	return obj
}

// High availability (Spec.HighAvailability).
const (
	// haEtcdMembers is the size of a highly available etcd: a quorum of two survives one member
	// lost, drained or rolled.
	haEtcdMembers = 3
	// haAPIServers is the number of API servers (each with a controller manager) of a highly
	// available control plane.
	haAPIServers = 2
	// NameEtcdPeer is the headless Service that gives each etcd member its DNS name
	// (etcd-N.etcd-peer.NAMESPACE.svc) and the peers' port; SecretEtcdPeer its peer certificate.
	NameEtcdPeer   = "etcd-peer"
	SecretEtcdPeer = "etcd-peer"
	// SecretEtcdPeerClient is the certificate a member shows the others: no names in it, since
	// etcd checks a peer certificate's names against the address the peer connects from (which
	// a network that translates pod addresses changes).
	SecretEtcdPeerClient = "etcd-peer-client"
	// etcdPeerCN is the common name of the peer certificate: the only one etcd takes as a peer
	// (--peer-cert-allowed-cn), so that the API server's client certificate of the same CA is not.
	// The peer certificate serves (the members' names in it), the peer client certificate (no names)
	// connects.
	etcdPeerCN = "etcd-peer"
	// PriorityClassControlPlane is the PriorityClass of highly available control planes' pods
	// (made in the host cluster when missing, ensurePriorityClass): above workloads, below the
	// host's own system-cluster-critical and system-node-critical; it never preempts.
	PriorityClassControlPlane = "cluster-provider-control-plane"
	priorityControlPlane      = 100_000_000
)

// replicas is the number of pods of a component.
func (s *Spec) replicas(component string) int32 {
	switch {
	case !s.HighAvailability:
		return 1
	case component == ComponentEtcd:
		return haEtcdMembers
	default:
		return haAPIServers
	}
}

// podSpec is the pod of a component: non-root, read-only root, no capabilities (the restricted
// Pod Security Standard), no service-account token (the control plane does not call its host),
// spread over nodes away from other control planes' pods of the same component.
func (s *Spec) podSpec(component string, containers []corev1.Container) corev1.PodSpec {
	for i := range containers {
		harden(&containers[i])
	}
	spec := corev1.PodSpec{
		Containers:                   containers,
		AutomountServiceAccountToken: ptr.To(false),
		EnableServiceLinks:           ptr.To(false),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](runAsID), RunAsGroup: ptr.To[int64](runAsID), FSGroup: ptr.To[int64](runAsID),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Volumes: []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		// Two replicas of one control plane (a rollout) go to different nodes where they can.
		TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: s.selector(component)},
		}},
		// Control planes spread over the nodes: a pod prefers a node without another control
		// plane's pod of its component (topology spread counts only its own namespace's pods).
		Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
				Weight: 100,
				PodAffinityTerm: corev1.PodAffinityTerm{
					TopologyKey:       corev1.LabelHostname,
					LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{LabelManagedBy: ManagedBy, LabelComponent: component}},
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelManagedBy: ManagedBy}},
				},
			}},
		}},
		TerminationGracePeriodSeconds: ptr.To[int64](30),
	}
	if s.HighAvailability {
		// Never two pods of one component (of one revision, for the API servers: a rollout starts
		// the new ones beside the old) on one node, and before workloads.
		required := corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: s.selector(component)}}
		if component == ComponentAPIServer {
			required.MatchLabelKeys = []string{appsv1.DefaultDeploymentUniqueLabelKey}
		}
		spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = []corev1.PodAffinityTerm{required}
		spec.PriorityClassName = PriorityClassControlPlane
	}
	return spec
}

// harden makes c meet the restricted Pod Security Standard: non-root, read-only root, no
// capabilities, no privilege escalation.
func harden(c *corev1.Container) {
	c.ImagePullPolicy = corev1.PullIfNotPresent
	c.TerminationMessagePolicy = corev1.TerminationMessageFallbackToLogsOnError
	c.SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// goEnv sets a container's Go memory limit to its memory limit, as the kubelet gives it
// (GOMEMLIMIT in bytes), and GOGC 50. The local backend starts its API servers with GOGC 200
// under a lower limit, for faster wakes; here a pod's start waits mostly for its scheduling and
// its probes, and a change of this environment would roll every API server (docs/hibernation.md).
func goEnv(container string) []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "GOMEMLIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
			ContainerName: container, Resource: "limits.memory", Divisor: resource.MustParse("1"),
		}}},
		{Name: "GOGC", Value: "50"},
	}
}

func httpProbe(path string, port int32, scheme corev1.URIScheme, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(port), Scheme: scheme}},
		PeriodSeconds:    period,
		FailureThreshold: failures,
		TimeoutSeconds:   5,
	}
}

// secretItems projects Secret name's keys (key, path, key, path, ...).
func secretItems(name string, keyPaths ...string) corev1.VolumeProjection {
	p := &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: name}}
	for i := 0; i+1 < len(keyPaths); i += 2 {
		p.Items = append(p.Items, corev1.KeyToPath{Key: keyPaths[i], Path: keyPaths[i+1]})
	}
	return corev1.VolumeProjection{Secret: p}
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

// ServingHosts are the names and addresses the API server's serving certificate is for: its
// Services' DNS names, the hosted cluster's own kubernetes Service, the pod's loopback (the
// controller manager), and the external host or load balancer addresses.
func ServingHosts(namespace, serviceCIDR string, external []string) []string {
	hosts := []string{"localhost", "127.0.0.1",
		NameAPIServer, NameAPIServer + "." + namespace, NameAPIServer + "." + namespace + ".svc",
		NameAPIServer + "." + namespace + ".svc.cluster.local",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
	}
	if ip := controlplane.KubernetesServiceIP(serviceCIDR); ip != nil {
		hosts = append(hosts, ip.String())
	}
	for _, h := range external {
		if h != "" && !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// EtcdHosts are the names etcd's serving certificate is for.
func EtcdHosts(namespace string) []string {
	return []string{NameEtcd, NameEtcd + "." + namespace, NameEtcd + "." + namespace + ".svc",
		NameEtcd + "." + namespace + ".svc.cluster.local", "localhost", "127.0.0.1"}
}

// EtcdMemberHosts are the names of the members of a highly available etcd, which its serving and
// peer certificates are for.
func EtcdMemberHosts(namespace string) []string {
	var hosts []string
	for i := range haEtcdMembers {
		hosts = append(hosts, etcdMember(namespace, i), etcdMember(namespace, i)+".cluster.local")
	}
	return hosts
}

// internalURL is the API server's URL inside the host cluster.
func internalURL(namespace string) string {
	return fmt.Sprintf("https://%s.%s.svc:%d", NameAPIServer, namespace, PortService)
}

// externalURL is https://host:port.
func externalURL(host string, port int32) string {
	return "https://" + net.JoinHostPort(host, strconv.Itoa(int(port)))
}
