package hosted

import (
	"context"
	"fmt"

	"github.com/openmcp-local/cluster-provider/backend/controlplane"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"net/netip"
	"net/url"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"slices"
	"strconv"
	"time"
)

// apiServerComponent applies the API server's Deployment (kube-apiserver, the controller manager
// and the audit sidecar). It depends on etcd: a new Deployment is made once etcd serves (started
// before, the API server gives up on etcd after 20 s and the kubelet's crash-loop backoff, up to
// 5 minutes, would delay it long after etcd is up), and a new image (an upgrade, an image
// refresh) rolls only once every etcd member runs the new image, ready: etcd first. The
// controller manager's container keeps its image through that roll, and takes the new one only
// once every API server runs it, ready (heldControllerManager): a controller manager is never
// newer than an API server. Any other change (certificates, keys, resources) applies whatever
// etcd does.
type apiServerComponent struct{}

func (apiServerComponent) name() string { return "apiserver" }

func (apiServerComponent) step(ctx context.Context, sc *scope) (result, error) {
	h, s := sc.h, sc.s
	dep := &appsv1.Deployment{}
	err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep)
	switch {
	case apierrors.IsNotFound(err):
		if !etcdReady(ctx, h, s) {
			sc.apiGated = true
			return result{waiting: "the API server waits for etcd"}, nil
		}
	case err != nil:
		return result{}, err
	case apiServerImage(dep) != s.Image && !etcdRolledTo(ctx, h, s, s.Image):
		sc.apiGated = true
		return result{waiting: fmt.Sprintf("the API server waits for etcd to run %s", s.Image)}, nil
	default:
		s.ControllerManagerImage = heldControllerManager(ctx, h, s, dep)
	}
	out, err := h.applyPlanned(ctx, s.APIServerDeployment(), sc.turn)
	if err != nil {
		return result{}, err
	}
	sc.apiOut = out
	return result{}, nil
}

// apiServerImage is the image of the kube-apiserver container of dep.
func apiServerImage(dep *appsv1.Deployment) string {
	for _, c := range append(dep.Spec.Template.Spec.InitContainers, dep.Spec.Template.Spec.Containers...) {
		if c.Name == containerAPIServer {
			return c.Image
		}
	}
	return ""
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

// Workloads are etcd's StatefulSet and the API server's Deployment.
func (s *Spec) Workloads() []client.Object {
	return []client.Object{s.EtcdStatefulSet(), s.APIServerDeployment()}
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
	clients := s.clientIngress()
	if s.FrontDoor && len(clients.From) > 0 {
		// The clients come through the front door.
		clients.From = append(clients.From, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: s.selector(ComponentFrontDoor)}})
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
			Image:     s.controllerManagerImage(),
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
		s.addAudit(&pod)
	}
	// kube-apiserver is a sidecar (a restartable init container): the controller manager starts
	// only once the API server's startup probe has passed. Started together, it would fail to reach
	// the API server, exit, and wait out the kubelet's crash-loop backoff.
	api := pod.Containers[0]
	api.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	pod.InitContainers, pod.Containers = []corev1.Container{api}, pod.Containers[1:]
	pod.Volumes = append(pod.Volumes, s.apiServerVolumes()...)
	podMeta := s.podMeta(ComponentAPIServer)
	if s.Certificates != "" {
		podMeta.Annotations[AnnotationCertificates] = s.Certificates
	}
	if s.Trust != "" {
		podMeta.Annotations[AnnotationTrust] = s.Trust
	}
	if s.RestoredMark != "" {
		podMeta.Annotations[AnnotationRestored] = s.RestoredMark
	}
	if s.Encryption != "" {
		podMeta.Annotations[AnnotationEncryption] = s.Encryption
	}
	replicas := s.replicas(ComponentAPIServer)
	if s.APIServersStopped || s.Hibernated {
		replicas = 0
	}
	return stamp(&appsv1.Deployment{
		TypeMeta:   typeMeta("apps/v1", "Deployment"),
		ObjectMeta: m,
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
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
		RootCA: kcmMount + "/ca-bundle.crt",
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

// addAudit adds the audit sidecar (Spec.Audit), and the audit policy and log volumes, to the API
// server's pod, whose first container is kube-apiserver.
func (s *Spec) addAudit(pod *corev1.PodSpec) {
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

// apiServerVolumes are the API server's pod's volumes of certificates, keys and configuration.
func (s *Spec) apiServerVolumes() []corev1.Volume {
	pki := []corev1.VolumeProjection{
		secretItems(SecretCA, "ca.crt", "ca.crt"),
		secretItems(SecretServing, "tls.crt", "apiserver.crt", "tls.key", "apiserver.key"),
		secretItems(SecretServiceAcct, "sa.key", "sa.key", "sa.pub", "sa.pub"),
		secretItems(SecretEtcdClient, "tls.crt", "etcd-client.crt", "tls.key", "etcd-client.key", "ca.crt", "etcd-ca.crt"),
	}
	if s.Encryption != "" {
		pki = append(pki, secretItems(SecretEncryption, encryption.ConfigFile, encryption.ConfigFile))
	}
	return []corev1.Volume{
		corev1.Volume{Name: "pki", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o440), Sources: pki,
		}}},
		corev1.Volume{Name: "authn", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: NameAuthn}}}},
		corev1.Volume{Name: "kcm", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			DefaultMode: ptr.To[int32](0o440),
			Sources: []corev1.VolumeProjection{
				// The signing CA signs (its certificate alone), the trust bundle goes to every
				// namespace (kube-root-ca.crt): during a CA rotation, the old and the new CA.
				secretItems(SecretCA, caKeySigning, "ca.crt", caKeyKey, "ca.key", caKeyBundle, "ca-bundle.crt"),
				secretItems(SecretServiceAcct, "sa.key", "sa.key"),
				secretItems(SecretKCMKubeconf, "kubeconfig", "kubeconfig"),
			},
		}}},
	}
}
