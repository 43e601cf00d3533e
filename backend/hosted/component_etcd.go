package hosted

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"strconv"
	"strings"
)

// etcdComponent applies etcd's StatefulSet (a change rolls it in its turn, bounded rolling) and
// reports whether etcd is healthy at the planned image: what the API servers wait for.
type etcdComponent struct{}

func (etcdComponent) name() string { return "etcd" }

func (etcdComponent) step(ctx context.Context, sc *scope) (result, error) {
	out, err := sc.h.applyPlanned(ctx, sc.s.EtcdStatefulSet(), sc.turn)
	if err != nil {
		return result{}, err
	}
	sc.etcdOut = out
	if out == workloadWaits {
		return result{waiting: "etcd waits for its turn to roll", retry: rollRetry}, nil
	}
	if !etcdReady(ctx, sc.h, sc.s) {
		return result{waiting: fmt.Sprintf("etcd (StatefulSet %s/%s) is not ready", sc.s.Namespace, NameEtcd)}, nil
	}
	return result{}, nil
}

// turn reports whether the control plane may roll now (takeTurn): a restore rolls at once, it is
// not one of a fleet's changes.
func (sc *scope) turn() bool {
	return sc.ps.Restore != nil || sc.b.takeTurn(sc.cl.UID)
}

// etcdReplicas is etcd's replicas: none while hibernated.
func (s *Spec) etcdReplicas() int32 {
	if s.Hibernated {
		return 0
	}
	return s.replicas(ComponentEtcd)
}

// etcdReady reports whether etcd's StatefulSet has a ready replica.
func etcdReady(ctx context.Context, h *host, s *Spec) bool {
	sts := &appsv1.StatefulSet{}
	return h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts) == nil && sts.Status.ReadyReplicas > 0
}

// etcdRolledTo reports whether every etcd member of s runs image, rolled out and ready: an
// upgrade's API servers roll only then.
func etcdRolledTo(ctx context.Context, h *host, s *Spec, image string) bool {
	sts := &appsv1.StatefulSet{}
	if h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts) != nil {
		return false
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == containerEtcd && c.Image != image {
			return false
		}
	}
	return statefulSetDone(sts)
}

// statefulSetDone reports whether sts runs its current template on every replica, ready.
func statefulSetDone(sts *appsv1.StatefulSet) bool {
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	return sts.Status.ObservedGeneration >= sts.Generation && sts.Status.ReadyReplicas >= want &&
		(sts.Status.UpdateRevision == "" || sts.Status.UpdateRevision == sts.Status.CurrentRevision)
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
		StartupProbe:   httpProbe(etcdLenientHealth, portEtcdHTTP, corev1.URISchemeHTTP, 1, 120),
		ReadinessProbe: httpProbe(etcdQuorumHealth, portEtcdHTTP, corev1.URISchemeHTTP, 5, 3),
		LivenessProbe:  httpProbe(etcdLenientHealth+"&exclude=NOSPACE", portEtcdHTTP, corev1.URISchemeHTTP, 10, 6),
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
			Replicas:    ptr.To(s.etcdReplicas()),
			ServiceName: NameEtcd,
			Selector:    &metav1.LabelSelector{MatchLabels: s.selector(ComponentEtcd)},
			Template:    corev1.PodTemplateSpec{ObjectMeta: s.podMeta(ComponentEtcd), Spec: pod},
		},
	}
	if s.Trust != "" {
		// etcd reads its trusted CAs only when it starts: each phase of a CA rotation rolls it.
		sts.Spec.Template.Annotations[AnnotationTrust] = s.Trust
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

// The health checks of an etcd member (its plain-HTTP port; every etcd the images carry, 3.4 on,
// answers both):
//   - etcdQuorumHealth, the readiness check: etcd's /health without serializable, which fails
//     when the member knows no leader or cannot complete a linearizable read (one cut off from its
//     peers, one of a cluster that lost its quorum) and on an alarm (NOSPACE: a full etcd takes no
//     writes). A ready member is in the quorum: the PodDisruptionBudget counts only those, so a
//     drain never takes a member of a quorum that is down to its last ones, and EtcdHealthy
//     (etcdmembers.go) reads the members' state from their readiness.
//   - etcdLenientHealth, the startup and liveness checks: serializable (the member's own state,
//     no leader needed): a member waiting for its peers, or cut off from them, is not restarted
//     in a loop (a restart would not bring the peers back), and a full one (NOSPACE excluded from
//     liveness) is not killed either.
const (
	etcdQuorumHealth  = "/health"
	etcdLenientHealth = "/health?serializable=true"
)

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
// folder, as the member it is (env: its name), of a new etcd cluster (etcdClusterToken), before
// etcd starts: cmd/etcd-snapshot restore, which does nothing once the folder exists.
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
			"--ca=" + etcdPKIMount + "/ca.crt", "--data-dir=" + s.dataDir(), "--name=" + name, "--initial-cluster=" + initial, "--initial-advertise-peer-urls=" + peers,
			"--initial-cluster-token=" + etcdClusterToken(s.Namespace, s.EtcdDataDir)},
		Env:       env,
		Resources: s.Etcd,
		VolumeMounts: []corev1.VolumeMount{
			{Name: "data", MountPath: etcdDataDir},
			{Name: "pki", MountPath: etcdPKIMount, ReadOnly: true},
			{Name: "restore", MountPath: tokenMount, ReadOnly: true},
		},
		// Why a restore fails (its last words) is in the pod's status: the restore's state names it.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
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
