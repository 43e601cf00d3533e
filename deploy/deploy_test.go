// Package deploy holds the operator's manifests; its test is `make deploy-check`: every
// kustomization builds, and the API server (envtest, with the project's CRDs) accepts every
// object it yields in a server-side dry-run apply.
package deploy

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/openmcp-local/cluster-provider/deploy/policy"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// kustomizations are the bases and overlays of deploy/.
var kustomizations = []string{"default", filepath.Join("overlays", "ephemeral"), "hosted"}

func TestKustomizationsApply(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			objs := build(t, dir)
			require.NotEmpty(t, objs)
			ctx := context.Background()
			// Namespaces are created for real: a dry run does not make the namespace the
			// other objects need.
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					err := env.Client.Create(ctx, o.DeepCopy())
					require.True(t, err == nil || apierrors.IsAlreadyExists(err), "%v", err)
				}
			}
			for _, o := range objs {
				err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
					client.DryRunAll, client.FieldOwner("deploy-check"), client.ForceOwnership)
				assert.NoError(t, err, "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
			}
		})
	}
}

// TestDeployment checks what the Deployment of each kustomization promises: leader election,
// probes, a non-root container with a read-only root filesystem, limits, the state volume.
func TestDeployment(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			var d *appsv1.Deployment
			for _, o := range build(t, dir) {
				if o.GetKind() == "Deployment" {
					d = &appsv1.Deployment{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
				}
			}
			require.NotNil(t, d, "a Deployment")
			pod := d.Spec.Template.Spec
			require.Len(t, pod.Containers, 1)
			c := pod.Containers[0]
			assert.Contains(t, c.Args, "--leader-elect")
			assert.Contains(t, c.Args, "--leader-election-namespace=$(POD_NAMESPACE)")
			assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
			assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
			assert.True(t, *pod.SecurityContext.RunAsNonRoot)
			assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
			assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
			assert.False(t, c.Resources.Limits.Memory().IsZero())
			assert.False(t, c.Resources.Requests.Cpu().IsZero())
			var env []string
			for _, e := range c.Env {
				env = append(env, e.Name)
			}
			assert.Subset(t, env, []string{"POD_NAMESPACE", "PROVIDER_NAME", "ENVIRONMENT"})
			if dir == "hosted" {
				// Stateless: two replicas, rolled one by one, the hosted backend on, the local off.
				assert.Equal(t, int32(2), *d.Spec.Replicas)
				assert.Equal(t, appsv1.RollingUpdateDeploymentStrategyType, d.Spec.Strategy.Type)
				assert.Equal(t, 0, d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue())
				assert.Contains(t, c.Args, "--hosted-backend")
				for _, a := range c.Args {
					assert.NotContains(t, a, "--local-binaries")
				}
				return
			}
			assert.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type, "never two pods on the claim")
		})
	}
}

// TestStateVolume: deploy/default keeps the clusters' state on its PersistentVolumeClaim (no data
// lost with the pod); the ephemeral overlay keeps it in an emptyDir and yields no claim.
func TestStateVolume(t *testing.T) {
	for _, tc := range []struct {
		dir   string
		claim bool
	}{
		{"default", true},
		{filepath.Join("overlays", "ephemeral"), false},
		{"hosted", false},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			var d *appsv1.Deployment
			var claims []string
			for _, o := range build(t, tc.dir) {
				switch o.GetKind() {
				case "Deployment":
					d = &appsv1.Deployment{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
				case "PersistentVolumeClaim":
					claims = append(claims, o.GetNamespace()+"/"+o.GetName())
				}
			}
			require.NotNil(t, d)
			var state *corev1.Volume
			for i, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == "state" {
					state = &d.Spec.Template.Spec.Volumes[i]
				}
			}
			require.NotNil(t, state, "the state volume")
			if tc.claim {
				require.NotNil(t, state.PersistentVolumeClaim, "the state is on a claim")
				assert.Nil(t, state.EmptyDir)
				assert.Equal(t, []string{"cluster-provider-system/" + state.PersistentVolumeClaim.ClaimName}, claims, "the claim is part of the output")
			} else {
				assert.NotNil(t, state.EmptyDir)
				assert.Nil(t, state.PersistentVolumeClaim)
				assert.Empty(t, claims, "no claim")
			}
		})
	}
}

// build runs kustomize on deploy/<dir>.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build deploy/%s", dir)
	var out []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		data, err := r.MarshalJSON()
		require.NoError(t, err)
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(data))
		out = append(out, u)
	}
	return out
}

// TestNetworkPolicy checks the promises of deploy/default/networkpolicy.yaml in every
// kustomization: it selects the operator's pod, admits the pod's own ports (the local clusters'
// API servers on the kernel's ephemeral ports, metrics, probes), and lets the pod reach DNS and
// port 443/6443 only, never a metadata endpoint.
func TestNetworkPolicy(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			var d *appsv1.Deployment
			var policies []*networkingv1.NetworkPolicy
			for _, o := range build(t, dir) {
				switch o.GetKind() {
				case "Deployment":
					d = &appsv1.Deployment{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
				case "NetworkPolicy":
					np := &networkingv1.NetworkPolicy{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, np))
					policies = append(policies, np)
				}
			}
			require.NotNil(t, d)
			require.Len(t, policies, 1, "one NetworkPolicy")
			np := policies[0]
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			require.NoError(t, err)
			assert.True(t, sel.Matches(labels.Set(d.Spec.Template.Labels)), "the policy selects the operator's pod (%s)", sel)
			assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)

			// Ingress: every port the container declares, and the whole default ephemeral range,
			// where the local clusters' API servers listen.
			for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
				assert.True(t, ingressAdmits(np, p.ContainerPort), "ingress admits container port %s (%d)", p.Name, p.ContainerPort)
			}
			for _, port := range []int32{32768, 45000, 60999} {
				assert.True(t, ingressAdmits(np, port), "ingress admits the ephemeral port %d", port)
			}
			assert.False(t, ingressAdmits(np, 2379), "no other port (etcd's default)")
			assert.False(t, ingressAdmits(np, 10257), "no other port (the controller manager's default)")

			// Egress: every rule names its ports; only DNS, 443 and 6443; no metadata address.
			var ports []string
			for _, r := range np.Spec.Egress {
				require.NotEmpty(t, r.Ports, "an egress rule without ports admits every port")
				require.NotEmpty(t, r.To, "an egress rule without peers admits every destination")
				for _, p := range r.Ports {
					ports = append(ports, fmt.Sprintf("%s/%s", *p.Protocol, p.Port.String()))
					assert.Nil(t, p.EndPort, "no egress port range")
				}
				for _, peer := range r.To {
					assert.Nil(t, peer.PodSelector, "no pod selector in egress: kustomize's labels would narrow it to the operator's own pods")
					if peer.IPBlock != nil {
						_, block, err := net.ParseCIDR(peer.IPBlock.CIDR)
						require.NoError(t, err)
						if block.Contains(net.ParseIP("169.254.169.254")) {
							assert.True(t, excepted(t, peer.IPBlock, "169.254.169.254"), "the metadata address is excepted from %s", peer.IPBlock.CIDR)
						}
					}
				}
			}
			assert.ElementsMatch(t, []string{"UDP/53", "TCP/53", "TCP/443", "TCP/6443"}, ports)
		})
	}
}

// ingressAdmits reports whether some ingress rule of np admits TCP port from anywhere.
func ingressAdmits(np *networkingv1.NetworkPolicy, port int32) bool {
	for _, r := range np.Spec.Ingress {
		if len(r.From) != 0 {
			continue
		}
		for _, p := range r.Ports {
			if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
				continue
			}
			lo := p.Port.IntVal
			hi := lo
			if p.EndPort != nil {
				hi = *p.EndPort
			}
			if port >= lo && port <= hi {
				return true
			}
		}
	}
	return false
}

// excepted reports whether ip is in one of block's exceptions.
func excepted(t *testing.T, block *networkingv1.IPBlock, ip string) bool {
	for _, e := range block.Except {
		_, n, err := net.ParseCIDR(e)
		require.NoError(t, err)
		if n.Contains(net.ParseIP(ip)) {
			return true
		}
	}
	return false
}

// TestPoliciesTwoAppliers: the objects of deploy/policy are applied by two field managers,
// `cluster-provider init` and `kubectl apply --server-side -k` of a deploy/ base, in any order
// and again, and never conflict (make e2e-kind applies deploy/hosted after openMCP's init Job).
// A field the API server defaults inside an atomic one (matchConstraints) would make them.
func TestPoliciesTwoAppliers(t *testing.T) {
	ctx := t.Context()
	pols, err := policy.Objects()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, u := range pols {
		names[u.GetKind()+"/"+u.GetName()] = true
	}
	var objs []*unstructured.Unstructured
	for _, o := range build(t, "hosted") {
		if names[o.GetKind()+"/"+o.GetName()] {
			objs = append(objs, o)
		}
	}
	require.Len(t, objs, len(pols), "every object of deploy/policy is in the deploy/ base")
	initApply := func() {
		for _, u := range pols { // as init applies them
			require.NoError(t, env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("cluster-provider"), client.ForceOwnership))
		}
	}
	kubectlApply := func() {
		for _, o := range objs { // as kubectl apply --server-side does: no force
			u := o.DeepCopy()
			u.SetNamespace("") // kustomize's namespace on cluster-scoped objects, which the API server drops
			assert.NoError(t, env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kubectl")),
				"%s %s", o.GetKind(), o.GetName())
		}
	}
	kubectlApply() // testenv applied them as init does
	initApply()
	kubectlApply()
}

// TestInitRoleNamesEveryPolicy: deploy/rbac/init_role.yaml lets init patch every admission policy
// and binding of deploy/policy by name (a policy added without its name there fails init).
func TestInitRoleNamesEveryPolicy(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("rbac", "init_role.yaml"))
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{}
	require.NoError(t, yaml.UnmarshalStrict(data, role))
	granted := map[string]bool{}
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "admissionregistration.k8s.io") && slices.Contains(r.Verbs, "patch") {
			for _, res := range r.Resources {
				for _, n := range r.ResourceNames {
					granted[res+"/"+n] = true
				}
			}
		}
	}
	pols, err := policy.Objects()
	require.NoError(t, err)
	for _, u := range pols {
		res := map[string]string{"ValidatingAdmissionPolicy": "validatingadmissionpolicies",
			"ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}[u.GetKind()]
		if res != "" {
			assert.True(t, granted[res+"/"+u.GetName()], "init_role.yaml lets init patch %s %s", u.GetKind(), u.GetName())
		}
	}
}
