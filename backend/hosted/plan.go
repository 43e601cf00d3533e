package hosted

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/controlplane"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
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
	// Namespace is the control plane's namespace in the host cluster.
	Namespace string
	// Cluster is the Cluster resource it serves.
	Cluster ClusterRef
	// Image is the control-plane image (kube-apiserver, kube-controller-manager, etcd).
	Image string
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
	// RestoredMark on the API server's pod template rolls the API servers after a restore: their
	// watches and caches start anew on the restored data.
	RestoredMark string
	// Certificates is the checksum of the leaf certificates the API server's pod mounts
	// (pki.Checksum): the pod template carries it (AnnotationCertificates), so a renewal rolls
	// the Deployment, blue/green, and no process keeps a certificate that ends.
	Certificates string
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

// Namespace is the control plane's namespace; it enforces the restricted Pod Security Standard,
// which every pod of the plan meets.
func (s *Spec) NamespaceObject() *corev1.Namespace {
	m := s.meta(s.Namespace, "")
	m.Namespace = ""
	m.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	return &corev1.Namespace{TypeMeta: typeMeta("v1", "Namespace"), ObjectMeta: m}
}

// Objects are the objects the backend applies each time, in order: Services, NetworkPolicies
// and, when highly available, etcd's peer Service and the PodDisruptionBudgets. The workloads
// (Workloads) are applied only when their inputs change; Secrets and the authentication ConfigMap
// are the backend's own (pki.go, SetJWTAuthenticators).
func (s *Spec) Objects() []client.Object {
	objs := []client.Object{
		s.EtcdService(),
		s.EtcdMetricsService(),
		s.InternalService(),
		s.ExternalService(),
		s.DefaultDenyNetworkPolicy(),
		s.EtcdNetworkPolicy(),
		s.APIServerNetworkPolicy(),
	}
	if s.HighAvailability {
		objs = append(objs, s.EtcdPeerService(), s.DisruptionBudget(ComponentEtcd), s.DisruptionBudget(ComponentAPIServer))
	}
	if s.Audit {
		objs = append(objs, s.AuditPolicyConfigMap())
	}
	return objs
}

// Audit logs (Spec.Audit).
const (
	// NameAuditPolicy is the ConfigMap with the API server's audit policy.
	NameAuditPolicy = "audit-policy"
	// containerAudit is the sidecar that streams the audit log to its output.
	containerAudit   = "audit"
	auditPolicyMount = "/etc/kubernetes/audit"
	auditLogMount    = "/var/log/kubernetes/audit"
	auditPolicyKey   = "policy.yaml"
	auditLogFile     = "audit.log"
)

// auditVolumeLimit caps the audit log's volume: the current file and the rotated ones at their
// size cap, and room besides.
var auditVolumeLimit = resource.MustParse(fmt.Sprintf("%dMi", (controlplane.AuditMaxBackups+2)*controlplane.AuditMaxSizeMB))

// AuditPolicyConfigMap holds the API server's audit policy (controlplane.AuditPolicy: Metadata
// level, never a body).
func (s *Spec) AuditPolicyConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: s.meta(NameAuditPolicy, ComponentAPIServer),
		Data: map[string]string{auditPolicyKey: controlplane.AuditPolicy}}
}

// auditSidecar is the container that streams the API server's audit log (cmd/audit-log of the
// control-plane image) to its output, where the host's log collection finds it.
func (s *Spec) auditSidecar() corev1.Container {
	c := corev1.Container{
		Name:    containerAudit,
		Image:   s.Image,
		Command: []string{binDir + "audit-log", "--file=" + auditLogMount + "/" + auditLogFile},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("5m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "audit-log", MountPath: auditLogMount, ReadOnly: true}},
	}
	if s.HighAvailability {
		c.Resources = memoryAsLimited(c.Resources) // as the control plane's other containers
	}
	return c
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

// EtcdPeerService is the governing Service of a highly available etcd's StatefulSet (headless):
// each member's DNS name, published before the member is ready, since members must reach one
// another to become ready.
func (s *Spec) EtcdPeerService() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: s.meta(NameEtcdPeer, ComponentEtcd),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 s.selector(ComponentEtcd),
			PublishNotReadyAddresses: true,
			Ports: []corev1.ServicePort{
				{Name: "client", Port: portEtcd, TargetPort: intstr.FromInt32(portEtcd), Protocol: corev1.ProtocolTCP},
				{Name: "peer", Port: portEtcdPeer, TargetPort: intstr.FromInt32(portEtcdPeer), Protocol: corev1.ProtocolTCP},
			},
		},
	}
}

// DisruptionBudget lets an eviction (a node drain, an autoscaler's scale-down) take one pod of a
// component at a time: etcd keeps its quorum, one API server keeps serving. A pod that is not
// ready may always be evicted, so a broken pod never blocks a drain.
func (s *Spec) DisruptionBudget(component string) *policyv1.PodDisruptionBudget {
	name := NameEtcd
	if component == ComponentAPIServer {
		name = NameAPIServer
	}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   typeMeta("policy/v1", "PodDisruptionBudget"),
		ObjectMeta: s.meta(name, component),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable:             ptr.To(intstr.FromInt32(1)),
			Selector:                   &metav1.LabelSelector{MatchLabels: s.selector(component)},
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

// PriorityClass is PriorityClassControlPlane. Its pods never preempt (PreemptionPolicy Never): a
// highly available control plane that finds no room waits, Pending, rather than evict another
// tenant's control plane or workload; it is still scheduled first and evicted last under node
// pressure. Value and PreemptionPolicy are immutable: a class made by an earlier version without
// them is replaced (ensurePriorityClass).
func PriorityClass() *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{
		TypeMeta:         typeMeta("scheduling.k8s.io/v1", "PriorityClass"),
		ObjectMeta:       metav1.ObjectMeta{Name: PriorityClassControlPlane, Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Value:            priorityControlPlane,
		PreemptionPolicy: ptr.To(corev1.PreemptNever),
		Description: "Pods of the hosted control planes of cluster-provider (highly available ones): scheduled before, " +
			"and evicted after, workloads without a priority class; they never preempt another pod.",
	}
}

// PriorityClassCurrent reports whether pc is PriorityClass in what cannot change: its value and
// its preemption policy (the API server defaults a missing one to PreemptLowerPriority).
func PriorityClassCurrent(pc *schedulingv1.PriorityClass) bool {
	want := PriorityClass()
	return pc.Value == want.Value && pc.PreemptionPolicy != nil && *pc.PreemptionPolicy == *want.PreemptionPolicy
}

// etcdMember is the DNS name of member i of a highly available etcd.
func etcdMember(namespace string, i int) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc", NameEtcd, i, NameEtcdPeer, namespace)
}

// etcdServers is the API server's --etcd-servers: etcd's Service, or every member of a highly
// available etcd (the client balances over them and leaves a member that does not answer).
func (s *Spec) etcdServers() string {
	if !s.HighAvailability {
		return fmt.Sprintf("https://%s.%s.svc:%d", NameEtcd, s.Namespace, portEtcd)
	}
	urls := make([]string, haEtcdMembers)
	for i := range urls {
		urls[i] = fmt.Sprintf("https://%s:%d", etcdMember(s.Namespace, i), portEtcd)
	}
	return strings.Join(urls, ",")
}

// Workloads are etcd's StatefulSet and the API server's Deployment.
func (s *Spec) Workloads() []client.Object {
	return []client.Object{s.EtcdStatefulSet(), s.APIServerDeployment()}
}

// EtcdService is etcd's client Service (ClusterIP): the API server's --etcd-servers.
func (s *Spec) EtcdService() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: s.meta(NameEtcd, ComponentEtcd),
		Spec: corev1.ServiceSpec{
			Selector: s.selector(ComponentEtcd),
			Ports:    []corev1.ServicePort{{Name: "client", Port: portEtcd, TargetPort: intstr.FromInt32(portEtcd), Protocol: corev1.ProtocolTCP}},
			// etcd answers its API server before it is ready: the API server's start waits on it.
			PublishNotReadyAddresses: true,
		},
	}
}

// EtcdMetricsService names etcd's plain-HTTP metrics port (/metrics, /health) for a monitoring
// system: a headless Service whose port is named "metrics" and which carries LabelMetrics, so a
// Prometheus Operator ServiceMonitor (selector LabelMetrics=etcd, port metrics, every hcp-*
// namespace) or any Kubernetes service discovery finds every control plane's etcd. Nothing of the
// Prometheus Operator must be installed. The NetworkPolicy lets in namespaces labelled
// LabelMonitoring=true.
func (s *Spec) EtcdMetricsService() *corev1.Service {
	m := s.meta(NameEtcdMetrics, ComponentEtcd)
	m.Labels[LabelMetrics] = ComponentEtcd
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: m,
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  s.selector(ComponentEtcd),
			Ports:     []corev1.ServicePort{{Name: "metrics", Port: portEtcdHTTP, TargetPort: intstr.FromInt32(portEtcdHTTP), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// Labels of monitoring: LabelMetrics on the Services a monitoring system scrapes, LabelMonitoring
// (value "true") on the namespaces whose pods may scrape etcd.
const (
	LabelMetrics    = "hosted.clusters.openmcp.cloud/metrics"
	LabelMonitoring = "hosted.clusters.openmcp.cloud/monitoring"
	NameEtcdMetrics = "etcd-metrics"
)

// InternalService is the API server's Service inside the host cluster (apiserver-internal).
func (s *Spec) InternalService() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: s.meta(NameAPIServer, ComponentAPIServer),
		Spec: corev1.ServiceSpec{
			Selector: s.selector(ComponentAPIServer),
			Ports:    []corev1.ServicePort{{Name: "https", Port: PortService, TargetPort: intstr.FromInt32(PortAPIServer), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// ExternalService is the API server's Service for clients outside the host cluster
// (apiserver-external): NodePort or LoadBalancer.
func (s *Spec) ExternalService() *corev1.Service {
	svc := &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: s.meta(NameExternal, ComponentAPIServer),
		Spec: corev1.ServiceSpec{
			Type:     s.exposure(),
			Selector: s.selector(ComponentAPIServer),
			Ports:    []corev1.ServicePort{{Name: "https", Port: PortService, TargetPort: intstr.FromInt32(PortAPIServer), Protocol: corev1.ProtocolTCP}},
		},
	}
	if len(s.AllowedSourceRanges) > 0 {
		// The client's address reaches the pod (no SNAT), for the NetworkPolicy to check; only
		// nodes running an API server answer.
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			svc.Spec.LoadBalancerSourceRanges = slices.Clone(s.AllowedSourceRanges)
		}
	}
	return svc
}

func (s *Spec) exposure() corev1.ServiceType {
	if s.Exposure == corev1.ServiceTypeLoadBalancer {
		return corev1.ServiceTypeLoadBalancer
	}
	return corev1.ServiceTypeNodePort
}

// EtcdNetworkPolicy lets only the cluster's API server pods, snapshot and maintenance Jobs reach etcd's client
// port, pods of namespaces labelled LabelMonitoring=true its metrics port, and etcd reach nothing
// (a highly available etcd: its members' peer port, and DNS).
func (s *Spec) EtcdNetworkPolicy() *networkingv1.NetworkPolicy {
	np := &networkingv1.NetworkPolicy{
		TypeMeta:   typeMeta("networking.k8s.io/v1", "NetworkPolicy"),
		ObjectMeta: s.meta(NameEtcd, ComponentEtcd),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: s.selector(ComponentEtcd)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: s.selector(ComponentAPIServer)}}},
				Ports: []networkingv1.NetworkPolicyPort{tcpPort(portEtcd)},
			}, {
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelMonitoring: "true"}}}},
				Ports: []networkingv1.NetworkPolicyPort{tcpPort(portEtcdHTTP)},
			}, {
				// This Cluster's snapshot and maintenance Jobs (backup.go, maintain.go).
				From: []networkingv1.NetworkPolicyPeer{{
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: BackupNamespace}},
					PodSelector: &metav1.LabelSelector{
						MatchLabels: map[string]string{LabelManagedBy: ManagedBy, LabelClusterUID: string(s.Cluster.UID)},
						MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelComponent, Operator: metav1.LabelSelectorOpIn,
							Values: []string{ComponentSnapshot, ComponentMaintain}}},
					},
				}},
				Ports: []networkingv1.NetworkPolicyPort{tcpPort(portEtcd)},
			}},
		},
	}
	if s.HighAvailability {
		// The members reach one another on the peer port, and DNS for one another's names.
		members := []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: s.selector(ComponentEtcd)}}}
		np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{From: members, Ports: []networkingv1.NetworkPolicyPort{tcpPort(portEtcdPeer)}})
		np.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{{To: members, Ports: []networkingv1.NetworkPolicyPort{tcpPort(portEtcdPeer)}}, dnsEgress()}
	}
	if s.Restoring {
		// While a restore runs: the snapshot serve of this Cluster, and DNS for its name.
		np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: BackupNamespace}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: s.selector(ComponentServe)},
			}},
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(portServe)},
		})
		if !s.HighAvailability {
			np.Spec.Egress = append(np.Spec.Egress, dnsEgress())
		}
	}
	return np
}

// dnsEgress lets a pod ask the host cluster's DNS (CoreDNS or kube-dns in kube-system, which the
// kube-dns Service's address leads to), no other address on port 53.
func dnsEgress() networkingv1.NetworkPolicyEgressRule {
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: metav1.NamespaceSystem}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "kube-dns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolUDP), Port: ptr.To(intstr.FromInt32(53))}, tcpPort(53)},
	}
}

// NameDefaultDeny is the NetworkPolicy of a control plane's namespace that denies every pod
// there all traffic but what the policies of its components allow (EtcdNetworkPolicy,
// APIServerNetworkPolicy): a pod the backend does not know of reaches nothing and nothing reaches it.
const NameDefaultDeny = "default-deny"

// DefaultDenyNetworkPolicy selects every pod of the control plane's namespace, for both
// directions, with no rule.
func (s *Spec) DefaultDenyNetworkPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		TypeMeta:   typeMeta("networking.k8s.io/v1", "NetworkPolicy"),
		ObjectMeta: s.meta(NameDefaultDeny, ""),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
}

// privateRanges are the addresses an API server may not reach an OIDC issuer on unless the
// ProviderConfig allows private issuers: as the provider's own discovery refuses them.
var privateRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10", "127.0.0.0/8"}

// linkLocal are the addresses an API server never reaches an issuer on: cloud metadata endpoints
// (169.254.169.254), which hand out the node's credentials.
const linkLocal = "169.254.0.0/16"

// issuerExcept is the except list of the API server's egress to the issuers (0.0.0.0/0): the
// link-local range and each IPv4 address of hostAPI as a /32 always, and privateRanges unless
// private is set. An address another entry covers is left out, as are duplicates, addresses that
// do not parse and IPv6 ones (outside the block); the list is sorted by address, so the same
// inputs give the same object and the policy is not rewritten at every reconcile.
func issuerExcept(private bool, hostAPI []string) []string {
	var ranges []netip.Prefix
	add := func(cidr string) {
		if p, err := netip.ParsePrefix(cidr); err == nil && p.Addr().Is4() {
			ranges = append(ranges, p.Masked())
		}
	}
	add(linkLocal)
	if !private {
		for _, r := range privateRanges {
			add(r)
		}
	}
	for _, a := range hostAPI {
		if ip, err := netip.ParseAddr(a); err == nil {
			if ip = ip.Unmap(); ip.Is4() {
				ranges = append(ranges, netip.PrefixFrom(ip, 32))
			}
		}
	}
	// Widest first, so that an entry is checked against every entry that could cover it.
	slices.SortFunc(ranges, func(a, b netip.Prefix) int {
		if c := a.Bits() - b.Bits(); c != 0 {
			return c
		}
		return a.Addr().Compare(b.Addr())
	})
	var kept []netip.Prefix
	for _, r := range ranges {
		if !slices.ContainsFunc(kept, func(k netip.Prefix) bool { return k.Contains(r.Addr()) }) {
			kept = append(kept, r)
		}
	}
	slices.SortFunc(kept, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	except := make([]string, len(kept))
	for i, k := range kept {
		except[i] = k.String()
	}
	return except
}

// APIServerNetworkPolicy lets API clients in on the API server's port (from anywhere: it
// authenticates them; with AllowedSourceRanges from those and OperatorPods only), and the API
// server out to its etcd, to DNS, and to the OIDC issuers' ports (public addresses only, unless
// private issuers are allowed; never link-local ones nor the host's API server: issuerExcept).
func (s *Spec) APIServerNetworkPolicy() *networkingv1.NetworkPolicy {
	ports := slices.Clone(s.IssuerPorts)
	if len(ports) == 0 {
		ports = []int32{443}
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	issuers := networkingv1.NetworkPolicyEgressRule{}
	for _, p := range ports {
		issuers.Ports = append(issuers.Ports, tcpPort(p))
	}
	block := &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: issuerExcept(s.PrivateIssuers, s.HostAPIEndpoints)}
	issuers.To = []networkingv1.NetworkPolicyPeer{{IPBlock: block}}
	dns := dnsEgress()
	clients := networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{tcpPort(PortAPIServer)}}
	if len(s.AllowedSourceRanges) > 0 {
		for _, r := range s.AllowedSourceRanges {
			clients.From = append(clients.From, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: r}})
		}
		// The operator's pods reach the internal Service; no other pod of the host does.
		if op := s.OperatorPods; op != nil {
			clients.From = append(clients.From, networkingv1.NetworkPolicyPeer{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: op.Namespace}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: maps.Clone(op.Labels)},
			})
		}
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   typeMeta("networking.k8s.io/v1", "NetworkPolicy"),
		ObjectMeta: s.meta(NameAPIServer, ComponentAPIServer),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: s.selector(ComponentAPIServer)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{clients},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: s.selector(ComponentEtcd)}}},
					Ports: []networkingv1.NetworkPolicyPort{tcpPort(portEtcd)}},
				dns,
				issuers,
			},
		},
	}
}

// IssuerPorts returns the TCP ports of issuer URLs (443 for those without one), for Spec.
func IssuerPorts(issuers []string) []int32 {
	var ports []int32
	for _, is := range issuers {
		u, err := url.Parse(is)
		if err != nil {
			continue
		}
		p := int32(443)
		if n, err := strconv.ParseInt(u.Port(), 10, 32); err == nil && n > 0 {
			p = int32(n)
		}
		ports = append(ports, p)
	}
	return ports
}

func tcpPort(p int32) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromInt32(p))}
}

// EtcdStatefulSet is etcd: one member, its data on a claim of StorageClassName, or on an emptyDir
// (lost with the pod) without one; highly available, three members on claims, started together
// (a member is ready only once a quorum runs), each on its own node.
func (s *Spec) EtcdStatefulSet() *appsv1.StatefulSet {
	m := s.meta(NameEtcd, ComponentEtcd)
	args := etcdArgs(s.Namespace, s.etcdQuota(), s.dataDir())
	env := goEnv(containerEtcd)
	if s.HighAvailability {
		args = etcdHAArgs(s.Namespace, s.etcdQuota(), s.dataDir())
		env = append(env, corev1.EnvVar{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}})
	}
	pod := s.podSpec(ComponentEtcd, []corev1.Container{{
		Name:    containerEtcd,
		Image:   s.Image,
		Command: []string{binDir + "etcd"},
		Args:    args,
		Ports: []corev1.ContainerPort{{Name: "client", ContainerPort: portEtcd, Protocol: corev1.ProtocolTCP},
			{Name: "health", ContainerPort: portEtcdHTTP, Protocol: corev1.ProtocolTCP}},
		Env:       env,
		Resources: s.Etcd,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: etcdDataDir},
			{Name: "pki", MountPath: etcdPKIMount, ReadOnly: true},
		},
		StartupProbe:   httpProbe("/health?serializable=true", portEtcdHTTP, corev1.URISchemeHTTP, 1, 120),
		ReadinessProbe: httpProbe("/health?serializable=true", portEtcdHTTP, corev1.URISchemeHTTP, 5, 3),
		LivenessProbe:  httpProbe("/health?serializable=true&exclude=NOSPACE", portEtcdHTTP, corev1.URISchemeHTTP, 10, 6),
	}})
	pkiSources := []corev1.VolumeProjection{
		secretItems(SecretEtcdServer, "tls.crt", "server.crt", "tls.key", "server.key"),
		secretItems(SecretEtcdCA, "ca.crt", "ca.crt"),
	}
	if s.HighAvailability {
		pkiSources = append(pkiSources, secretItems(SecretEtcdPeer, "tls.crt", "peer.crt", "tls.key", "peer.key"),
			secretItems(SecretEtcdPeerClient, "tls.crt", "peer-client.crt", "tls.key", "peer-client.key"))
	}
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "pki", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr.To[int32](0o440),
		Sources:     pkiSources,
	}}})
	sts := &appsv1.StatefulSet{
		TypeMeta:   typeMeta("apps/v1", "StatefulSet"),
		ObjectMeta: m,
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(s.replicas(ComponentEtcd)),
			ServiceName: NameEtcd,
			Selector:    &metav1.LabelSelector{MatchLabels: s.selector(ComponentEtcd)},
			Template:    corev1.PodTemplateSpec{ObjectMeta: s.podMeta(ComponentEtcd), Spec: pod},
		},
	}
	if s.HighAvailability {
		sts.Spec.ServiceName = NameEtcdPeer
		sts.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	}
	if s.EtcdRestore != nil {
		s.restoreInit(&sts.Spec.Template.Spec, env)
	}
	if s.StorageClassName == "" {
		sts.Spec.Template.Spec.Volumes = append(sts.Spec.Template.Spec.Volumes, corev1.Volume{Name: "data",
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		return stamp(sts)
	}
	size := s.StorageSize
	if size.IsZero() {
		size = DefaultStorageSize
	}
	sts.Spec.VolumeClaimTemplates = []corev1.PersistentVolumeClaim{{
		TypeMeta:   typeMeta("v1", "PersistentVolumeClaim"),
		ObjectMeta: metav1.ObjectMeta{Name: "data", Labels: s.labels(ComponentEtcd)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(s.StorageClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}}
	// The claims go with the StatefulSet (and so with the Cluster's namespace).
	sts.Spec.PersistentVolumeClaimRetentionPolicy = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
		WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
		WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
	}
	return stamp(sts)
}

// Bounds of etcd's quota (etcdQuota).
const (
	emptyDirEtcdQuota int64 = 1 << 30
	minEtcdQuota      int64 = 256 << 20
	maxEtcdQuota      int64 = 8 << 30 // etcd's own advice for the largest database
)

// etcdQuota is etcd's --quota-backend-bytes: three quarters of its claim, the rest left for the
// write-ahead log and etcd's own snapshots (a volume that fills up stops etcd; a database at its
// quota only stops writes, NOSPACE), within [256 MiB, 8 GiB]; 1 GiB on an emptyDir, which has no
// size of its own.
func (s *Spec) etcdQuota() int64 {
	if s.StorageClassName == "" {
		return emptyDirEtcdQuota
	}
	size := s.StorageSize
	if size.IsZero() {
		size = DefaultStorageSize
	}
	return min(max(size.Value()/4*3, minEtcdQuota), maxEtcdQuota)
}

// etcdArgs are etcd's flags: one member, TLS with client certificates of its own CA on the client
// port (the API server's is the only one issued), the peer port on the pod's loopback, plain
// /health on portEtcdHTTP for the kubelet's probes.
func etcdArgs(namespace string, quota int64, dataDir string) []string {
	peer := fmt.Sprintf("http://127.0.0.1:%d", portEtcdPeer)
	return []string{
		"--name=default",
		"--data-dir=" + dataDir,
		fmt.Sprintf("--listen-client-urls=https://0.0.0.0:%d", portEtcd),
		fmt.Sprintf("--advertise-client-urls=https://%s.%s.svc:%d", NameEtcd, namespace, portEtcd),
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		fmt.Sprintf("--listen-metrics-urls=http://0.0.0.0:%d", portEtcdHTTP),
		"--cert-file=" + etcdPKIMount + "/server.crt",
		"--key-file=" + etcdPKIMount + "/server.key",
		"--trusted-ca-file=" + etcdPKIMount + "/ca.crt",
		"--client-cert-auth=true",
		"--log-level=warn",
		"--quota-backend-bytes=" + strconv.FormatInt(quota, 10),
		"--auto-compaction-mode=periodic",
		"--auto-compaction-retention=1h",
	}
}

// dataDir is etcd's --data-dir.
func (s *Spec) dataDir() string {
	if s.EtcdDataDir == "" {
		return etcdDataDir + "/data"
	}
	return etcdDataDir + "/" + s.EtcdDataDir
}

// SecretRestoreToken is the Secret, in a control plane's namespace, with the token its etcd pods
// show a snapshot serve (optional in the pods: gone after the restore, when the init container has
// nothing to do).
const SecretRestoreToken = "restore-token"

// restoreInit adds to etcd's pod the init container that restores s.EtcdRestore into its data
// folder, as the member it is (env: its name), before etcd starts: cmd/etcd-snapshot restore,
// which does nothing once the folder exists.
func (s *Spec) restoreInit(pod *corev1.PodSpec, env []corev1.EnvVar) {
	name, peers, initial := "default", fmt.Sprintf("http://127.0.0.1:%d", portEtcdPeer), fmt.Sprintf("default=http://127.0.0.1:%d", portEtcdPeer)
	if s.HighAvailability {
		f := map[string]string{}
		for _, a := range etcdHAArgs(s.Namespace, 0, "") {
			k, v, _ := strings.Cut(a, "=")
			f[k] = v
		}
		name, peers, initial = f["--name"], f["--initial-advertise-peer-urls"], f["--initial-cluster"]
	}
	const tokenMount = "/etc/etcd/restore"
	c := corev1.Container{
		Name:    "restore",
		Image:   s.Image,
		Command: []string{binDir + "etcd-snapshot"},
		Args: []string{"restore", "--url=" + s.EtcdRestore.URL, "--sha256=" + s.EtcdRestore.SHA256, "--token-file=" + tokenMount + "/token",
			"--ca=" + etcdPKIMount + "/ca.crt", "--data-dir=" + s.dataDir(), "--name=" + name, "--initial-cluster=" + initial, "--initial-advertise-peer-urls=" + peers},
		Env:       env,
		Resources: s.Etcd,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: etcdDataDir},
			{Name: "pki", MountPath: etcdPKIMount, ReadOnly: true},
			{Name: "restore", MountPath: tokenMount, ReadOnly: true},
		},
	}
	harden(&c)
	pod.InitContainers = append(pod.InitContainers, c)
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: "restore", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
		SecretName: SecretRestoreToken, Optional: ptr.To(true), DefaultMode: ptr.To[int32](0o440)}}})
}

// etcdHAArgs are the flags of a member of a highly available etcd: those of etcdArgs with the
// member's name (its pod's), its DNS name on the client and peer ports, the three members of the
// initial cluster, and TLS between the members (certificates of etcd's CA, peers only with the
// peer certificate's name).
func etcdHAArgs(namespace string, quota int64, dataDir string) []string {
	self := fmt.Sprintf("$(POD_NAME).%s.%s.svc", NameEtcdPeer, namespace)
	initial := make([]string, haEtcdMembers)
	for i := range initial {
		initial[i] = fmt.Sprintf("%s-%d=https://%s:%d", NameEtcd, i, etcdMember(namespace, i), portEtcdPeer)
	}
	ha := map[string]string{
		"--name":                        "$(POD_NAME)",
		"--advertise-client-urls":       fmt.Sprintf("https://%s:%d", self, portEtcd),
		"--listen-peer-urls":            fmt.Sprintf("https://0.0.0.0:%d", portEtcdPeer),
		"--initial-advertise-peer-urls": fmt.Sprintf("https://%s:%d", self, portEtcdPeer),
		"--initial-cluster":             strings.Join(initial, ","),
	}
	var args []string
	for _, a := range etcdArgs(namespace, quota, dataDir) {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := ha[name]; ok {
			a = name + "=" + v
		}
		args = append(args, a)
	}
	return append(args,
		"--initial-cluster-state=new",
		"--initial-cluster-token="+namespace,
		"--peer-cert-file="+etcdPKIMount+"/peer.crt",
		"--peer-key-file="+etcdPKIMount+"/peer.key",
		"--peer-client-cert-file="+etcdPKIMount+"/peer-client.crt",
		"--peer-client-key-file="+etcdPKIMount+"/peer-client.key",
		"--peer-trusted-ca-file="+etcdPKIMount+"/ca.crt",
		"--peer-client-cert-auth=true",
		"--peer-cert-allowed-cn="+etcdPeerCN,
	)
}

// APIServerDeployment runs kube-apiserver and kube-controller-manager in one pod. A rollout starts
// the new pod before the old one goes (maxSurge 100 %, maxUnavailable 0): the API stays up; the
// controller managers elect a leader so that two never act at once.
func (s *Spec) APIServerDeployment() *appsv1.Deployment {
	m := s.meta(NameAPIServer, ComponentAPIServer)
	pod := s.podSpec(ComponentAPIServer, []corev1.Container{
		{
			Name:      containerAPIServer,
			Image:     s.Image,
			Command:   []string{binDir + "kube-apiserver"},
			Args:      s.apiServerArgs(),
			Env:       append([]corev1.EnvVar{{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}}}, goEnv(containerAPIServer)...),
			Ports:     []corev1.ContainerPort{{Name: "https", ContainerPort: PortAPIServer, Protocol: corev1.ProtocolTCP}},
			Resources: s.APIServer,
			VolumeMounts: []corev1.VolumeMount{
				{Name: "pki", MountPath: pkiMount, ReadOnly: true},
				{Name: "authn", MountPath: authnMount, ReadOnly: true},
				{Name: "tmp", MountPath: tmpMount},
			},
			// No initial delay: the startup probe asks every second, so a new API server is used as
			// soon as it is ready, not after a fixed wait.
			StartupProbe:   httpProbe("/livez", PortAPIServer, corev1.URISchemeHTTPS, 1, 180),
			ReadinessProbe: httpProbe("/readyz", PortAPIServer, corev1.URISchemeHTTPS, 2, 3),
			LivenessProbe:  httpProbe("/livez", PortAPIServer, corev1.URISchemeHTTPS, 10, 6),
		},
		{
			Name:      containerKCM,
			Image:     s.Image,
			Command:   []string{binDir + "kube-controller-manager"},
			Args:      controllerManagerArgs(s.ServiceCIDR),
			Env:       goEnv(containerKCM),
			Ports:     []corev1.ContainerPort{{Name: "kcm", ContainerPort: portKCM, Protocol: corev1.ProtocolTCP}},
			Resources: s.ControllerManager,
			VolumeMounts: []corev1.VolumeMount{
				{Name: "kcm", MountPath: kcmMount, ReadOnly: true},
				{Name: "tmp", MountPath: tmpMount},
			},
			StartupProbe:  httpProbe("/healthz", portKCM, corev1.URISchemeHTTPS, 1, 180),
			LivenessProbe: httpProbe("/healthz", portKCM, corev1.URISchemeHTTPS, 10, 6),
		},
	})
	if s.Audit {
		pod.Containers = append(pod.Containers, s.auditSidecar())
		harden(&pod.Containers[len(pod.Containers)-1])
		pod.Containers[0].VolumeMounts = append(pod.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: "audit-policy", MountPath: auditPolicyMount, ReadOnly: true},
			corev1.VolumeMount{Name: "audit-log", MountPath: auditLogMount})
		pod.Volumes = append(pod.Volumes,
			corev1.Volume{Name: "audit-policy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: NameAuditPolicy}}}},
			corev1.Volume{Name: "audit-log", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &auditVolumeLimit}}})
	}
	// kube-apiserver is a sidecar (a restartable init container): the controller manager starts
	// only once the API server's startup probe has passed. Started together, it would fail to reach
	// the API server, exit, and wait out the kubelet's crash-loop backoff.
	api := pod.Containers[0]
	api.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	pod.InitContainers, pod.Containers = []corev1.Container{api}, pod.Containers[1:]
	pki := []corev1.VolumeProjection{
		secretItems(SecretCA, "ca.crt", "ca.crt"),
		secretItems(SecretServing, "tls.crt", "apiserver.crt", "tls.key", "apiserver.key"),
		secretItems(SecretServiceAcct, "sa.key", "sa.key", "sa.pub", "sa.pub"),
		secretItems(SecretEtcdClient, "tls.crt", "etcd-client.crt", "tls.key", "etcd-client.key", "ca.crt", "etcd-ca.crt"),
	}
	if s.Encryption != "" {
		pki = append(pki, secretItems(SecretEncryption, encryption.ConfigFile, encryption.ConfigFile))
	}
	pod.Volumes = append(pod.Volumes,
		corev1.Volume{Name: "pki", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o440), Sources: pki,
		}}},
		corev1.Volume{Name: "authn", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: NameAuthn}}}},
		corev1.Volume{Name: "kcm", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o440),
			Sources: []corev1.VolumeProjection{
				secretItems(SecretCA, "ca.crt", "ca.crt", "ca.key", "ca.key"),
				secretItems(SecretServiceAcct, "sa.key", "sa.key"),
				secretItems(SecretKCMKubeconf, "kubeconfig", "kubeconfig"),
			},
		}}},
	)
	podMeta := s.podMeta(ComponentAPIServer)
	if s.Certificates != "" {
		podMeta.Annotations[AnnotationCertificates] = s.Certificates
	}
	if s.RestoredMark != "" {
		podMeta.Annotations[AnnotationRestored] = s.RestoredMark
	}
	if s.Encryption != "" {
		podMeta.Annotations[AnnotationEncryption] = s.Encryption
	}
	return stamp(&appsv1.Deployment{
		TypeMeta:   typeMeta("apps/v1", "Deployment"),
		ObjectMeta: m,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(s.replicas(ComponentAPIServer)),
			Selector: &metav1.LabelSelector{MatchLabels: s.selector(ComponentAPIServer)},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromString("100%")), MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			}},
			Template: corev1.PodTemplateSpec{ObjectMeta: podMeta, Spec: pod},
		},
	})
}

// apiServerArgs are kube-apiserver's flags: those of a local cluster's (controlplane) with the
// files of the pod's mounts and etcd over TLS.
func (s *Spec) apiServerArgs() []string {
	files := controlplane.APIServerFiles{
		ServingCert: pkiMount + "/apiserver.crt", ServingKey: pkiMount + "/apiserver.key",
		ClientCA: pkiMount + "/ca.crt", ServiceAccountKey: pkiMount + "/sa.pub", ServiceAccountSigningKey: pkiMount + "/sa.key",
		AuthenticationConfig: authnMount + "/" + authnKey,
	}
	if s.Encryption != "" {
		files.EncryptionConfig = pkiMount + "/" + encryption.ConfigFile
	}
	args := controlplane.APIServerArgs(files, s.ServiceCIDR)
	if s.Audit {
		args = append(args, controlplane.AuditArgs(auditPolicyMount+"/"+auditPolicyKey, auditLogMount+"/"+auditLogFile)...)
	}
	return append(args,
		"--etcd-servers="+s.etcdServers(),
		"--etcd-cafile="+pkiMount+"/etcd-ca.crt",
		"--etcd-certfile="+pkiMount+"/etcd-client.crt",
		"--etcd-keyfile="+pkiMount+"/etcd-client.key",
		"--bind-address=0.0.0.0",
		"--secure-port="+strconv.Itoa(PortAPIServer),
		// The pod's address in the hosted cluster's kubernetes Service; the lease reconciler keeps
		// it right while a rollout runs two API servers.
		"--advertise-address=$(POD_IP)",
		"--endpoint-reconciler-type=lease",
		"--watch-cache=false",
		// A rollout (blue/green: a renewal, an image, resources) deletes the old pod once the new
		// one is ready: the old API server keeps serving while the Services stop sending it new
		// connections, and only then closes its listener, so no client sees a refused connection.
		"--shutdown-delay-duration="+shutdownDelay.String(),
	)
}

// shutdownDelay is how long an API server being stopped keeps serving (--shutdown-delay-duration);
// the pod's grace period leaves it time to finish its requests after that.
const shutdownDelay = 10 * time.Second

// controllerManagerArgs are kube-controller-manager's flags: those of a local cluster's, with
// leader election (a rollout runs two for a moment) and its health port open to the kubelet.
func controllerManagerArgs(serviceCIDR string) []string {
	kubeconfig := kcmMount + "/kubeconfig"
	return append(controlplane.ControllerManagerArgs(controlplane.ControllerManagerFiles{
		Kubeconfig: kubeconfig, CACert: kcmMount + "/ca.crt", CAKey: kcmMount + "/ca.key", ServiceAccountKey: kcmMount + "/sa.key",
	}, serviceCIDR),
		"--leader-elect=true",
		// A lease that rides out a busy node: with kube-controller-manager's 15 s/10 s/2 s, a
		// renewal late by 10 s (seen with ten control planes starting on two cores) makes it exit
		// and restart. The price: in a rollout the new one waits up to a minute to take over.
		"--leader-elect-lease-duration=60s",
		"--leader-elect-renew-deadline=40s",
		"--leader-elect-retry-period=10s",
		"--bind-address=0.0.0.0",
		"--secure-port="+strconv.Itoa(portKCM),
		"--cert-dir="+tmpMount,
	)
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

// goEnv sets a container's Go memory limit to 90 % of its memory limit... as the kubelet gives it:
// GOMEMLIMIT from the limit (bytes), GOGC 50 as on the local backend.
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
