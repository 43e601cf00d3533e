package hosted

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func testSpec() *Spec {
	return &Spec{
		Namespace:   NamespaceFor("0b7e2c4a-9f1d-4e55-8a3b-1c2d3e4f5a6b"),
		Cluster:     ClusterRef{Namespace: "team-a", Name: "dev", Profile: "default.local.hosted", UID: "0b7e2c4a-9f1d-4e55-8a3b-1c2d3e4f5a6b"},
		Image:       "cluster-provider/controlplane:v1.37.1",
		ServiceCIDR: "198.18.0.0/16",
		APIServer:   DefaultAPIServer, ControllerManager: DefaultControllerManager, Etcd: DefaultEtcd,
	}
}

// flags maps each --name=value argument to its value; a flag given twice fails the test.
func flags(t *testing.T, args []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, a := range args {
		name, value, ok := strings.Cut(a, "=")
		require.True(t, ok && strings.HasPrefix(a, "--"), "argument %q is --flag=value", a)
		_, dup := m[name]
		require.False(t, dup, "flag %s given twice", name)
		m[name] = value
	}
	return m
}

func container(t *testing.T, pod corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range append(slices.Clone(pod.InitContainers), pod.Containers...) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %s", name)
	return corev1.Container{}
}

func TestNamespaceFor(t *testing.T) {
	for uid, want := range map[string]string{
		"0b7e2c4a-9f1d-4e55-8a3b-1c2d3e4f5a6b": "hcp-0b7e2c4a9f1d4e558a3b",
		"ABC":                                  "hcp-abc",
	} {
		got := NamespaceFor(typesUID(uid))
		assert.Equal(t, want, got)
		assert.Empty(t, validation.IsDNS1123Label(got))
	}
}

func TestObjectsNamesAndLabels(t *testing.T) {
	s := testSpec()
	objs := append(append([]client.Object{s.NamespaceObject()}, s.Objects()...), s.Workloads()...)
	seen := map[string]bool{}
	for _, o := range objs {
		kind := o.GetObjectKind().GroupVersionKind().Kind
		require.NotEmpty(t, kind, "%s has its TypeMeta (server-side apply needs it)", o.GetName())
		key := kind + "/" + o.GetName()
		assert.False(t, seen[key], "%s made twice", key)
		seen[key] = true
		if kind != "Namespace" {
			assert.Equal(t, s.Namespace, o.GetNamespace(), key)
		}
		l := o.GetLabels()
		assert.Equal(t, ManagedBy, l[LabelManagedBy], key)
		assert.Equal(t, string(s.Cluster.UID), l[LabelClusterUID], key)
		assert.Equal(t, "team-a", l[LabelClusterNamespace], key)
		assert.Equal(t, "dev", l[LabelClusterName], key)
		ref, ok := refOf(o)
		assert.True(t, ok, key)
		assert.Equal(t, "team-a/dev", ref.String(), key)
		assert.Equal(t, s.Cluster.Profile, ref.Profile, key)
	}
	assert.Equal(t, "restricted", s.NamespaceObject().Labels["pod-security.kubernetes.io/enforce"])

	// A name too long for a label value is in the annotation only.
	long := testSpec()
	long.Cluster.Name = strings.Repeat("n", 64)
	_, has := long.EtcdService().Labels[LabelClusterName]
	assert.False(t, has)
	ref, ok := refOf(long.EtcdService())
	assert.True(t, ok)
	assert.Equal(t, long.Cluster.Name, ref.Name)
	// Pods name their Cluster too: their template carries the annotations.
	ref, ok = refOf(&corev1.Pod{ObjectMeta: long.APIServerDeployment().Spec.Template.ObjectMeta})
	assert.True(t, ok)
	assert.Equal(t, long.Cluster.Name, ref.Name)
}

func TestSelectors(t *testing.T) {
	s := testSpec()
	other := testSpec()
	other.Cluster.UID = "ffffffff-0000-0000-0000-000000000000"
	dep, sts := s.APIServerDeployment(), s.EtcdStatefulSet()
	apiPods := labels.Set(dep.Spec.Template.Labels)
	etcdPods := labels.Set(sts.Spec.Template.Labels)
	for _, tc := range []struct {
		name     string
		selector map[string]string
		matches  labels.Set
		not      []labels.Set
	}{
		{"Deployment", dep.Spec.Selector.MatchLabels, apiPods, []labels.Set{etcdPods, other.APIServerDeployment().Spec.Template.Labels}},
		{"StatefulSet", sts.Spec.Selector.MatchLabels, etcdPods, []labels.Set{apiPods, other.EtcdStatefulSet().Spec.Template.Labels}},
		{"Service apiserver", s.InternalService().Spec.Selector, apiPods, []labels.Set{etcdPods}},
		{"Service apiserver-external", s.ExternalService().Spec.Selector, apiPods, []labels.Set{etcdPods}},
		{"Service etcd", s.EtcdService().Spec.Selector, etcdPods, []labels.Set{apiPods, other.EtcdStatefulSet().Spec.Template.Labels}},
		{"NetworkPolicy etcd", s.EtcdNetworkPolicy().Spec.PodSelector.MatchLabels, etcdPods, []labels.Set{apiPods}},
		{"NetworkPolicy apiserver", s.APIServerNetworkPolicy().Spec.PodSelector.MatchLabels, apiPods, []labels.Set{etcdPods}},
		{"etcd's ingress peers", s.EtcdNetworkPolicy().Spec.Ingress[0].From[0].PodSelector.MatchLabels, apiPods, []labels.Set{etcdPods, other.APIServerDeployment().Spec.Template.Labels}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel := labels.SelectorFromSet(tc.selector)
			assert.True(t, sel.Matches(tc.matches))
			for _, n := range tc.not {
				assert.False(t, sel.Matches(n), "%v", n)
			}
		})
	}
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
		})
	}
}

func TestAPIServerDeployment(t *testing.T) {
	s := testSpec()
	dep := s.APIServerDeployment()
	assert.Equal(t, int32(1), *dep.Spec.Replicas)
	ru := dep.Spec.Strategy.RollingUpdate
	assert.Equal(t, "100%", ru.MaxSurge.String(), "blue/green: the new pod starts before the old goes")
	assert.Equal(t, 0, ru.MaxUnavailable.IntValue())
	assert.Equal(t, Rendered(dep), dep.Annotations[AnnotationInputs])

	pod := dep.Spec.Template.Spec
	assert.False(t, *pod.AutomountServiceAccountToken, "the control plane does not call its host")
	assert.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.NotNil(t, pod.Affinity.PodAntiAffinity)
	assert.Equal(t, corev1.LabelHostname, pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey)
	assert.Equal(t, corev1.LabelHostname, pod.TopologySpreadConstraints[0].TopologyKey)

	require.Len(t, pod.InitContainers, 1)
	assert.Equal(t, containerAPIServer, pod.InitContainers[0].Name, "the API server starts first, as a sidecar")
	assert.Equal(t, corev1.ContainerRestartPolicyAlways, *pod.InitContainers[0].RestartPolicy)
	api := container(t, pod, containerAPIServer)
	assert.Equal(t, s.Image, api.Image)
	assert.Equal(t, corev1.PullIfNotPresent, api.ImagePullPolicy, "images loaded without a registry")
	assert.Equal(t, []string{"/usr/local/bin/kube-apiserver"}, api.Command)
	f := flags(t, api.Args)
	assert.Equal(t, "https://etcd."+s.Namespace+".svc:2379", f["--etcd-servers"])
	assert.Equal(t, "10s", f["--shutdown-delay-duration"], "a rolled-out API server serves on while the Services forget it")
	assert.Greater(t, *dep.Spec.Template.Spec.TerminationGracePeriodSeconds, int64(10), "and has time to finish after that")
	assert.Equal(t, "/etc/kubernetes/pki/etcd-client.crt", f["--etcd-certfile"])
	assert.Equal(t, "198.18.0.0/16", f["--service-cluster-ip-range"])
	assert.Equal(t, "/etc/kubernetes/authn/authn.yaml", f["--authentication-config"])
	assert.Equal(t, "https://kubernetes.default.svc.cluster.local", f["--service-account-issuer"])
	assert.Equal(t, "$(POD_IP)", f["--advertise-address"])
	assert.Equal(t, "6443", f["--secure-port"])
	assert.Equal(t, "true", f["--enable-priority-and-fairness"])
	assert.Equal(t, "RBAC", f["--authorization-mode"])
	// Probes: no initial delay; the startup probe asks every second.
	for _, p := range []*corev1.Probe{api.StartupProbe, api.ReadinessProbe, api.LivenessProbe} {
		require.NotNil(t, p)
		assert.Zero(t, p.InitialDelaySeconds)
		assert.Equal(t, corev1.URISchemeHTTPS, p.HTTPGet.Scheme)
	}
	assert.Equal(t, int32(1), api.StartupProbe.PeriodSeconds)
	assert.Equal(t, "/readyz", api.ReadinessProbe.HTTPGet.Path)
	assert.True(t, *api.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, resource.MustParse("768Mi"), api.Resources.Limits[corev1.ResourceMemory])
	assert.Equal(t, "limits.memory", envFrom(api, "GOMEMLIMIT"))

	kcm := container(t, pod, containerKCM)
	f = flags(t, kcm.Args)
	assert.Equal(t, "true", f["--leader-elect"], "a rollout runs two for a moment")
	assert.Equal(t, "40s", f["--leader-elect-renew-deadline"], "a busy node does not make it exit")
	assert.Equal(t, "/etc/kubernetes/kcm/ca.key", f["--cluster-signing-key-file"])
	assert.Nil(t, kcm.ReadinessProbe, "a restarting controller manager does not take the API server out of its Service")
	assert.NotNil(t, kcm.LivenessProbe)

	// The API server's container sees no CA key: only the controller manager signs.
	for _, v := range pod.Volumes {
		if v.Name != "pki" {
			continue
		}
		for _, src := range v.Projected.Sources {
			for _, it := range src.Secret.Items {
				assert.NotEqual(t, "ca.key", it.Key, "%s", src.Secret.Name)
			}
		}
	}
}

func envFrom(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			return e.ValueFrom.ResourceFieldRef.Resource
		}
	}
	return ""
}

func TestEtcdStatefulSet(t *testing.T) {
	for _, tc := range []struct {
		name, class string
		size        resource.Quantity
		wantClaim   bool
		wantSize    string
		wantQuota   string
	}{
		{name: "no storage class: emptyDir", wantClaim: false, wantQuota: "1073741824"},
		{name: "storage class, default size", class: "fast", wantClaim: true, wantSize: "1Gi", wantQuota: "805306368"},
		{name: "storage class and size", class: "fast", size: resource.MustParse("5Gi"), wantClaim: true, wantSize: "5Gi", wantQuota: "4026531840"},
		{name: "a small claim: the smallest quota", class: "fast", size: resource.MustParse("200Mi"), wantClaim: true, wantSize: "200Mi", wantQuota: "268435456"},
		{name: "a large claim: the largest quota", class: "fast", size: resource.MustParse("100Gi"), wantClaim: true, wantSize: "100Gi", wantQuota: "8589934592"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testSpec()
			s.StorageClassName, s.StorageSize = tc.class, tc.size
			sts := s.EtcdStatefulSet()
			assert.Equal(t, int32(1), *sts.Spec.Replicas)
			if tc.wantClaim {
				require.Len(t, sts.Spec.VolumeClaimTemplates, 1)
				pvc := sts.Spec.VolumeClaimTemplates[0]
				assert.Equal(t, tc.class, *pvc.Spec.StorageClassName)
				assert.Equal(t, resource.MustParse(tc.wantSize), pvc.Spec.Resources.Requests[corev1.ResourceStorage])
				assert.Equal(t, appsv1.DeletePersistentVolumeClaimRetentionPolicyType, sts.Spec.PersistentVolumeClaimRetentionPolicy.WhenDeleted)
				for _, v := range sts.Spec.Template.Spec.Volumes {
					assert.NotEqual(t, "data", v.Name, "the claim, not a volume, is data")
				}
			} else {
				assert.Empty(t, sts.Spec.VolumeClaimTemplates)
				found := false
				for _, v := range sts.Spec.Template.Spec.Volumes {
					if v.Name == "data" {
						found = v.EmptyDir != nil
					}
				}
				assert.True(t, found, "data on an emptyDir")
			}
			c := container(t, sts.Spec.Template.Spec, containerEtcd)
			f := flags(t, c.Args)
			assert.Equal(t, "true", f["--client-cert-auth"])
			assert.Equal(t, "https://0.0.0.0:2379", f["--listen-client-urls"])
			assert.Equal(t, "http://127.0.0.1:2380", f["--listen-peer-urls"], "the peer port stays in the pod")
			assert.Equal(t, "/var/lib/etcd/data", f["--data-dir"], "a folder etcd makes 0700 itself")
			assert.Equal(t, tc.wantQuota, f["--quota-backend-bytes"], "three quarters of the claim, within bounds")
			assert.Equal(t, "/health?serializable=true", c.ReadinessProbe.HTTPGet.Path)
		})
	}
}

func TestInputs(t *testing.T) {
	inputs := func(s *Spec) (string, string) {
		return s.APIServerDeployment().Annotations[AnnotationInputs], s.EtcdStatefulSet().Annotations[AnnotationInputs]
	}
	a, b := testSpec(), testSpec()
	a1, a2 := inputs(a)
	b1, b2 := inputs(b)
	assert.Equal(t, a1, b1, "the same inputs hash alike")
	assert.Equal(t, a2, b2)
	b.Image = "cluster-provider/controlplane:v1.37.2"
	b1, b2 = inputs(b)
	assert.NotEqual(t, a1, b1)
	assert.NotEqual(t, a2, b2)
	c := testSpec()
	c.APIServer = *DefaultAPIServer.DeepCopy()
	c.APIServer.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi")
	c1, c2 := inputs(c)
	assert.NotEqual(t, a1, c1)
	assert.Equal(t, a2, c2, "etcd is not made from the API server's resources: it does not roll")

	// The hash covers the rendered object, not only the Spec: a template change made by a new
	// release (here: an argument) changes it, the annotation itself does not count.
	dep := a.APIServerDeployment()
	assert.Equal(t, dep.Annotations[AnnotationInputs], Rendered(dep))
	dep.Spec.Template.Spec.InitContainers[0].Args = append(dep.Spec.Template.Spec.InitContainers[0].Args, "--v=4")
	assert.NotEqual(t, a1, Rendered(dep))
}

func TestExternalService(t *testing.T) {
	s := testSpec()
	assert.Equal(t, corev1.ServiceTypeNodePort, s.ExternalService().Spec.Type, "NodePort by default")
	s.Exposure = corev1.ServiceTypeLoadBalancer
	assert.Equal(t, corev1.ServiceTypeLoadBalancer, s.ExternalService().Spec.Type)
	assert.Equal(t, corev1.ServiceType(""), corev1.ServiceType(s.InternalService().Spec.Type), "ClusterIP")
	assert.Equal(t, int32(443), s.InternalService().Spec.Ports[0].Port)
	assert.True(t, s.EtcdService().Spec.PublishNotReadyAddresses)
}

func TestServingHosts(t *testing.T) {
	h := ServingHosts("hcp-x", "198.18.0.0/16", []string{"172.18.0.3", ""})
	for _, want := range []string{"apiserver.hcp-x.svc", "127.0.0.1", "198.18.0.1", "kubernetes.default.svc", "172.18.0.3"} {
		assert.Contains(t, h, want)
	}
	assert.NotContains(t, h, "")
}

func typesUID(s string) types.UID { return types.UID(s) }

// TestHighAvailabilityPlan: a highly available control plane is three etcd members (TLS between
// them, peers only with the peer certificate, started together, one per node) and two API
// servers (one per node per revision, every member as --etcd-servers), with budgets that let a
// drain take one pod of each at a time and a PriorityClass; a single one has none of it.
func TestHighAvailabilityPlan(t *testing.T) {
	single, ha := testSpec(), testSpec()
	single.StorageClassName, ha.StorageClassName = "fast", "fast"
	ha.HighAvailability = true
	ns := ha.Namespace

	sts := ha.EtcdStatefulSet()
	assert.Equal(t, int32(3), *sts.Spec.Replicas)
	assert.Equal(t, NameEtcdPeer, sts.Spec.ServiceName, "the headless Service names the members")
	assert.Equal(t, appsv1.ParallelPodManagement, sts.Spec.PodManagementPolicy, "a member is ready only with a quorum: they start together")
	etcd := container(t, sts.Spec.Template.Spec, containerEtcd)
	f := flags(t, etcd.Args)
	assert.Equal(t, "$(POD_NAME)", f["--name"])
	assert.Equal(t, "metadata.name", etcd.Env[len(etcd.Env)-1].ValueFrom.FieldRef.FieldPath)
	assert.Equal(t, "https://0.0.0.0:2380", f["--listen-peer-urls"])
	assert.Equal(t, "https://$(POD_NAME).etcd-peer."+ns+".svc:2380", f["--initial-advertise-peer-urls"])
	assert.Equal(t, "https://$(POD_NAME).etcd-peer."+ns+".svc:2379", f["--advertise-client-urls"])
	assert.Equal(t, fmt.Sprintf("etcd-0=https://etcd-0.etcd-peer.%[1]s.svc:2380,etcd-1=https://etcd-1.etcd-peer.%[1]s.svc:2380,etcd-2=https://etcd-2.etcd-peer.%[1]s.svc:2380", ns), f["--initial-cluster"])
	assert.Equal(t, "true", f["--peer-client-cert-auth"])
	assert.Equal(t, etcdPeerCN, f["--peer-cert-allowed-cn"])
	assert.Equal(t, "new", f["--initial-cluster-state"])
	assert.Equal(t, "true", f["--client-cert-auth"])
	var projected []string
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				for _, it := range src.Secret.Items {
					projected = append(projected, it.Path)
				}
			}
		}
	}
	assert.Subset(t, projected, []string{"peer.crt", "peer.key", "peer-client.crt", "peer-client.key", "server.crt", "ca.crt"})
	assert.Equal(t, "/etc/etcd/pki/peer-client.crt", f["--peer-client-cert-file"])

	dep := ha.APIServerDeployment()
	assert.Equal(t, int32(2), *dep.Spec.Replicas)
	api := container(t, dep.Spec.Template.Spec, containerAPIServer)
	assert.Equal(t, fmt.Sprintf("https://etcd-0.etcd-peer.%[1]s.svc:2379,https://etcd-1.etcd-peer.%[1]s.svc:2379,https://etcd-2.etcd-peer.%[1]s.svc:2379", ns),
		flags(t, api.Args)["--etcd-servers"])

	for _, pod := range []corev1.PodSpec{sts.Spec.Template.Spec, dep.Spec.Template.Spec} {
		assert.Equal(t, PriorityClassControlPlane, pod.PriorityClassName)
		req := pod.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
		require.Len(t, req, 1)
		assert.Equal(t, corev1.LabelHostname, req[0].TopologyKey)
	}
	assert.Empty(t, sts.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].MatchLabelKeys, "no two members on a node, ever")
	assert.Equal(t, []string{appsv1.DefaultDeploymentUniqueLabelKey}, dep.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].MatchLabelKeys,
		"a rollout's new API servers may start beside the old ones")

	kinds := map[string]int{}
	for _, o := range ha.Objects() {
		kinds[fmt.Sprintf("%T/%s", o, o.GetName())]++
	}
	assert.Equal(t, 1, kinds["*v1.PodDisruptionBudget/etcd"])
	assert.Equal(t, 1, kinds["*v1.PodDisruptionBudget/apiserver"])
	assert.Equal(t, 1, kinds["*v1.Service/etcd-peer"])
	for _, c := range []string{ComponentEtcd, ComponentAPIServer} {
		pdb := ha.DisruptionBudget(c)
		assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MaxUnavailable)
		assert.Equal(t, ha.selector(c), pdb.Spec.Selector.MatchLabels)
	}
	peer := ha.EtcdPeerService()
	assert.True(t, peer.Spec.PublishNotReadyAddresses, "members find one another before they are ready")
	assert.Equal(t, corev1.ClusterIPNone, peer.Spec.ClusterIP)

	np := ha.EtcdNetworkPolicy()
	var peerIn, peerOut bool
	for _, r := range np.Spec.Ingress {
		peerIn = peerIn || (r.Ports[0].Port.IntVal == portEtcdPeer && r.From[0].PodSelector != nil)
	}
	for _, r := range np.Spec.Egress {
		peerOut = peerOut || (r.Ports[0].Port.IntVal == portEtcdPeer && r.To[0].PodSelector != nil)
	}
	assert.True(t, peerIn && peerOut, "the members reach one another's peer port: %+v", np.Spec)
	assert.Empty(t, single.EtcdNetworkPolicy().Spec.Egress, "a single etcd reaches nothing")

	// A single control plane: as before.
	assert.Equal(t, int32(1), *single.EtcdStatefulSet().Spec.Replicas)
	assert.Equal(t, NameEtcd, single.EtcdStatefulSet().Spec.ServiceName)
	assert.Equal(t, int32(1), *single.APIServerDeployment().Spec.Replicas)
	assert.Empty(t, single.APIServerDeployment().Spec.Template.Spec.PriorityClassName)
	assert.Empty(t, single.EtcdStatefulSet().Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
	assert.Len(t, single.Objects(), 7, "no budget, no peer Service")
	assert.Equal(t, "https://etcd."+ns+".svc:2379", flags(t, container(t, single.APIServerDeployment().Spec.Template.Spec, containerAPIServer).Args)["--etcd-servers"])
}

// TestRestorePlan: a restored etcd runs the folder the restore made, after an init container that
// restores the snapshot there as the member it is (and does nothing once it exists), with the
// token from an optional Secret (gone after the restore); while a restore runs etcd may reach the
// serve; the API servers carry the restore's mark. Nothing of it without a restore.
func TestRestorePlan(t *testing.T) {
	for _, ha := range []bool{false, true} {
		s := testSpec()
		s.StorageClassName, s.HighAvailability = "fast", ha
		plain := s.EtcdStatefulSet()
		assert.Empty(t, plain.Spec.Template.Spec.InitContainers)
		assert.Equal(t, "/var/lib/etcd/data", flags(t, container(t, plain.Spec.Template.Spec, containerEtcd).Args)["--data-dir"])

		s.EtcdDataDir = "restored-20261126T010000Z"
		s.EtcdRestore = &RestoreSource{URL: serveURL(s.Namespace), SHA256: "ab"}
		s.Restoring, s.RestoredMark = true, "restored-20261126T010000Z"
		sts := s.EtcdStatefulSet()
		require.Len(t, sts.Spec.Template.Spec.InitContainers, 1)
		init := sts.Spec.Template.Spec.InitContainers[0]
		f := flags(t, init.Args[1:])
		assert.Equal(t, "restore", init.Args[0])
		assert.Equal(t, "/var/lib/etcd/restored-20261126T010000Z", f["--data-dir"])
		assert.Equal(t, f["--data-dir"], flags(t, container(t, sts.Spec.Template.Spec, containerEtcd).Args)["--data-dir"])
		assert.Equal(t, "ab", f["--sha256"])
		assert.Equal(t, "https://restore-"+s.Namespace+".cluster-provider-backups.svc:8443/snapshot", f["--url"])
		assert.False(t, *init.SecurityContext.AllowPrivilegeEscalation)
		etcdFlags := flags(t, container(t, sts.Spec.Template.Spec, containerEtcd).Args)
		if ha {
			assert.Equal(t, "$(POD_NAME)", f["--name"])
			assert.Equal(t, etcdFlags["--initial-cluster"], f["--initial-cluster"], "the members as etcd knows them")
			assert.Equal(t, etcdFlags["--initial-advertise-peer-urls"], f["--initial-advertise-peer-urls"])
		} else {
			assert.Equal(t, "default", f["--name"])
			assert.Equal(t, etcdFlags["--initial-cluster"], f["--initial-cluster"])
		}
		var token *corev1.Volume
		for i, v := range sts.Spec.Template.Spec.Volumes {
			if v.Name == "restore" {
				token = &sts.Spec.Template.Spec.Volumes[i]
			}
		}
		require.NotNil(t, token)
		assert.Equal(t, SecretRestoreToken, token.Secret.SecretName)
		assert.True(t, *token.Secret.Optional, "a pod restarted after the restore starts without it")

		np := s.EtcdNetworkPolicy()
		last := np.Spec.Egress[len(np.Spec.Egress)-1]
		if !ha {
			last = np.Spec.Egress[0]
		}
		assert.Equal(t, intstr.FromInt32(portServe), *last.Ports[0].Port, "%+v", np.Spec.Egress)
		assert.Equal(t, s.selector(ComponentServe), last.To[0].PodSelector.MatchLabels)
		assert.Equal(t, "restored-20261126T010000Z", s.APIServerDeployment().Spec.Template.Annotations[AnnotationRestored])
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

// TestAuditAndEncryptionPlan: with Spec.Audit the API server writes its audit log (the policy
// of its ConfigMap, Metadata only) onto a size-capped volume which a sidecar of the control-plane
// image streams to its output; with Spec.Encryption it reads its EncryptionConfiguration from the
// encryption Secret, and the pod template carries its checksum. Without them, neither.
func TestAuditAndEncryptionPlan(t *testing.T) {
	for _, c := range []struct {
		name              string
		audit, ha         bool
		encryption        string
		wantObjectsExtras int
	}{
		{name: "neither"},
		{name: "audit", audit: true, wantObjectsExtras: 1},
		{name: "audit, highly available", audit: true, ha: true, wantObjectsExtras: 1},
		{name: "encryption", encryption: "abc123"},
		{name: "both", audit: true, encryption: "abc123", wantObjectsExtras: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := testSpec()
			s := testSpec()
			s.Audit, s.Encryption = c.audit, c.encryption
			if c.ha {
				base.HighAvailability, base.StorageClassName = true, "fast"
				s.HighAvailability, s.StorageClassName = true, "fast"
			}
			assert.Len(t, s.Objects(), len(base.Objects())+c.wantObjectsExtras)
			dep := s.APIServerDeployment()
			pod := dep.Spec.Template.Spec
			f := flags(t, container(t, pod, containerAPIServer).Args)
			names := func() (n []string) {
				for _, c := range pod.Containers {
					n = append(n, c.Name)
				}
				return n
			}()

			if c.audit {
				assert.Equal(t, "/etc/kubernetes/audit/policy.yaml", f["--audit-policy-file"])
				assert.Equal(t, "/var/log/kubernetes/audit/audit.log", f["--audit-log-path"])
				assert.Equal(t, "50", f["--audit-log-maxsize"])
				sidecar := container(t, pod, containerAudit)
				assert.Equal(t, s.Image, sidecar.Image)
				assert.Equal(t, []string{"/usr/local/bin/audit-log", "--file=/var/log/kubernetes/audit/audit.log"}, sidecar.Command)
				assert.True(t, *sidecar.SecurityContext.ReadOnlyRootFilesystem)
				assert.True(t, sidecar.VolumeMounts[0].ReadOnly, "the sidecar only reads the log")
				req, limit := sidecar.Resources.Requests[corev1.ResourceMemory], sidecar.Resources.Limits[corev1.ResourceMemory]
				assert.Equal(t, c.ha, req.Equal(limit), "highly available: memory requested as limited, as every container of it (%s of %s)", req.String(), limit.String())
				var vol *corev1.Volume
				for i := range pod.Volumes {
					if pod.Volumes[i].Name == "audit-log" {
						vol = &pod.Volumes[i]
					}
				}
				require.NotNil(t, vol)
				assert.Equal(t, "300Mi", vol.EmptyDir.SizeLimit.String(), "five files of 50 MB and room")
				cm := s.AuditPolicyConfigMap()
				assert.Contains(t, cm.Data[auditPolicyKey], "level: Metadata")
				assert.NotContains(t, cm.Data[auditPolicyKey], "RequestResponse", "no body is ever logged")
			} else {
				assert.NotContains(t, f, "--audit-policy-file")
				assert.NotContains(t, names, containerAudit)
			}

			mounted := false
			for _, v := range pod.Volumes {
				if v.Name == "pki" {
					for _, src := range v.Projected.Sources {
						mounted = mounted || src.Secret.Name == SecretEncryption
					}
				}
			}
			assert.Equal(t, c.encryption != "", mounted)
			assert.Equal(t, c.encryption, dep.Spec.Template.Annotations[AnnotationEncryption])
			if c.encryption != "" {
				assert.Equal(t, "/etc/kubernetes/pki/encryption-config.yaml", f["--encryption-provider-config"])
			} else {
				assert.NotContains(t, f, "--encryption-provider-config")
			}
			if c.audit || c.encryption != "" {
				assert.NotEqual(t, Rendered(base.APIServerDeployment()), Rendered(dep), "a change rolls the API servers")
			}
		})
	}
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
