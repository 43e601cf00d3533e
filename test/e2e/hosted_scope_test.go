package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestHostedScopeOnKind checks deploy/hosted's least privilege on the kind platform it is deployed
// to (issue 33), for deploy/hosted's ServiceAccount and, under openMCP, for the one openMCP's
// operator binds to cluster-admin: as it (impersonated), annotating a pod of kube-system
// and creating a Deployment in default are forbidden (deploy/hosted/hosted_scope.yaml), and so is
// kubectl's own attempt; what the hosted backend does in its namespaces stays allowed (the other
// hosted tests run the operator under the same policy).
func TestHostedScopeOnKind(t *testing.T) {
	c, kubeconfig, _ := hostedTarget(t)
	ctx := context.Background()
	// deploy/hosted's ServiceAccount, or the one openMCP's operator makes (E2E_OPERATOR_SA).
	sa := envOr("E2E_OPERATOR_SA", "system:serviceaccount:cluster-provider-system:cluster-provider")
	parts := strings.Split(sa, ":")
	require.Len(t, parts, 4, "E2E_OPERATOR_SA is system:serviceaccount:<namespace>:<name>")
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: sa,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + parts[2], "system:authenticated"}}
	op, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)

	pods := &corev1.PodList{}
	require.NoError(t, c.List(ctx, pods, client.InNamespace("kube-system")))
	require.NotEmpty(t, pods.Items)
	p := &pods.Items[0]
	patch := client.MergeFrom(p.DeepCopy())
	p.Annotations = map[string]string{"hosted.clusters.openmcp.cloud/authn": "takeover"}
	err = op.Patch(ctx, p, patch, client.DryRunAll)
	require.True(t, apierrors.IsForbidden(err), "annotating pod kube-system/%s: %v", p.Name, err)
	assert.Contains(t, err.Error(), "cluster-provider operator writes only")

	l := map[string]string{"app": "takeover"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "takeover"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: l}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}
	err = op.Create(ctx, dep, client.DryRunAll)
	require.True(t, apierrors.IsForbidden(err), "a Deployment in default: %v", err)
	assert.Contains(t, err.Error(), "cluster-provider operator writes only")

	// What kubectl says to whoever tries, as the operator.
	out, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "--as", sa, "-n", "kube-system",
		"annotate", "pod", pods.Items[0].Name, "takeover=1", "--dry-run=server").CombinedOutput()
	require.Error(t, err, "%s", out)
	assert.Contains(t, string(out), "cluster-provider operator writes only")

	// Its own namespaces stay writable: a new control plane's namespace.
	require.NoError(t, op.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hcp-scope-check"}}, client.DryRunAll))
	t.Logf("refused as %s: %s", sa, strings.TrimSpace(string(out)))
}

// checkPolicies checks the NetworkPolicies of cl's control plane against the kind platform (whose
// network plugin does not enforce them: selectors and ports are what can be checked): its
// namespace denies by default, each of its pods is selected by a policy of its own component, and
// the DNS its pods may ask is the platform's real DNS pods.
func checkPolicies(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	ctx := context.Background()
	ns := hosted.NamespaceFor(cl.UID)
	nps := &networkingv1.NetworkPolicyList{}
	require.NoError(t, c.List(ctx, nps, client.InNamespace(ns)))
	pods := &corev1.PodList{}
	require.NoError(t, c.List(ctx, pods, client.InNamespace(ns)))
	require.NotEmpty(t, pods.Items)
	deny := false
	for _, np := range nps.Items {
		if np.Name == hosted.NameDefaultDeny {
			deny = len(np.Spec.PodSelector.MatchLabels) == 0 && len(np.Spec.Ingress) == 0 && len(np.Spec.Egress) == 0 && len(np.Spec.PolicyTypes) == 2
		}
		for _, e := range np.Spec.Egress {
			for _, to := range e.To {
				if to.PodSelector == nil || to.NamespaceSelector == nil || to.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "kube-system" {
					continue
				}
				dns := &corev1.PodList{}
				require.NoError(t, c.List(ctx, dns, client.InNamespace("kube-system"), client.MatchingLabels(to.PodSelector.MatchLabels)))
				assert.NotEmpty(t, dns.Items, "NetworkPolicy %s/%s lets DNS be asked of pods %v of kube-system: the platform has some", ns, np.Name, to.PodSelector.MatchLabels)
			}
		}
	}
	assert.True(t, deny, "namespace %s denies by default (NetworkPolicy %s)", ns, hosted.NameDefaultDeny)
	for _, p := range pods.Items {
		own := false
		for _, np := range nps.Items {
			if np.Name != hosted.NameDefaultDeny && len(np.Spec.PodSelector.MatchLabels) > 0 &&
				labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(p.Labels)) {
				own = true
			}
		}
		assert.True(t, own, "pod %s/%s is selected by a policy of its component", ns, p.Name)
	}
}
