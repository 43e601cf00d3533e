package hosted

import (
	"context"
	"fmt"
	"maps"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// frontDoorComponent makes the front door of a control plane whose ProviderConfig sets
// spec.hibernation (Spec.FrontDoor): a Deployment of cmd/front-door that Service
// apiserver-external selects instead of the API servers, so that the endpoint answers while the
// control plane is hibernated and its first connection wakes it; the door reports its use in an
// annotation of Lease front-door (backend/frontdoor.Usage), which the host's cache watches. Its
// ServiceAccount may patch that Lease and nothing else (a RoleBinding to the ClusterRole
// ClusterRoleFrontDoor, which names the Lease). Without spec.hibernation a door that exists is
// scaled to zero (the external Service selects the API servers again).
type frontDoorComponent struct{}

func (frontDoorComponent) name() string { return "front-door" }

func (frontDoorComponent) step(ctx context.Context, sc *scope) (result, error) {
	h, s := sc.h, sc.s
	door := ""
	if s.FrontDoor && h.internal {
		door = fmt.Sprintf("https://%s.%s.svc:%d", NameExternal, s.Namespace, PortService)
	}
	sc.b.mu.Lock()
	sc.b.doors[sc.cl.UID] = door
	sc.b.mu.Unlock()
	if !s.FrontDoor {
		dep := &appsv1.Deployment{}
		err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameFrontDoor}, dep)
		if apierrors.IsNotFound(err) {
			return result{}, nil
		}
		if err != nil {
			return result{}, err
		}
		_, err = h.applyPlanned(ctx, s.FrontDoorDeployment(), nil)
		return result{}, err
	}
	if _, made := h.owned.Load("front-door/" + s.Namespace); !made {
		if err := h.ensureFrontDoorRole(ctx, sc.b.opts.Logger); err != nil {
			return result{}, err
		}
		for _, obj := range []client.Object{s.FrontDoorServiceAccount(), s.FrontDoorRoleBinding(), s.FrontDoorLease()} {
			if err := h.createOnce(ctx, obj); err != nil {
				return result{}, err
			}
		}
		h.owned.Store("front-door/"+s.Namespace, true) // made: not read again at every Ensure
	}
	for _, obj := range []client.Object{s.FrontDoorNetworkPolicy(), s.FrontDoorDeployment()} {
		if _, err := h.applyPlanned(ctx, obj, nil); err != nil {
			return result{}, err
		}
	}
	if !s.DoorServes {
		// The endpoint selects the API servers until the door serves; its status notifies.
		return result{waiting: fmt.Sprintf("the front door (Deployment %s/%s) is not ready", s.Namespace, NameFrontDoor)}, nil
	}
	return result{}, nil
}

// ComponentFrontDoor is the front door's component label.
const ComponentFrontDoor = "front-door"

// NameFrontDoor names the front door's Deployment, ServiceAccount, RoleBinding, NetworkPolicy
// and Lease.
const NameFrontDoor = "front-door"

// ClusterRoleFrontDoor may get and patch the Lease front-door and list EndpointSlices: bound in a
// control plane's namespace to its door's ServiceAccount, it lets the door report its use there
// and find the API server pods of a waking control plane (it dials one as soon as it is ready,
// before its Service reaches it), nothing else. deploy/hosted holds it; the backend makes it where
// it is missing, and brings an earlier version's rules up to date, where its operator may (a
// platform whose operator is bound to cluster-admin, as openMCP's deployment does).
const ClusterRoleFrontDoor = "cluster-provider-front-door"

// FrontDoorClusterRole is ClusterRoleFrontDoor.
func FrontDoorClusterRole() *rbacv1.ClusterRole {
	return &rbacv1.ClusterRole{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"),
		ObjectMeta: metav1.ObjectMeta{Name: ClusterRoleFrontDoor, Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, ResourceNames: []string{NameFrontDoor}, Verbs: []string{"get", "patch"}},
			{APIGroups: []string{discoveryv1.GroupName}, Resources: []string{"endpointslices"}, Verbs: []string{"list"}},
		},
	}
}

// ensureFrontDoorRole makes ClusterRoleFrontDoor unless it exists, and updates an earlier
// version's rules (read once per host). An operator that may not update it (deploy/hosted, whose
// file holds the role) says so and goes on: its doors then reach woken API servers through their
// Service only, seconds later.
func (h *host) ensureFrontDoorRole(ctx context.Context, log logr.Logger) error {
	if _, ok := h.owned.Load("clusterrole/" + ClusterRoleFrontDoor); ok {
		return nil
	}
	want, have := FrontDoorClusterRole(), &rbacv1.ClusterRole{}
	err := h.client.Get(ctx, client.ObjectKey{Name: ClusterRoleFrontDoor}, have)
	switch {
	case apierrors.IsNotFound(err):
		err = h.createIfMissing(ctx, want)
	case err == nil && !equality.Semantic.DeepEqual(have.Rules, want.Rules):
		have.Rules = want.Rules
		if err = h.client.Update(ctx, have); apierrors.IsForbidden(err) {
			log.Info("The front doors' ClusterRole is an earlier version's and this operator may not update it: apply deploy/hosted/hosted_role.yaml; until then a front door reaches a woken API server through its Service only, seconds later",
				"clusterRole", ClusterRoleFrontDoor, "host", h.name)
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("the front doors' ClusterRole %s (deploy/hosted/hosted_role.yaml): %w", ClusterRoleFrontDoor, err)
	}
	h.owned.Store("clusterrole/"+ClusterRoleFrontDoor, true)
	return nil
}

// FrontDoorServiceAccount is the door's identity in the host: it may patch its Lease only.
func (s *Spec) FrontDoorServiceAccount() *corev1.ServiceAccount {
	return &corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: s.meta(NameFrontDoor, ComponentFrontDoor),
		AutomountServiceAccountToken: ptr.To(false)}
}

// FrontDoorRoleBinding binds ClusterRoleFrontDoor to the door's ServiceAccount in the namespace.
func (s *Spec) FrontDoorRoleBinding() *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "RoleBinding"),
		ObjectMeta: s.meta(NameFrontDoor, ComponentFrontDoor),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleFrontDoor},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: NameFrontDoor, Namespace: s.Namespace}},
	}
}

// FrontDoorLease is where the door pods report their use, each in an annotation of its own.
func (s *Spec) FrontDoorLease() *coordinationv1.Lease {
	return &coordinationv1.Lease{TypeMeta: typeMeta("coordination.k8s.io/v1", "Lease"), ObjectMeta: s.meta(NameFrontDoor, ComponentFrontDoor)}
}

// portFrontDoorHealth is the door's health check (plain HTTP GET /healthz).
const portFrontDoorHealth = 8081

// frontDoorMemory is the door's memory limit: it copies bytes between sockets.
var frontDoorMemory = resource.MustParse("64Mi")

// FrontDoorDeployment runs the door: one pod, two on different nodes when highly available (a
// door is on every client's way); none without Spec.FrontDoor.
func (s *Spec) FrontDoorDeployment() *appsv1.Deployment {
	replicas := s.replicas(ComponentFrontDoor)
	if !s.FrontDoor {
		replicas = 0
	}
	c := corev1.Container{
		Name:  containerFrontDoor,
		Image: s.Image,
		Command: []string{binDir + "front-door",
			fmt.Sprintf("--listen=:%d", PortAPIServer), fmt.Sprintf("--health=:%d", portFrontDoorHealth),
			fmt.Sprintf("--upstream=%s.%s.svc:%d", NameAPIServer, s.Namespace, PortService),
			"--lease=" + NameFrontDoor, "--endpoints=" + NameAPIServer, "--wake-timeout=" + wakeTimeout.String()},
		Env: append([]corev1.EnvVar{
			{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}},
			{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		}, goEnv(containerFrontDoor)...),
		Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: PortAPIServer, Protocol: corev1.ProtocolTCP},
			{Name: "health", ContainerPort: portFrontDoorHealth, Protocol: corev1.ProtocolTCP}},
		// Its own port: a probe of the endpoint would count as a client and keep it awake.
		ReadinessProbe: httpProbe("/healthz", portFrontDoorHealth, corev1.URISchemeHTTP, 2, 3),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: frontDoorMemory},
		},
	}
	pod := s.podSpec(ComponentFrontDoor, []corev1.Container{c})
	pod.ServiceAccountName = NameFrontDoor
	pod.AutomountServiceAccountToken = ptr.To(true) // its Lease, through the host's API server
	return &appsv1.Deployment{
		TypeMeta:   typeMeta("apps/v1", "Deployment"),
		ObjectMeta: s.meta(NameFrontDoor, ComponentFrontDoor),
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: s.selector(ComponentFrontDoor)},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxSurge: ptr.To(intstr.FromString("100%")), MaxUnavailable: ptr.To(intstr.FromInt32(0))}},
			Template: corev1.PodTemplateSpec{ObjectMeta: s.podMeta(ComponentFrontDoor), Spec: pod},
		},
	}
}

// FrontDoorNetworkPolicy lets the clients of the API server in to the door (the same sources as
// APIServerNetworkPolicy's), and the door out to its API servers, to DNS and to the host's API
// server (its Lease).
func (s *Spec) FrontDoorNetworkPolicy() *networkingv1.NetworkPolicy {
	hostAPI := networkingv1.NetworkPolicyEgressRule{}
	for _, ip := range s.HostAPIEndpoints {
		hostAPI.To = append(hostAPI.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: ip + "/32"}})
	}
	egress := []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: s.selector(ComponentAPIServer)}}},
			Ports: []networkingv1.NetworkPolicyPort{tcpPort(PortAPIServer)}},
		dnsEgress(),
	}
	if len(hostAPI.To) > 0 {
		egress = append(egress, hostAPI)
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   typeMeta("networking.k8s.io/v1", "NetworkPolicy"),
		ObjectMeta: s.meta(NameFrontDoor, ComponentFrontDoor),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: s.selector(ComponentFrontDoor)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{s.clientIngress(),
				{Ports: []networkingv1.NetworkPolicyPort{tcpPort(portFrontDoorHealth)}}}, // the kubelet's probe
			Egress: egress,
		},
	}
}

// clientIngress is who may open a connection to the endpoint (the API servers, or the front door
// in front of them): anyone (the API server authenticates them), or with AllowedSourceRanges
// those and the operator's pods.
func (s *Spec) clientIngress() networkingv1.NetworkPolicyIngressRule {
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
	return clients
}
