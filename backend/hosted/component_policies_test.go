package hosted

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// TestSourceRangesLive: the ProviderConfig's source ranges reach an existing control plane at
// its next reconcile, and go again when they are removed (the Service's traffic policy back to
// its default, the policy's ingress open).
// TestSourceRangesLive: allowedSourceRanges reach an existing control plane at once, and its API
// server then admits the listed ranges and the operator's pods only: the pod selectors, evaluated
// by the API server against real pods, pick the operator's two replicas (of different revisions)
// and no other pod, of its namespace or another.
func TestSourceRangesLive(t *testing.T) {
	ctx := t.Context()
	opNS, otherNS := "operator-"+string(uuid.NewUUID())[:8], "platform-"+string(uuid.NewUUID())[:8]
	for _, ns := range []string{opNS, otherNS} {
		require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	operatorLabels := map[string]string{"app.kubernetes.io/component": "operator", "app.kubernetes.io/name": "cluster-provider"}
	pod := func(ns, name string, l map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}}}
		require.NoError(t, env.Client.Create(ctx, p))
		return p
	}
	with := func(extra map[string]string) map[string]string {
		l := maps.Clone(operatorLabels)
		maps.Copy(l, extra)
		return l
	}
	self := pod(opNS, "cluster-provider-7d9c8b-a", with(map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: "7d9c8b"}))
	pod(opNS, "cluster-provider-5f6d4c-b", with(map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: "5f6d4c"})) // the next revision
	pod(opNS, "metrics-scraper", map[string]string{"app.kubernetes.io/name": "cluster-provider", "app.kubernetes.io/component": "scraper"})
	pod(otherNS, "impostor", with(nil)) // the operator's labels, in another namespace
	h := startBackendWith(t, func(o *Options) { o.OperatorPod = client.ObjectKeyFromObject(self) })

	cl := newCluster("ranges")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	from := func() []networkingv1.NetworkPolicyPeer {
		return get(t, &networkingv1.NetworkPolicy{}, ns, NameAPIServer).Spec.Ingress[0].From
	}
	assert.Empty(t, from())

	h.pc.Spec.Hosted.AllowedSourceRanges = []string{"203.0.113.0/24", "198.51.100.0/24"}
	h.ensure(t, cl)
	assert.Equal(t, corev1.ServiceExternalTrafficPolicyLocal, get(t, &corev1.Service{}, ns, NameExternal).Spec.ExternalTrafficPolicy)
	peers := from()
	require.Len(t, peers, 3)
	assert.Equal(t, "203.0.113.0/24", peers[0].IPBlock.CIDR)
	assert.Equal(t, "198.51.100.0/24", peers[1].IPBlock.CIDR)
	op := peers[2]
	require.Nil(t, op.IPBlock)
	require.NotNil(t, op.NamespaceSelector, "never the pods of every namespace")
	require.NotNil(t, op.PodSelector, "never every pod of a namespace")
	// What the selectors pick, as the API server selects.
	nsSel, err := metav1.LabelSelectorAsSelector(op.NamespaceSelector)
	require.NoError(t, err)
	namespaces := &corev1.NamespaceList{}
	require.NoError(t, env.Client.List(ctx, namespaces, client.MatchingLabelsSelector{Selector: nsSel}))
	var picked []string
	for _, n := range namespaces.Items {
		podSel, err := metav1.LabelSelectorAsSelector(op.PodSelector)
		require.NoError(t, err)
		pods := &corev1.PodList{}
		require.NoError(t, env.Client.List(ctx, pods, client.InNamespace(n.Name), client.MatchingLabelsSelector{Selector: podSel}))
		for _, p := range pods.Items {
			picked = append(picked, p.Namespace+"/"+p.Name)
		}
	}
	assert.ElementsMatch(t, []string{opNS + "/cluster-provider-7d9c8b-a", opNS + "/cluster-provider-5f6d4c-b"}, picked,
		"the operator's replicas only")

	h.pc.Spec.Hosted.AllowedSourceRanges = nil
	h.ensure(t, cl)
	assert.Equal(t, corev1.ServiceExternalTrafficPolicyCluster, get(t, &corev1.Service{}, ns, NameExternal).Spec.ExternalTrafficPolicy)
	assert.Empty(t, from())
}

// TestHostAPIEndpointsExcepted: the API server's egress to the issuers never reaches the host's
// own API server (the envtest's Service default/kubernetes and its EndpointSlices, as the API
// server publishes them) nor link-local addresses, with private issuers allowed or not; an
// endpoint added later reaches the NetworkPolicy at the next reconcile and leaves it when it goes;
// a reconcile with nothing changed does not rewrite the policy.
func TestHostAPIEndpointsExcepted(t *testing.T) {
	ctx := t.Context()
	svc := get(t, &corev1.Service{}, metav1.NamespaceDefault, "kubernetes")
	eps := &discoveryv1.EndpointSliceList{}
	require.NoError(t, env.Client.List(ctx, eps, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}))
	var endpoints []string
	for _, sl := range eps.Items {
		for _, ep := range sl.Endpoints {
			endpoints = append(endpoints, ep.Addresses...)
		}
	}
	require.NotEmpty(t, svc.Spec.ClusterIP)
	require.NotEmpty(t, endpoints, "the envtest's API server publishes its EndpointSlice")
	t.Logf("host API: ClusterIP %s, endpoints %v", svc.Spec.ClusterIP, endpoints)

	h := startBackend(t)
	h.pc.Spec.OIDC = &providersv1alpha1.OIDCSettings{AllowPrivateIssuers: true}
	cl := newCluster("host-api")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	policy := func() *networkingv1.NetworkPolicy { return get(t, &networkingv1.NetworkPolicy{}, ns, NameAPIServer) }
	except := func() []string {
		block := policy().Spec.Egress[2].To[0].IPBlock
		require.Equal(t, "0.0.0.0/0", block.CIDR)
		return block.Except
	}
	want := []string{"169.254.0.0/16", svc.Spec.ClusterIP + "/32"}
	for _, e := range endpoints {
		want = append(want, e+"/32")
	}
	assert.Subset(t, except(), want, "private issuers allowed, and still never the host's API server nor cloud metadata")
	assert.Equal(t, issuerExcept(true, append([]string{svc.Spec.ClusterIP}, endpoints...)), except(), "nothing else")

	// An endpoint added (a new API server of the host) reaches the policy; a reconcile that changes
	// nothing leaves it as it is.
	extra := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kubernetes-" + string(uuid.NewUUID())[:8], Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.51.100.7"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	require.NoError(t, env.Client.Create(ctx, extra))
	env.DeleteAtCleanup(t, extra)
	hostSees(t, h, len(eps.Items)+1)
	h.ensure(t, cl)
	assert.Contains(t, except(), "198.51.100.7/32")
	generation := policy().Generation
	h.ensure(t, cl)
	assert.Equal(t, generation, policy().Generation, "the same endpoints give the same policy")

	// Without private issuers the private ranges are excepted and cover the envtest's own
	// addresses (its service range is in 10.0.0.0/8); a public endpoint is still excepted by itself.
	h.pc.Spec.OIDC = nil
	h.ensure(t, cl)
	require.True(t, netip.MustParsePrefix("10.0.0.0/8").Contains(netip.MustParseAddr(svc.Spec.ClusterIP)), "the envtest's service range")
	assert.Subset(t, except(), []string{"10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "198.51.100.7/32"})
	assert.NotContains(t, except(), svc.Spec.ClusterIP+"/32", "covered by 10.0.0.0/8: not listed twice")
	for _, e := range endpoints {
		if ip := netip.MustParseAddr(e); !slices.ContainsFunc(privateRanges, func(r string) bool { return netip.MustParsePrefix(r).Contains(ip) }) {
			assert.Contains(t, except(), e+"/32", "an endpoint outside the private ranges is excepted by itself")
		}
	}
	assert.Equal(t, issuerExcept(false, append([]string{svc.Spec.ClusterIP, "198.51.100.7"}, endpoints...)), except())

	require.NoError(t, env.Client.Delete(ctx, extra))
	hostSees(t, h, len(eps.Items))
	h.ensure(t, cl)
	assert.NotContains(t, except(), "198.51.100.7/32", "an endpoint gone leaves the policy")
}

// hostSees waits until the backend's cache holds n EndpointSlices of the host's API server (it
// watches them: a reconcile after a change sees it).
func hostSees(t *testing.T, h *harness, n int) {
	t.Helper()
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		eps := &discoveryv1.EndpointSliceList{}
		return hst.cache.List(t.Context(), eps, client.InNamespace(metav1.NamespaceDefault),
			client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}) == nil && len(eps.Items) == n
	}, 10*time.Second, 10*time.Millisecond)
}

// TestIssuerExcept: the API server's egress to the issuers (0.0.0.0/0) excepts link-local
// addresses and the host's API endpoints always, and the private ranges unless private issuers are
// allowed; an endpoint inside another entry is not listed again, and the list is sorted and free
// of duplicates whatever order the endpoints come in, so the policy does not change between
// reconciles.
func TestIssuerExcept(t *testing.T) {
	private := []string{"10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"}
	for _, c := range []struct {
		name    string
		private bool
		hostAPI []string
		want    []string
	}{
		{"public issuers only, no endpoints", false, nil, private},
		{"private issuers, no endpoints", true, nil, []string{"169.254.0.0/16"}},
		{"public issuers only: endpoints in private ranges are covered", false, []string{"10.96.0.1", "172.18.0.2", "127.0.0.1"}, private},
		{"public issuers only: a public endpoint is excepted", false, []string{"10.96.0.1", "203.0.113.5"},
			append(slices.Clone(private), "203.0.113.5/32")},
		{"private issuers: endpoints in private ranges are excepted", true, []string{"172.18.0.2", "10.96.0.1", "127.0.0.1"},
			[]string{"10.96.0.1/32", "127.0.0.1/32", "169.254.0.0/16", "172.18.0.2/32"}},
		{"private issuers: a link-local endpoint is covered", true, []string{"169.254.169.254"}, []string{"169.254.0.0/16"}},
		{"duplicates, an IPv4-mapped IPv6 form of one", true, []string{"10.96.0.1", "203.0.113.5", "10.96.0.1", "::ffff:10.96.0.1", "203.0.113.5"},
			[]string{"10.96.0.1/32", "169.254.0.0/16", "203.0.113.5/32"}},
		{"IPv6 and what does not parse are not in an IPv4 block", true, []string{"fd00::1", "2001:db8::1", "", "kubernetes.default", "10.96.0.1/32", "10.96.0.1"},
			[]string{"10.96.0.1/32", "169.254.0.0/16"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := issuerExcept(c.private, c.hostAPI)
			assert.Equal(t, c.want, got)
			reversed := slices.Clone(c.hostAPI)
			slices.Reverse(reversed)
			assert.Equal(t, got, issuerExcept(c.private, reversed), "the same whatever the endpoints' order")
			for _, e := range got {
				p, err := netip.ParsePrefix(e)
				require.NoError(t, err)
				assert.True(t, p.Addr().Is4() && p.Bits() > 0, "%s is inside 0.0.0.0/0 and smaller (NetworkPolicy validation)", e)
				assert.Equal(t, p.Masked(), p, "%s is a network address", e)
			}
		})
	}

	s := testSpec()
	s.PrivateIssuers, s.HostAPIEndpoints = true, []string{"203.0.113.5", "10.96.0.1"}
	block := s.APIServerNetworkPolicy().Spec.Egress[2].To[0].IPBlock
	assert.Equal(t, "0.0.0.0/0", block.CIDR)
	assert.Equal(t, []string{"10.96.0.1/32", "169.254.0.0/16", "203.0.113.5/32"}, block.Except)
}

// TestOperatorPods: the operator's pods are those of its namespace with its pod's labels but
// those that differ between the replicas of one Deployment or StatefulSet.
func TestOperatorPods(t *testing.T) {
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   map[string]string
	}{
		{"deploy/hosted", map[string]string{"app.kubernetes.io/component": "operator", "app.kubernetes.io/name": "cluster-provider", "pod-template-hash": "7d9c8b"},
			map[string]string{"app.kubernetes.io/component": "operator", "app.kubernetes.io/name": "cluster-provider"}},
		{"openMCP's", map[string]string{"app.kubernetes.io/managed-by": "openmcp-operator", "app.kubernetes.io/name": "ClusterProvider",
			"app.kubernetes.io/instance": "local", "app.kubernetes.io/component": "controller", "pod-template-hash": "5f6d"},
			map[string]string{"app.kubernetes.io/managed-by": "openmcp-operator", "app.kubernetes.io/name": "ClusterProvider",
				"app.kubernetes.io/instance": "local", "app.kubernetes.io/component": "controller"}},
		{"a StatefulSet's", map[string]string{"app": "op", "controller-revision-hash": "op-6c", "statefulset.kubernetes.io/pod-name": "op-0", "apps.kubernetes.io/pod-index": "0"},
			map[string]string{"app": "op"}},
		{"no labels of its own: its namespace", map[string]string{"pod-template-hash": "1"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-provider-system", Name: "cluster-provider-7d9c8b-x2x", Labels: c.labels}}
			assert.Equal(t, Pods{Namespace: "cluster-provider-system", Labels: c.want}, operatorPods(pod))
		})
	}
}

// TestAllowedSourceRanges: without ranges the API server takes clients from anywhere on 6443;
// with them, only from the ranges and the operator's pods (no other pod, no other port), the
// external Service keeps the client's address (externalTrafficPolicy Local) and, as a
// LoadBalancer, lists the ranges. Without the operator's pods (a seed), the ranges only.
func TestAllowedSourceRanges(t *testing.T) {
	ranges := []string{"203.0.113.0/24", "2001:db8::/32"}
	operator := &Pods{Namespace: "cluster-provider-system", Labels: map[string]string{"app.kubernetes.io/component": "operator"}}
	for _, c := range []struct {
		name     string
		exposure corev1.ServiceType
		ranges   []string
		operator *Pods
	}{
		{"open, NodePort", corev1.ServiceTypeNodePort, nil, operator},
		{"open, LoadBalancer", corev1.ServiceTypeLoadBalancer, nil, operator},
		{"ranges, NodePort", corev1.ServiceTypeNodePort, ranges, operator},
		{"ranges, LoadBalancer", corev1.ServiceTypeLoadBalancer, ranges, operator},
		{"ranges, no operator pods in the host", corev1.ServiceTypeLoadBalancer, ranges, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := testSpec()
			s.Exposure, s.AllowedSourceRanges, s.OperatorPods = c.exposure, c.ranges, c.operator
			in := s.APIServerNetworkPolicy().Spec.Ingress
			require.Len(t, in, 1)
			assert.Equal(t, []networkingv1.NetworkPolicyPort{tcpPort(PortAPIServer)}, in[0].Ports)
			svc := s.ExternalService().Spec
			if c.ranges == nil {
				assert.Empty(t, in[0].From, "from anywhere")
				assert.Empty(t, svc.ExternalTrafficPolicy, "the Service's default")
				assert.Empty(t, svc.LoadBalancerSourceRanges)
				return
			}
			var cidrs []string
			var pods []networkingv1.NetworkPolicyPeer
			for _, p := range in[0].From {
				if p.IPBlock != nil {
					cidrs = append(cidrs, p.IPBlock.CIDR)
					assert.Empty(t, p.IPBlock.Except)
				} else {
					pods = append(pods, p)
				}
			}
			assert.Equal(t, c.ranges, cidrs)
			if c.operator == nil {
				assert.Empty(t, pods, "no pod of the host")
			} else {
				require.Len(t, pods, 1)
				assert.Equal(t, map[string]string{corev1.LabelMetadataName: "cluster-provider-system"}, pods[0].NamespaceSelector.MatchLabels, "the operator's namespace only")
				assert.Equal(t, c.operator.Labels, pods[0].PodSelector.MatchLabels, "the operator's pods only")
				assert.Empty(t, pods[0].NamespaceSelector.MatchExpressions)
				assert.Empty(t, pods[0].PodSelector.MatchExpressions)
			}
			assert.Equal(t, corev1.ServiceExternalTrafficPolicyLocal, svc.ExternalTrafficPolicy, "the client's address reaches the policy")
			if c.exposure == corev1.ServiceTypeLoadBalancer {
				assert.Equal(t, c.ranges, svc.LoadBalancerSourceRanges)
			} else {
				assert.Empty(t, svc.LoadBalancerSourceRanges)
			}
		})
	}
}
