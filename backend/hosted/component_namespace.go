package hosted

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/authconfig"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// namespaceComponent makes the control plane's namespace and what the later components need in
// it before they start: the authentication configuration, the Services, the NetworkPolicies, the
// audit policy and, when highly available, the PriorityClass, etcd's peer Service and the
// PodDisruptionBudgets (Spec.Objects).
type namespaceComponent struct{}

func (namespaceComponent) name() string { return "namespace" }

func (namespaceComponent) step(ctx context.Context, sc *scope) (result, error) {
	b, h, s := sc.b, sc.h, sc.s
	if _, err := h.applyPlanned(ctx, s.NamespaceObject(), nil); err != nil {
		return result{}, err
	}
	b.mu.Lock()
	b.where[sc.cl.UID] = sc.ps.seedRef()
	b.mu.Unlock()
	sc.release() // the namespace made, the control plane counts for the others (hasControlPlane)
	sc.release = func() {}
	if err := h.createOnce(ctx, b.authnConfigMap(s)); err != nil {
		return result{}, err
	}
	if s.HighAvailability {
		if err := h.ensurePriorityClass(ctx, b.opts.Logger); err != nil {
			return result{}, err
		}
	}
	for _, obj := range s.Objects() {
		if _, err := h.applyPlanned(ctx, obj, nil); err != nil {
			return result{}, err
		}
	}
	return result{}, nil
}

// createOnce creates obj unless the host's cache (or, for an object it does not hold, the API
// server) has it: its content is then someone else's to keep (SetJWTAuthenticators').
func (h *host) createOnce(ctx context.Context, obj client.Object) error {
	if h.memo.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object)) == nil {
		return nil
	}
	return h.createIfMissing(ctx, obj)
}

// authnConfigMap is the authentication configuration the API server starts with: no issuer.
func (b *Backend) authnConfigMap(s *Spec) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: s.meta(NameAuthn, ComponentAPIServer),
		Data: map[string]string{authnKey: authconfig.Empty}}
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
