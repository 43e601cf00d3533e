package hosted

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend"
)

// TestHighAvailability: a ProviderConfig's highAvailability makes a new Cluster's control plane
// highly available, recorded: the PriorityClass, budgets, peer Service and peer certificate are
// made; the members' certificates name every member; memory is requested as much as limited; a
// quorum of members is enough to serve, and the Cluster says when it is degraded; the
// ProviderConfig turned single later leaves it highly available, and new Clusters single.
func TestHighAvailability(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.StorageClassName = "standard"
	h.pc.Spec.Hosted.HighAvailability = true
	cl := newCluster("ha")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	assert.True(t, record(t, cl).HighAvailability)

	pcl := get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane)
	assert.Equal(t, int32(priorityControlPlane), pcl.Value)
	for _, name := range []string{NameEtcd, NameAPIServer} {
		pdb := get(t, &policyv1.PodDisruptionBudget{}, ns, name)
		assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MaxUnavailable)
	}
	get(t, &corev1.Service{}, ns, NameEtcdPeer)
	for _, name := range []string{SecretEtcdPeer, SecretEtcdServer} {
		sec := get(t, &corev1.Secret{}, ns, name)
		cert, err := certutil.ParseCertsPEM(sec.Data["tls.crt"])
		require.NoError(t, err)
		for i := range 3 {
			assert.NoError(t, cert[0].VerifyHostname(fmt.Sprintf("etcd-%d.etcd-peer.%s.svc", i, ns)), name)
		}
	}
	peerClient := get(t, &corev1.Secret{}, ns, SecretEtcdPeerClient)
	cert, err := certutil.ParseCertsPEM(peerClient.Data["tls.crt"])
	require.NoError(t, err)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert[0].ExtKeyUsage)
	assert.Equal(t, etcdPeerCN, cert[0].Subject.CommonName, "the only name etcd takes as a peer")
	assert.Empty(t, cert[0].DNSNames, "etcd would check names against the peer's address, which a network may translate")
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	assert.Equal(t, int32(3), *sts.Spec.Replicas)
	etcd := sts.Spec.Template.Spec.Containers[0]
	assert.Equal(t, etcd.Resources.Limits[corev1.ResourceMemory], etcd.Resources.Requests[corev1.ResourceMemory], "memory requested as limited")

	// One member ready is no quorum; two are.
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 3, ReadyReplicas: 1}
	require.NoError(t, env.Client.Status().Update(t.Context(), sts))
	require.Eventually(t, func() bool {
		return strings.Contains(h.ensure(t, cl).Message, "has no quorum: 1 of 3 members ready")
	}, 10*time.Second, 20*time.Millisecond)
	sts = get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	sts.Status.ReadyReplicas = 2
	require.NoError(t, env.Client.Status().Update(t.Context(), sts))
	require.Eventually(t, func() bool {
		h.ensure(t, cl)
		return env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: NameAPIServer}, &appsv1.Deployment{}) == nil
	}, 10*time.Second, 20*time.Millisecond, "the API servers start once etcd has a quorum")
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	assert.Equal(t, int32(2), *dep.Spec.Replicas)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 1, ReadyReplicas: 1}
	require.NoError(t, env.Client.Status().Update(t.Context(), dep))
	require.Eventually(t, func() bool {
		st := h.ensure(t, cl)
		return st.Ready && strings.Contains(st.Message, "degraded: 2 of 3 etcd members and 1 of 2 API servers ready")
	}, 10*time.Second, 20*time.Millisecond, "a quorum and an API server serve, degraded")

	// The ProviderConfig turned single: this control plane stays highly available; a new one is single.
	h.pc.Spec.Hosted.HighAvailability = false
	h.ensure(t, cl)
	assert.Equal(t, int32(3), *get(t, &appsv1.StatefulSet{}, ns, NameEtcd).Spec.Replicas)
	other := newCluster("single")
	h.ensure(t, other)
	assert.False(t, record(t, other).HighAvailability)
	assert.Equal(t, int32(1), *get(t, &appsv1.StatefulSet{}, NamespaceFor(other.UID), NameEtcd).Spec.Replicas)
	err = env.Client.Get(t.Context(), client.ObjectKey{Namespace: NamespaceFor(other.UID), Name: NameEtcd}, &policyv1.PodDisruptionBudget{})
	assert.True(t, apierrors.IsNotFound(err), "a single control plane has no budget (it would block every drain): %v", err)
}

// TestPriorityClassReplaced: the PriorityClass an earlier version made (its label, no
// preemptionPolicy: the API server defaults PreemptLowerPriority) is replaced once by one that
// never preempts; a class of that name that is not the operator's is never touched, and a highly
// available control plane is refused while it would preempt (with the reason and what to do); one
// that is already as planned is used as it is.
func TestPriorityClassReplaced(t *testing.T) {
	ctx := t.Context()
	key := client.ObjectKey{Name: PriorityClassControlPlane}
	// Set the class up as given, whatever an earlier test left.
	setClass := func(pc *schedulingv1.PriorityClass) *schedulingv1.PriorityClass {
		t.Helper()
		require.NoError(t, client.IgnoreNotFound(env.Client.Delete(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: PriorityClassControlPlane}})))
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, key, &schedulingv1.PriorityClass{}))
		}, 10*time.Second, 20*time.Millisecond)
		require.NoError(t, env.Client.Create(ctx, pc))
		return pc
	}
	// At the end the class is the operator's, as later tests expect.
	t.Cleanup(func() {
		cur := &schedulingv1.PriorityClass{}
		if err := env.Client.Get(context.Background(), key, cur); err == nil && (!PriorityClassCurrent(cur) || cur.Labels[LabelManagedBy] != ManagedBy) {
			_ = env.Client.Delete(context.Background(), cur)
		}
	})
	h := startBackend(t)
	h.pc.Spec.Hosted.StorageClassName = "standard"
	h.pc.Spec.Hosted.HighAvailability = true

	old := setClass(&schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: PriorityClassControlPlane, Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Value:      priorityControlPlane,
	})
	require.Equal(t, corev1.PreemptLowerPriority, *get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane).PreemptionPolicy, "as an earlier version left it")
	cl := newCluster("ha-priority")
	h.ensure(t, cl)
	replaced := get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane)
	assert.NotEqual(t, old.UID, replaced.UID, "made anew")
	assert.Equal(t, corev1.PreemptNever, *replaced.PreemptionPolicy)
	assert.Equal(t, int32(priorityControlPlane), replaced.Value)
	assert.Equal(t, ManagedBy, replaced.Labels[LabelManagedBy])
	h.ensure(t, cl)
	h.ensure(t, newCluster("ha-priority-2"))
	assert.Equal(t, replaced.UID, get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane).UID, "replaced once")

	// Someone else's class that preempts: untouched, and the control plane is refused.
	foreign := setClass(&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: PriorityClassControlPlane}, Value: 1000})
	_, err := h.b.Ensure(ctx, cl, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, ReasonPriorityClassNotOwned), "%v", err)
	assert.Equal(t, time.Minute, backend.RetryAfter(err), "no object of the platform's API changes when the class is deleted: looked at again")
	assert.ErrorContains(t, err, "is not this operator's")
	assert.ErrorContains(t, err, "delete it")
	cur := get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane)
	assert.Equal(t, foreign.UID, cur.UID, "never touched")
	assert.Equal(t, int32(1000), cur.Value)

	// Someone else's class that never preempts: used as it is.
	foreign = setClass(&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: PriorityClassControlPlane},
		Value: priorityControlPlane, PreemptionPolicy: ptr.To(corev1.PreemptNever), Description: "ours, by GitOps"})
	h.ensure(t, cl)
	assert.Equal(t, foreign.UID, get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane).UID, "never touched")

	// Deleted by its owner: the operator makes its own.
	require.NoError(t, env.Client.Delete(ctx, foreign))
	h.ensure(t, cl)
	made := get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane)
	assert.Equal(t, ManagedBy, made.Labels[LabelManagedBy])
	assert.Equal(t, corev1.PreemptNever, *made.PreemptionPolicy)
}

func TestNetworkPolicies(t *testing.T) {
	for _, tc := range []struct {
		name       string
		issuers    []string
		private    bool
		wantPorts  []int32
		wantExcept bool
	}{
		{"no issuers", nil, false, []int32{443}, true},
		{"issuers on 443 and 8443", []string{"https://idp.example.com", "https://idp.example.org:8443/realms/x", "https://b.example.com/"}, false, []int32{443, 8443}, true},
		{"private issuers allowed", []string{"https://10.0.0.5:9443"}, true, []int32{9443}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec()
			s.IssuerPorts, s.PrivateIssuers = IssuerPorts(tc.issuers), tc.private
			np := s.APIServerNetworkPolicy()
			assert.ElementsMatch(t, []string{"Ingress", "Egress"}, []string{string(np.Spec.PolicyTypes[0]), string(np.Spec.PolicyTypes[1])})
			require.Len(t, np.Spec.Ingress, 1)
			assert.Empty(t, np.Spec.Ingress[0].From, "API clients from anywhere: the API server authenticates them")
			assert.Equal(t, intstr.FromInt32(PortAPIServer), *np.Spec.Ingress[0].Ports[0].Port)
			require.Len(t, np.Spec.Egress, 3)
			// To its own etcd only.
			assert.Equal(t, s.selector(ComponentEtcd), np.Spec.Egress[0].To[0].PodSelector.MatchLabels)
			assert.Equal(t, intstr.FromInt32(2379), *np.Spec.Egress[0].Ports[0].Port)
			// DNS: the host's DNS pods only.
			assert.Len(t, np.Spec.Egress[1].Ports, 2)
			require.Len(t, np.Spec.Egress[1].To, 1)
			dns := np.Spec.Egress[1].To[0]
			assert.Nil(t, dns.IPBlock, "not any address on port 53")
			assert.Equal(t, map[string]string{corev1.LabelMetadataName: "kube-system"}, dns.NamespaceSelector.MatchLabels)
			assert.Equal(t, map[string]string{"k8s-app": "kube-dns"}, dns.PodSelector.MatchLabels)
			// The issuers' ports.
			var ports []int32
			for _, p := range np.Spec.Egress[2].Ports {
				ports = append(ports, p.Port.IntVal)
			}
			assert.Equal(t, tc.wantPorts, ports)
			block := np.Spec.Egress[2].To[0].IPBlock
			assert.Equal(t, "0.0.0.0/0", block.CIDR)
			assert.Contains(t, block.Except, "169.254.0.0/16", "never cloud metadata, private issuers or not")
			if tc.wantExcept {
				assert.Contains(t, block.Except, "10.0.0.0/8")
			} else {
				assert.Equal(t, []string{"169.254.0.0/16"}, block.Except)
			}
			assertEtcdPolicy(t, s)
		})
	}
}

// TestDefaultDeny: every control plane's namespace denies all traffic to and from any pod but
// what its components' policies allow; each pod the backend makes is selected by one of those.
func TestDefaultDeny(t *testing.T) {
	for _, ha := range []bool{false, true} {
		s := testSpec()
		s.HighAvailability, s.StorageClassName = ha, "standard"
		np := s.DefaultDenyNetworkPolicy()
		assert.Equal(t, s.Namespace, np.Namespace)
		assert.Empty(t, np.Spec.PodSelector.MatchLabels, "every pod")
		assert.Empty(t, np.Spec.PodSelector.MatchExpressions, "every pod")
		assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)
		assert.Empty(t, np.Spec.Ingress)
		assert.Empty(t, np.Spec.Egress)
		assert.Contains(t, s.Objects(), client.Object(np), "made with the control plane")
		for _, w := range s.Workloads() {
			var tmpl map[string]string
			switch o := w.(type) {
			case *appsv1.StatefulSet:
				tmpl = o.Spec.Template.Labels
			case *appsv1.Deployment:
				tmpl = o.Spec.Template.Labels
			}
			selected := false
			for _, p := range []*networkingv1.NetworkPolicy{s.EtcdNetworkPolicy(), s.APIServerNetworkPolicy()} {
				selected = selected || labels.SelectorFromSet(p.Spec.PodSelector.MatchLabels).Matches(labels.Set(tmpl))
			}
			assert.True(t, selected, "%s's pods have a policy of their own", w.GetName())
		}
	}
}

// TestPriorityClass: highly available control planes never preempt; a class is current only with
// the value and preemption policy of the plan (both immutable).
func TestPriorityClass(t *testing.T) {
	pc := PriorityClass()
	assert.Equal(t, corev1.PreemptNever, *pc.PreemptionPolicy)
	assert.Equal(t, ManagedBy, pc.Labels[LabelManagedBy])
	for _, c := range []struct {
		name    string
		change  func(*schedulingv1.PriorityClass)
		current bool
	}{
		{"as planned", func(*schedulingv1.PriorityClass) {}, true},
		{"another description", func(pc *schedulingv1.PriorityClass) { pc.Description = "mine" }, true},
		{"an earlier version's: no policy", func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = nil }, false},
		{"as the API server defaults it", func(pc *schedulingv1.PriorityClass) { pc.PreemptionPolicy = ptr.To(corev1.PreemptLowerPriority) }, false},
		{"another value", func(pc *schedulingv1.PriorityClass) { pc.Value = 1000 }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pc := PriorityClass()
			c.change(pc)
			assert.Equal(t, c.current, PriorityClassCurrent(pc))
		})
	}
}

// assertEtcdPolicy checks etcd's NetworkPolicy of s: it reaches nothing, takes its API server,
// monitoring on its metrics port, and this Cluster's snapshot and maintenance Jobs.
func assertEtcdPolicy(t *testing.T, s *Spec) {
	t.Helper()
	etcd := s.EtcdNetworkPolicy()
	assert.Len(t, etcd.Spec.PolicyTypes, 2, "ingress and egress: etcd reaches nothing")
	assert.Empty(t, etcd.Spec.Egress)
	require.Len(t, etcd.Spec.Ingress, 3)
	// Its metrics port, from monitoring namespaces only.
	metrics := etcd.Spec.Ingress[1]
	assert.Equal(t, intstr.FromInt32(2381), *metrics.Ports[0].Port)
	require.Len(t, metrics.From, 1)
	assert.Nil(t, metrics.From[0].PodSelector)
	assert.Equal(t, map[string]string{LabelMonitoring: "true"}, metrics.From[0].NamespaceSelector.MatchLabels)
	// Its client port from this Cluster's snapshot and maintenance Jobs only, in the
	// backups' namespace.
	snaps := etcd.Spec.Ingress[2]
	assert.Equal(t, intstr.FromInt32(2379), *snaps.Ports[0].Port)
	require.Len(t, snaps.From, 1)
	sel, err := metav1.LabelSelectorAsSelector(snaps.From[0].PodSelector)
	require.NoError(t, err)
	other := *s
	other.Cluster.UID = "another"
	for _, c := range []struct {
		labels map[string]string
		in     bool
	}{
		{s.selector(ComponentSnapshot), true},
		{s.selector(ComponentMaintain), true},
		{s.selector(ComponentServe), false},
		{s.selector(ComponentAPIServer), false},
		{other.selector(ComponentSnapshot), false},
		{other.selector(ComponentMaintain), false},
	} {
		assert.Equal(t, c.in, sel.Matches(labels.Set(c.labels)), "%v", c.labels)
	}
	assert.Equal(t, map[string]string{corev1.LabelMetadataName: BackupNamespace}, snaps.From[0].NamespaceSelector.MatchLabels)
}
