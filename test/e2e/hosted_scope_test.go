package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
)

// TestHostedScopeOnKind checks the operator's least privilege on the kind platform it is deployed
// to (issues 33 and 40), for deploy/hosted's ServiceAccount and, under openMCP, for cp-local, which
// openMCP's operator binds to cluster-admin: as it (kubectl --as, --dry-run=server), every write of
// point 3 of issue 40 is refused (deploy/policy/operator.yaml, which cluster-provider init
// applied), and deploy/hosted's ServiceAccount is not granted what RBAC need not grant (kubectl auth
// can-i). What the hosted backend does in its namespaces stays allowed: the other hosted tests run
// the operator under the same policy.
func TestHostedScopeOnKind(t *testing.T) {
	t.Parallel() // its own Cluster only: beside the others (doc.go)
	c, kubeconfig, _ := hostedTarget(t)
	ctx := context.Background()
	// deploy/hosted's ServiceAccount, or the one openMCP's operator makes (E2E_OPERATOR_SA).
	sa := envOr("E2E_OPERATOR_SA", "system:serviceaccount:cluster-provider-system:cluster-provider")
	parts := strings.Split(sa, ":")
	require.Len(t, parts, 4, "E2E_OPERATOR_SA is system:serviceaccount:<namespace>:<name>")
	own := parts[2]
	openMCP := own != "cluster-provider-system"

	pods := &corev1.PodList{}
	require.NoError(t, c.List(ctx, pods, client.InNamespace("kube-system")))
	require.NotEmpty(t, pods.Items)
	systemPod := pods.Items[0].Name
	kubectl := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command("kubectl", append([]string{"--kubeconfig", kubeconfig, "--as", sa}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	// A namespace of the operator's, to try what it must not do even there. Only the operator
	// makes one: the platform's administrator (kind's, a cluster-admin outside system:masters) is
	// refused, and makes it as the operator (impersonation, the break-glass path).
	owned := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hcp-scope-check", Labels: map[string]string{
		hosted.LabelManagedBy: hosted.ManagedBy, "pod-security.kubernetes.io/enforce": "restricted"}}}
	err := c.Create(ctx, owned.DeepCopy())
	require.True(t, apierrors.IsForbidden(err), "the administrator makes an hcp-* namespace: %v", err)
	assert.Contains(t, err.Error(), "are made by the cluster-provider operator only")
	out, err := kubectl(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+owned.Name+`",
"labels":{"app.kubernetes.io/managed-by":"cluster-provider-hosted","pod-security.kubernetes.io/enforce":"restricted"}}}`, "create", "-f", "-")
	require.True(t, err == nil || strings.Contains(out, "AlreadyExists"), "%s", out)
	t.Cleanup(func() { _ = c.Delete(context.Background(), owned) })
	apply := func(manifest string) func() (string, error) {
		return func() (string, error) { return kubectl(manifest, "create", "--dry-run=server", "-f", "-") }
	}
	refused := []struct {
		what string
		do   func() (string, error)
	}{
		{"annotate a pod of kube-system", func() (string, error) {
			return kubectl("", "-n", "kube-system", "annotate", "pod", systemPod, "takeover=1", "--dry-run=server")
		}},
		{"a Deployment in default", func() (string, error) {
			return kubectl("", "-n", "default", "create", "deployment", "takeover", "--image=registry.example/x:1", "--dry-run=server")
		}},
		{"a privileged hostPath Job in its own namespace", apply(`{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"takeover","namespace":"` + own + `"},
"spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"registry.example/x:1","securityContext":{"privileged":true}}],
"volumes":[{"name":"root","hostPath":{"path":"/"}}]}}}}`)},
		{"a DaemonSet in kube-system", apply(`{"apiVersion":"apps/v1","kind":"DaemonSet","metadata":{"name":"takeover","namespace":"kube-system"},
"spec":{"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"containers":[{"name":"c","image":"registry.example/x:1"}]}}}}`)},
		{"a CronJob in its namespace", apply(`{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"takeover","namespace":"` + owned.Name + `"},
"spec":{"schedule":"* * * * *","jobTemplate":{"spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"registry.example/x:1"}]}}}}}}`)},
		{"a service-account-token Secret in kube-system", apply(`{"apiVersion":"v1","kind":"Secret","type":"kubernetes.io/service-account-token",
"metadata":{"name":"takeover","namespace":"kube-system","labels":{"app.kubernetes.io/managed-by":"cluster-provider.openmcp.cloud"},
"annotations":{"kubernetes.io/service-account.name":"clusterrole-aggregation-controller"}}}`)},
		{"a namespace hcp-* without the Pod Security label", apply(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"hcp-drill",
"labels":{"app.kubernetes.io/managed-by":"cluster-provider-hosted"}}}`)},
		{"the Pod Security label of its namespace removed", func() (string, error) {
			return kubectl("", "label", "namespace", owned.Name, "pod-security.kubernetes.io/enforce-", "--dry-run=server")
		}},
		{"a Service with externalIPs in its namespace", apply(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"takeover","namespace":"` + owned.Name + `"},
"spec":{"ports":[{"port":443}],"externalIPs":["203.0.113.7"]}}`)},
		{"a token of a ServiceAccount of kube-system", func() (string, error) {
			return kubectl(`{"apiVersion":"authentication.k8s.io/v1","kind":"TokenRequest","spec":{}}`, "create", "--raw",
				"/api/v1/namespaces/kube-system/serviceaccounts/clusterrole-aggregation-controller/token?dryRun=All", "-f", "-")
		}},
		{"exec into a pod of kube-system", func() (string, error) {
			return kubectl("", "-n", "kube-system", "exec", systemPod, "--", "true")
		}},
		{"a ServiceAccount in kube-system", func() (string, error) {
			return kubectl("", "-n", "kube-system", "create", "serviceaccount", "takeover", "--dry-run=server")
		}},
		{"a RoleBinding of cluster-admin in its namespace", func() (string, error) {
			return kubectl("", "-n", owned.Name, "create", "rolebinding", "takeover", "--clusterrole=cluster-admin", "--user=takeover", "--dry-run=server")
		}},
		{"a ClusterRoleBinding", func() (string, error) {
			return kubectl("", "create", "clusterrolebinding", "takeover", "--clusterrole=cluster-admin", "--user=takeover", "--dry-run=server")
		}},
	}
	for _, r := range refused {
		out, err := r.do()
		if !assert.Error(t, err, "%s: allowed: %s", r.what, out) {
			continue
		}
		assert.Contains(t, strings.ToLower(out), "forbidden", r.what)
		if openMCP { // cluster-admin: the policy refuses, not RBAC
			assert.Contains(t, out, "cluster-provider operator", r.what)
		}
		t.Logf("refused as %s: %s: %s", sa, r.what, out)
	}
	if !openMCP {
		// RBAC grants deploy/hosted's ServiceAccount none of these.
		for _, can := range [][]string{
			{"create", "pods/exec", "-n", "kube-system"},
			// (a subresource is a flag of kubectl auth can-i: "serviceaccounts/token" would name a
			// ServiceAccount "token", which deploy/hosted may create, the policy only in its namespaces)
			{"create", "serviceaccounts", "--subresource=token", "-n", "kube-system"},
			{"update", "pods/ephemeralcontainers", "-n", "kube-system"},
			{"create", "daemonsets", "-A"},
			{"create", "cronjobs", "-A"},
			{"create", "clusterrolebindings"},
			{"delete", "validatingadmissionpolicybindings"},
		} {
			out, _ := kubectl("", append([]string{"auth", "can-i"}, can...)...)
			// The answer is the last line (kubectl warns first of a cluster-scoped resource).
			lines := strings.Split(out, "\n")
			assert.Equal(t, "no", strings.TrimSpace(lines[len(lines)-1]), "auth can-i %v: %s", can, out)
		}
	}

	// Its own namespaces stay writable: a new control plane's namespace, with its labels.
	out, err = apply(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"hcp-scope-new",
"labels":{"app.kubernetes.io/managed-by":"cluster-provider-hosted","pod-security.kubernetes.io/enforce":"restricted"}}}`)()
	require.NoError(t, err, "%s", out)
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
