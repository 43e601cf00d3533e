package hosted

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

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
			assert.Equal(t, "/health", c.ReadinessProbe.HTTPGet.Path, "ready: in the quorum (a leader, a linearizable read)")
			assert.Equal(t, "/health?serializable=true&exclude=NOSPACE", c.LivenessProbe.HTTPGet.Path, "alive: lenient, no leader needed")
			assert.Equal(t, "/health?serializable=true", c.StartupProbe.HTTPGet.Path)
		})
	}
}

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
	assert.Subset(t, projectedPaths(sts.Spec.Template.Spec), []string{"peer.crt", "peer.key", "peer-client.crt", "peer-client.key", "server.crt", "ca.crt"})
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
	assert.True(t, peersReach(np), "the members reach one another's peer port: %+v", np.Spec)
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

// projectedPaths are the paths of the Secrets' items projected into pod's volumes.
func projectedPaths(pod corev1.PodSpec) []string {
	var projected []string
	for _, v := range pod.Volumes {
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				for _, it := range src.Secret.Items {
					projected = append(projected, it.Path)
				}
			}
		}
	}
	return projected
}

// peersReach reports whether np lets etcd's members reach one another's peer port, both ways.
func peersReach(np *networkingv1.NetworkPolicy) bool {
	var peerIn, peerOut bool
	for _, r := range np.Spec.Ingress {
		peerIn = peerIn || (r.Ports[0].Port.IntVal == portEtcdPeer && r.From[0].PodSelector != nil)
	}
	for _, r := range np.Spec.Egress {
		peerOut = peerOut || (r.Ports[0].Port.IntVal == portEtcdPeer && r.To[0].PodSelector != nil)
	}
	return peerIn && peerOut
}
