package deploy

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// These tests run after scope_test.go's (go test takes files in name order): TestHostedReads
// creates the PriorityClass that TestOperatorScope expects to be able to create.

// TestOwnedNamespaces: only the operator makes the hosted backend's namespaces or labels one as
// such, nobody removes that label or weakens the Pod Security label of one (a user who may create
// and update namespaces tries), and no pod there is privileged or mounts a host path, even where
// Pod Security admission would let it.
func TestOwnedNamespaces(t *testing.T) {
	ctx := t.Context()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "namespace-maker"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create", "update", "patch", "get"}}}}
	createOK(t, role)
	createOK(t, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "namespace-maker"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "namespace-maker"}}})
	cfg, err := env.User("namespace-maker")
	require.NoError(t, err)
	maker, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	owned := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hcp-owned-guard", Labels: ownedLabels}}
	createOK(t, owned)
	plain := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain-guard"}}
	createOK(t, plain)
	require.Eventually(t, func() bool {
		return apierrors.IsForbidden(maker.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hcp-await"}}, client.DryRunAll))
	}, 30*time.Second, 100*time.Millisecond, "the policy refuses an hcp-* namespace")
	update := func(ns *corev1.Namespace, labels map[string]string) error {
		q := ns.DeepCopy()
		q.Labels = labels
		return maker.Update(ctx, q, client.DryRunAll)
	}
	for _, c := range []struct {
		what    string
		err     error
		allowed bool
	}{
		{"create a namespace", maker.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-new"}}, client.DryRunAll), true},
		{"label a namespace of its own", update(plain, map[string]string{"team": "a"}), true},
		{"create a namespace hcp-*", maker.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hcp-0b7e2c4a-victim"}}, client.DryRunAll), false},
		{"create a namespace labelled as the hosted backend's", maker.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "looks-owned",
			Labels: ownedLabels}}, client.DryRunAll), false},
		{"label a namespace as the hosted backend's", update(plain, ownedLabels), false},
		{"remove the hosted backend's label", update(owned, labelled(ownedLabels, "app.kubernetes.io/managed-by", "")), false},
		{"weaken the Pod Security label of an hcp-* namespace", update(owned, labelled(ownedLabels, "pod-security.kubernetes.io/enforce", "privileged")), false},
		{"remove the Pod Security label of an hcp-* namespace", update(owned, labelled(ownedLabels, "pod-security.kubernetes.io/enforce", "")), false},
	} {
		if c.allowed {
			assert.NoError(t, c.err, c.what)
		} else if assert.True(t, apierrors.IsForbidden(c.err), "%s: %v", c.what, c.err) {
			assert.Contains(t, c.err.Error(), "namespace", c.what)
		}
	}

	// Pods: even in a namespace of the backend's where Pod Security would admit them (set so by a
	// member of system:masters), no privileged container, no host path, no host network.
	lax := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hcp-lax-guard",
		Labels: labelled(ownedLabels, "pod-security.kubernetes.io/enforce", "privileged")}}
	createOK(t, lax)
	pod := func(change func(*corev1.PodSpec)) *corev1.Pod {
		spec := restrictedPodSpec()
		change(&spec)
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: lax.Name, Name: "p"}, Spec: spec}
	}
	require.NoError(t, env.Client.Create(ctx, pod(func(*corev1.PodSpec) {}), client.DryRunAll), "a restricted pod")
	for what, p := range map[string]*corev1.Pod{
		"privileged": pod(func(s *corev1.PodSpec) {
			s.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}),
		"init privileged": pod(func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init", Image: "registry.example/c:1", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}}
		}),
		"hostPath": pod(func(s *corev1.PodSpec) {
			s.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
		}),
		"hostNetwork": pod(func(s *corev1.PodSpec) { s.HostNetwork = true }),
	} {
		err := env.Client.Create(ctx, p, client.DryRunAll)
		if assert.True(t, apierrors.IsForbidden(err), "%s: %v", what, err) {
			assert.Contains(t, err.Error(), "hosted control plane's namespace admits no", what)
		}
	}
}

// TestHostedReads: deploy/hosted's ServiceAccount may read and delete its own PriorityClass (to
// replace an earlier version's), read the host API server's Service and EndpointSlices, and
// watch Jobs (the backend's cache: a Job's end notifies its Cluster); RBAC
// refuses the same of any other PriorityClass or namespace.
func TestHostedReads(t *testing.T) {
	ctx := t.Context()
	applyHosted(t)
	cfg, err := env.User(operatorUser, "system:serviceaccounts", "system:serviceaccounts:cluster-provider-system")
	require.NoError(t, err)
	op, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	own := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "cluster-provider-control-plane"}, Value: 100_000_000,
		PreemptionPolicy: ptr.To(corev1.PreemptNever)}
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, own)))
	for what, do := range map[string]func() error{
		"read its own PriorityClass": func() error {
			return op.Get(ctx, client.ObjectKey{Name: own.Name}, &schedulingv1.PriorityClass{})
		},
		"delete its own PriorityClass (to replace an earlier version's)": func() error {
			return op.Delete(ctx, own.DeepCopy(), client.DryRunAll)
		},
		"read the host API server's EndpointSlices": func() error {
			return op.List(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace("default"), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"})
		},
		"read the host API server's Service": func() error {
			return op.Get(ctx, client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &corev1.Service{})
		},
		"list and watch the Jobs (a Job's end notifies its Cluster)": func() error {
			if err := op.List(ctx, &batchv1.JobList{}); err != nil {
				return err
			}
			w, err := cs.BatchV1().Jobs("").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
	} {
		assert.NoError(t, do(), what)
	}
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
		"list Secrets in every namespace": func() error { return op.List(ctx, &corev1.SecretList{}) },
		"watch Secrets in every namespace": func() error {
			w, err := cs.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		},
	} {
		err := do()
		assert.True(t, apierrors.IsForbidden(err), "%s: %v", what, err)
	}
}
