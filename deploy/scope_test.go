package deploy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// operatorUser is the username of deploy/hosted's operator: its ServiceAccount.
const operatorUser = "system:serviceaccount:cluster-provider-system:cluster-provider"

// TestHostedScope binds a user of the operator's ServiceAccount name to exactly deploy/hosted's
// roles and policy (applied for real): the writes the hosted backend makes in hcp-* namespaces and
// cluster-provider-backups are allowed; the same outside them are refused (a Deployment in
// default, a pod of kube-system annotated, a namespace deleted, a PriorityClass of another name),
// and so is a change of a pod's spec in an hcp-* namespace; the core operator's Secrets in a
// user's namespace are not held. It may read and delete its own PriorityClass (to replace an
// earlier version's) and read the host API server's Service and EndpointSlices, no other.
func TestHostedScope(t *testing.T) {
	ctx := context.Background()
	for _, o := range build(t, "hosted") {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("scope-test"), client.ForceOwnership)
			require.NoError(t, err, "%s %s", o.GetKind(), o.GetName())
		}
	}
	cfg, err := env.User(operatorUser)
	require.NoError(t, err)
	op, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)

	hcp, user := "hcp-"+string(types.UID("0b7e2c4a-scope")), "team-scope"
	for _, ns := range []string{hcp, user, "cluster-provider-backups"} {
		err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		require.True(t, err == nil || apierrors.IsAlreadyExists(err), "%v", err)
	}
	pod := func(ns string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "apiserver-0"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}}}
		err := env.Client.Create(ctx, p)
		require.True(t, err == nil || apierrors.IsAlreadyExists(err), "%v", err)
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), p))
		return p
	}
	hcpPod, systemPod := pod(hcp), pod("kube-system")
	// Its own PriorityClass, made after the dry run that creates it.
	makeOwn := func() {
		own := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "cluster-provider-control-plane"}, Value: 100_000_000,
			PreemptionPolicy: ptr.To(corev1.PreemptNever)}
		if err := env.Client.Create(ctx, own); !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	deployment := func(ns string) *appsv1.Deployment {
		l := map[string]string{"app": "x"}
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-apiserver"},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: l}, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}}}
	}
	annotate := func(p *corev1.Pod) error {
		patch := client.MergeFrom(p.DeepCopy())
		q := p.DeepCopy()
		q.Annotations = map[string]string{"hosted.clusters.openmcp.cloud/authn": "abc"}
		return op.Patch(ctx, q, patch, client.DryRunAll)
	}
	reimage := func(p *corev1.Pod) error {
		patch := client.MergeFrom(p.DeepCopy())
		q := p.DeepCopy()
		q.Spec.Containers[0].Image = "attacker.example/takeover:1"
		return op.Patch(ctx, q, patch, client.DryRunAll)
	}
	// A policy takes effect once the API server has loaded it: await a refusal first.
	require.Eventually(t, func() bool {
		return apierrors.IsForbidden(op.Create(ctx, deployment("default"), client.DryRunAll))
	}, 30*time.Second, 100*time.Millisecond, "the policy refuses a Deployment in default")

	for _, c := range []struct {
		what    string
		do      func() error
		allowed bool
	}{
		{"create a Deployment in an hcp-* namespace", func() error { return op.Create(ctx, deployment(hcp), client.DryRunAll) }, true},
		{"create a Deployment in default", func() error { return op.Create(ctx, deployment("default"), client.DryRunAll) }, false},
		{"create a Deployment in a user's namespace", func() error { return op.Create(ctx, deployment(user), client.DryRunAll) }, false},
		{"annotate an API server pod of an hcp-* namespace", func() error { return annotate(hcpPod) }, true},
		{"annotate a pod of kube-system", func() error { return annotate(systemPod) }, false},
		{"change the image of a pod of an hcp-* namespace", func() error { return reimage(hcpPod) }, false},
		{"change the image of a pod of kube-system", func() error { return reimage(systemPod) }, false},
		{"create an hcp-* namespace", func() error {
			return op.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hcp-another"}}, client.DryRunAll)
		}, true},
		{"create another namespace", func() error {
			return op.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "evil"}}, client.DryRunAll)
		}, false},
		{"delete a user's namespace", func() error {
			return op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: user}}, client.DryRunAll)
		}, false},
		{"delete an hcp-* namespace", func() error {
			return op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hcp}}, client.DryRunAll)
		}, true},
		{"create a ConfigMap in cluster-provider-backups", func() error {
			return op.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "cluster-provider-backups", Name: "snapshots-x"}}, client.DryRunAll)
		}, true},
		{"create a Service in kube-system", func() error {
			return op.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "x"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}}}, client.DryRunAll)
		}, false},
		{"create its own PriorityClass", func() error {
			return op.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "cluster-provider-control-plane"}, Value: 1}, client.DryRunAll)
		}, true},
		{"create another PriorityClass", func() error {
			return op.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "top"}, Value: 1e9, GlobalDefault: false,
				PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority)}, client.DryRunAll)
		}, false},
		{"write a Secret in a user's namespace (an AccessRequest's kubeconfig)", func() error {
			return op.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: user, Name: "kubeconfig"}}, client.DryRunAll)
		}, true},
		{"read its own PriorityClass", func() error {
			makeOwn()
			return op.Get(ctx, client.ObjectKey{Name: "cluster-provider-control-plane"}, &schedulingv1.PriorityClass{})
		}, true},
		{"delete its own PriorityClass (to replace an earlier version's)", func() error {
			return op.Delete(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "cluster-provider-control-plane"}}, client.DryRunAll)
		}, true},
		{"read the host API server's EndpointSlices", func() error {
			return op.List(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"})
		}, true},
		{"read the host API server's Service", func() error {
			return op.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &corev1.Service{})
		}, true},
	} {
		err := c.do()
		if c.allowed {
			assert.NoError(t, err, c.what)
			continue
		}
		if assert.True(t, apierrors.IsForbidden(err), "%s: %v", c.what, err) {
			assert.Contains(t, err.Error(), "cluster-provider operator", "%s: the policy refuses, not RBAC", c.what)
		}
	}
	// What RBAC itself refuses: the reads and deletions granted by name or namespace go no further.
	for what, do := range map[string]func() error{
		"delete another PriorityClass": func() error {
			return op.Delete(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "system-cluster-critical"}}, client.DryRunAll)
		},
		"read another PriorityClass": func() error {
			return op.Get(ctx, client.ObjectKey{Name: "system-cluster-critical"}, &schedulingv1.PriorityClass{})
		},
		"list the EndpointSlices of kube-system": func() error {
			return op.List(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace("kube-system"))
		},
	} {
		err := do()
		assert.True(t, apierrors.IsForbidden(err), "%s: %v", what, err)
	}
}
