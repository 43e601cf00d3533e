package deploy

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/hosted"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// The operator's identities: deploy/'s ServiceAccount, and the one openMCP's operator makes for
// ClusterProvider local and binds to cluster-admin.
const (
	operatorUser = "system:serviceaccount:cluster-provider-system:cluster-provider"
	openMCPUser  = "system:serviceaccount:openmcp-system:cp-local"
)

var admissionBindingGVK = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingAdmissionPolicyBinding"}

// Labels of the hosted backend's namespaces.
var ownedLabels = map[string]string{"app.kubernetes.io/managed-by": "cluster-provider-hosted", "pod-security.kubernetes.io/enforce": "restricted"}

// scopeFixture is what TestOperatorScope writes as the platform's administrator.
type scopeFixture struct {
	hcp, foreignHCP, user, backups string
	hcpPod, systemPod              *corev1.Pod
	userSecret                     *corev1.Secret
}

func applyHosted(t *testing.T) {
	t.Helper()
	for _, o := range build(t, "hosted") {
		switch o.GetKind() {
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
			"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
			err := env.Client.Apply(t.Context(), client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("scope-test"), client.ForceOwnership)
			require.NoError(t, err, "%s %s", o.GetKind(), o.GetName())
		}
	}
}

func createOK(t *testing.T, obj client.Object) {
	t.Helper()
	err := env.Client.Create(t.Context(), obj)
	require.True(t, err == nil || apierrors.IsAlreadyExists(err), "%v", err)
	require.NoError(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj))
}

func newScopeFixture(t *testing.T) *scopeFixture {
	t.Helper()
	f := &scopeFixture{hcp: "hcp-0b7e2c4a-scope", foreignHCP: "hcp-made-by-someone", user: "team-scope", backups: "cluster-provider-backups"}
	createOK(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.hcp, Labels: ownedLabels}})
	createOK(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.backups, Labels: ownedLabels}})
	createOK(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.foreignHCP}}) // by system:masters
	createOK(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.user}})
	createOK(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "openmcp-system"}})
	f.hcpPod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.hcp, Name: "apiserver-0"}, Spec: restrictedPodSpec()}
	createOK(t, f.hcpPod)
	f.systemPod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "apiserver-0"}, Spec: restrictedPodSpec()}
	createOK(t, f.systemPod)
	f.userSecret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.user, Name: "their-own"}, StringData: map[string]string{"password": "x"}}
	createOK(t, f.userSecret)
	createOK(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "clusterrole-aggregation-controller"}})
	return f
}

// restrictedPodSpec meets the restricted Pod Security Standard.
func restrictedPodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1", SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
	}
}

func deployment(ns string) *appsv1.Deployment {
	l := map[string]string{"app": "x"}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kube-apiserver"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: l}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: l}, Spec: restrictedPodSpec()}}}
}

// labelled returns labels with key set to value (deleted when value is empty).
func labelled(base map[string]string, key, value string) map[string]string {
	out := map[string]string{}
	for k, v := range base {
		out[k] = v
	}
	if value == "" {
		delete(out, key)
	} else {
		out[key] = value
	}
	return out
}

// keyWrapping is the hosted backend's Secret with the key that wraps the keys kept beside the
// snapshots, in namespace ns.
func keyWrapping(ns string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cluster-provider-key-wrapping",
		Labels: map[string]string{"app.kubernetes.io/managed-by": "cluster-provider-hosted"}},
		Type: corev1.SecretTypeOpaque, Immutable: ptr.To(true), Data: map[string][]byte{"key": make([]byte, 32)}}
}

// frontDoorBinding is a RoleBinding in ns of ClusterRole role to ServiceAccount front-door of
// saNamespace (what the hosted backend makes for a front door: role cluster-provider-front-door,
// saNamespace ns).
func frontDoorBinding(ns, role, saNamespace string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "front-door"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "front-door", Namespace: saNamespace}}}
}

// scopeCase is one write the operator's identity tries, with whether it is allowed.
type scopeCase struct {
	what    string
	do      func(op client.Client, cs kubernetes.Interface) error
	allowed bool
}

func scopeCases(f *scopeFixture, own string) []scopeCase {
	ctx := context.Background()
	dry := client.DryRunAll
	patchPod := func(op client.Client, p *corev1.Pod, change func(*corev1.Pod)) error {
		q := p.DeepCopy()
		change(q)
		return op.Patch(ctx, q, client.MergeFrom(p), dry)
	}
	patchNamespace := func(op client.Client, name string, labels map[string]string) error {
		ns := &corev1.Namespace{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			return err
		}
		q := ns.DeepCopy()
		q.Labels = labels
		return op.Update(ctx, q, dry)
	}
	kubeconfig := func(ns string, typ corev1.SecretType, labels map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ar-kubeconfig", Labels: labels}, Type: typ}
	}
	ours := map[string]string{"app.kubernetes.io/managed-by": "cluster-provider.openmcp.cloud"}
	return []scopeCase{
		// What the operator does.
		{"create a Deployment in an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, deployment(f.hcp), dry)
		}, true},
		{"annotate an API server pod of an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			return patchPod(op, f.hcpPod, func(p *corev1.Pod) { p.Annotations = map[string]string{"hosted.clusters.openmcp.cloud/authn": "abc"} })
		}, true},
		{"delete an etcd pod of an hcp-* namespace it made (a restore)", func(op client.Client, _ kubernetes.Interface) error {
			return op.Delete(ctx, f.hcpPod.DeepCopy(), dry)
		}, true},
		{"create an hcp-* namespace with its labels", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hcp-another", Labels: ownedLabels}}, dry)
		}, true},
		{"delete an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			return op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.hcp}}, dry)
		}, true},
		{"create a ConfigMap in cluster-provider-backups", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.backups, Name: "snapshots-x"}}, dry)
		}, true},
		{"create a Secret (a CA) in an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.hcp, Name: "ca"}, Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{"tls.crt": nil, "tls.key": nil}}, dry)
		}, true},
		{"create its own PriorityClass", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "cluster-provider-control-plane"}, Value: 1}, dry)
		}, true},
		{"write an AccessRequest's kubeconfig Secret (Opaque, labelled) in a user's namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, kubeconfig(f.user, corev1.SecretTypeOpaque, ours), dry)
		}, true},
		{"create an Event in a user's namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: f.user, Name: "ev"},
				InvolvedObject: corev1.ObjectReference{Namespace: f.user, Name: "x", Kind: "AccessRequest"}}, dry)
		}, true},
		{"create its leader-election Lease in its own namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "local.cluster-provider.openmcp.cloud"}}, dry)
		}, true},
		{"create the hosted backend's key-wrapping Secret in its own namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, keyWrapping(own), dry)
		}, true},
		{"create a front door's ServiceAccount and Lease in an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			if err := op.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: f.hcp, Name: "front-door"}}, dry); err != nil {
				return err
			}
			return op.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: f.hcp, Name: "front-door"}}, dry)
		}, true},
		{"bind the front doors' ClusterRole to the door's ServiceAccount in an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, frontDoorBinding(f.hcp, "cluster-provider-front-door", f.hcp), dry)
		}, true},

		// What it must not do.
		{"create a Deployment in default", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, deployment("default"), dry)
		}, false},
		{"create a Deployment in a user's namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, deployment(f.user), dry)
		}, false},
		{"create a Deployment in its own namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, deployment(own), dry)
		}, false},
		{"create a Deployment in an hcp-* namespace someone else made", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, deployment(f.foreignHCP), dry)
		}, false},
		{"create a Job with a privileged hostPath pod in its own namespace", func(op client.Client, _ kubernetes.Interface) error {
			spec := restrictedPodSpec()
			spec.RestartPolicy = corev1.RestartPolicyNever
			spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
			spec.Volumes = []corev1.Volume{{Name: "root", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}}
			return op.Create(ctx, &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: own, Name: "x"},
				Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}, dry)
		}, false},
		{"create a DaemonSet in an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			d := deployment(f.hcp)
			return op.Create(ctx, &appsv1.DaemonSet{ObjectMeta: d.ObjectMeta, Spec: appsv1.DaemonSetSpec{Selector: d.Spec.Selector, Template: d.Spec.Template}}, dry)
		}, false},
		{"create a CronJob in an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			spec := restrictedPodSpec()
			spec.RestartPolicy = corev1.RestartPolicyNever
			return op.Create(ctx, &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: f.hcp, Name: "x"}, Spec: batchv1.CronJobSpec{Schedule: "* * * * *",
				JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}}}, dry)
		}, false},
		{"annotate a pod of kube-system", func(op client.Client, _ kubernetes.Interface) error {
			return patchPod(op, f.systemPod, func(p *corev1.Pod) { p.Annotations = map[string]string{"hosted.clusters.openmcp.cloud/authn": "abc"} })
		}, false},
		{"change the image of a pod of an hcp-* namespace", func(op client.Client, _ kubernetes.Interface) error {
			return patchPod(op, f.hcpPod, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "attacker.example/takeover:1" })
		}, false},
		{"add an ephemeral container to a pod of an hcp-* namespace", func(_ client.Client, cs kubernetes.Interface) error {
			p := f.hcpPod.DeepCopy()
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "busybox",
				SecurityContext: p.Spec.Containers[0].SecurityContext}}} // restricted: refused by the operator's scope, not Pod Security
			_, err := cs.CoreV1().Pods(p.Namespace).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, false},
		{"exec into a pod of kube-system", func(_ client.Client, cs kubernetes.Interface) error {
			return cs.CoreV1().RESTClient().Post().Namespace("kube-system").Resource("pods").Name(f.systemPod.Name).SubResource("exec").
				Param("command", "true").Param("stdout", "true").Do(ctx).Error()
		}, false},
		{"mint a token of a ServiceAccount of kube-system", func(_ client.Client, cs kubernetes.Interface) error {
			_, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "clusterrole-aggregation-controller",
				&authenticationv1.TokenRequest{}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, false},
		{"create a namespace hcp-* without the Pod Security label", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hcp-drill",
				Labels: labelled(ownedLabels, "pod-security.kubernetes.io/enforce", "")}}, dry)
		}, false},
		{"create another namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "evil", Labels: ownedLabels}}, dry)
		}, false},
		{"delete a user's namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.user}}, dry)
		}, false},
		{"delete an hcp-* namespace someone else made", func(op client.Client, _ kubernetes.Interface) error {
			return op.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.foreignHCP}}, dry)
		}, false},
		{"remove the Pod Security label of an hcp-* namespace", func(op client.Client, _ kubernetes.Interface) error {
			return patchNamespace(op, f.hcp, labelled(ownedLabels, "pod-security.kubernetes.io/enforce", "privileged"))
		}, false},
		{"label an hcp-* namespace someone else made as its own", func(op client.Client, _ kubernetes.Interface) error {
			return patchNamespace(op, f.foreignHCP, ownedLabels)
		}, false},
		{"create a Service in kube-system", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "x"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}}}, dry)
		}, false},
		{"create a Service with externalIPs in an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: f.hcp, Name: "x"},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 1}}, ExternalIPs: []string{"203.0.113.7"}}}, dry)
		}, false},
		{"create another PriorityClass", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "top"}, Value: 1e9,
				PreemptionPolicy: ptr.To(corev1.PreemptLowerPriority)}, dry)
		}, false},
		{"create a service-account-token Secret in kube-system", func(op client.Client, _ kubernetes.Interface) error {
			s := kubeconfig("kube-system", corev1.SecretTypeServiceAccountToken, ours)
			s.Annotations = map[string]string{corev1.ServiceAccountNameKey: "clusterrole-aggregation-controller"}
			return op.Create(ctx, s, dry)
		}, false},
		{"create an unlabelled Secret in a user's namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, kubeconfig(f.user, corev1.SecretTypeOpaque, nil), dry)
		}, false},
		{"take over a user's Secret by labelling it", func(op client.Client, _ kubernetes.Interface) error {
			s := f.userSecret.DeepCopy()
			s.Labels = ours
			return op.Update(ctx, s, dry)
		}, false},
		{"delete a user's Secret", func(op client.Client, _ kubernetes.Interface) error {
			return op.Delete(ctx, f.userSecret.DeepCopy(), dry)
		}, false},
		{"create another Secret in its own namespace", func(op client.Client, _ kubernetes.Interface) error {
			sec := keyWrapping(own)
			sec.Name = "cluster-provider-key-wrapping-2"
			return op.Create(ctx, sec, dry)
		}, false},
		{"create the key-wrapping Secret in a user's namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, keyWrapping(f.user), dry)
		}, false},
		{"delete its key-wrapping Secret (every kept key wrapped with it would be lost)", func(op client.Client, _ kubernetes.Interface) error {
			sec := keyWrapping(own)
			if err := env.Client.Create(ctx, sec.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			defer func() { _ = env.Client.Delete(context.Background(), sec.DeepCopy()) }()
			return op.Delete(ctx, sec, dry)
		}, false},
		{"create a Lease in kube-system", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-scheduler-x"}}, dry)
		}, false},
		{"bind another ClusterRole in an hcp-* namespace it made", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, frontDoorBinding(f.hcp, "edit", f.hcp), dry)
		}, false},
		{"bind the front doors' ClusterRole to a ServiceAccount of another namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, frontDoorBinding(f.hcp, "cluster-provider-front-door", "kube-system"), dry)
		}, false},
		{"bind the front doors' ClusterRole in a user's namespace", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, frontDoorBinding(f.user, "cluster-provider-front-door", f.user), dry)
		}, false},
		{"widen the front doors' ClusterRole", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "cluster-provider-front-door"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}}}, dry)
		}, false},
		{"widen the front doors' ClusterRole by an update", func(op client.Client, _ kubernetes.Interface) error {
			return updateFrontDoorRole(op, func(r *rbacv1.ClusterRole) {
				r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}})
			})
		}, false},
		{"make the front doors' ClusterRole aggregate others", func(op client.Client, _ kubernetes.Interface) error {
			return updateFrontDoorRole(op, func(r *rbacv1.ClusterRole) {
				r.AggregationRule = &rbacv1.AggregationRule{ClusterRoleSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}}}
			})
		}, false},
		{"bind itself a ClusterRole", func(op client.Client, _ kubernetes.Interface) error {
			return op.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "x"}}}, dry)
		}, false},
		// Admission policies never apply to admission policies and their bindings (so that no
		// policy can lock out its own repair): only RBAC refuses this. openMCP binds cluster-admin
		// to cp-local, so cp-local may (docs/security.md says so).
		{"delete the policy's binding", func(op client.Client, _ kubernetes.Interface) error {
			u := &metav1.PartialObjectMetadata{}
			u.SetGroupVersionKind(admissionBindingGVK)
			u.SetName("cluster-provider-operator-scope")
			return op.Delete(ctx, u, dry)
		}, own == "openmcp-system"},
	}
}

// updateFrontDoorRole updates (dry run) the front doors' ClusterRole as deploy/hosted made it,
// changed by change.
func updateFrontDoorRole(op client.Client, change func(*rbacv1.ClusterRole)) error {
	r := &rbacv1.ClusterRole{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "cluster-provider-front-door"}, r); err != nil {
		return err
	}
	change(r)
	return op.Update(context.Background(), r, client.DryRunAll)
}

// TestOperatorScope runs every write of scopeCases as each identity of the operator, bound to what
// its deployment binds it to (applied for real): deploy/hosted's ServiceAccount with its
// ClusterRoles, and openMCP's cp-local with cluster-admin. What the operator does is allowed; every
// other write is refused, for cp-local by deploy/policy/operator.yaml itself (its message), since
// cluster-admin's RBAC allows all.
func TestOperatorScope(t *testing.T) {
	applyHosted(t)
	require.NoError(t, env.Client.Create(t.Context(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cp-local-scope-test"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "openmcp-system", Name: "cp-local"}}}))
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "cp-local-scope-test"}})
	})
	role := &rbacv1.ClusterRole{}
	require.NoError(t, env.Client.Get(t.Context(), client.ObjectKey{Name: hosted.ClusterRoleFrontDoor}, role))
	assert.Equal(t, hosted.FrontDoorClusterRole().Rules, role.Rules, "deploy/hosted holds the front doors' rules as the backend makes them (its operator may not update them)")
	f := newScopeFixture(t)
	for _, id := range []struct{ user, own string }{{operatorUser, "cluster-provider-system"}, {openMCPUser, "openmcp-system"}} {
		t.Run(id.own, func(t *testing.T) {
			cfg, err := env.User(id.user, "system:serviceaccounts", "system:serviceaccounts:"+id.own)
			require.NoError(t, err)
			op, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
			require.NoError(t, err)
			cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
			require.NoError(t, err)
			// A policy takes effect once the API server has loaded it: await a refusal first.
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				err := op.Create(t.Context(), deployment("default"), client.DryRunAll)
				assert.True(ct, apierrors.IsForbidden(err), "%v", err)
			}, 30*time.Second, 100*time.Millisecond, "the policy refuses a Deployment in default")
			for _, c := range scopeCases(f, id.own) {
				err := c.do(op, cs)
				if c.allowed {
					assert.NoError(t, err, c.what)
					continue
				}
				if !assert.True(t, apierrors.IsForbidden(err), "%s: %v", c.what, err) {
					continue
				}
				if id.user == openMCPUser {
					assert.Contains(t, err.Error(), "cluster-provider operator", "%s: refused by the policy", c.what)
				}
			}
			if id.user == openMCPUser {
				// cp-local makes the front doors' ClusterRole, and brings an earlier version's up to
				// date (deploy/hosted's operator may not: its file holds the role).
				assert.NoError(t, updateFrontDoorRole(op, func(r *rbacv1.ClusterRole) {}), "update the front doors' ClusterRole to this version's rules")
				assert.NoError(t, updateFrontDoorRole(op, func(r *rbacv1.ClusterRole) { r.Rules = r.Rules[:1] }), "update the front doors' ClusterRole to an earlier version's rules")
			}
		})
	}
}
