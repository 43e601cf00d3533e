// Command openmcpshape prints the objects openMCP's operator makes for a ClusterProvider, shaped as
// its code shapes them (openmcp-operator internal/controllers/provider/install: job.go,
// deployment.go, rbac.go, values.go), so that `make e2e-kind` can deploy this operator exactly as
// openMCP does without openMCP's operator (which is not on the module proxy):
//
//   - ServiceAccounts cp-<name> and cp-<name>-init, each bound to cluster-admin by a
//     ClusterRoleBinding openmcp.cloud:cp-<name>[-init];
//   - Job cp-<name>-init: args <initCommand|init> --environment --verbosity --provider-name;
//   - Deployment cp-<name>: args <runCommand|run> --environment --verbosity --provider-name, then
//     --leader-elect=true when runReplicas > 1, then --metrics-bind-address=:<port>
//     --metrics-secure=false unless metrics are disabled.
//
// Only args, never command; env POD_NAME, POD_NAMESPACE, POD_IP, POD_SERVICE_ACCOUNT_NAME plus the
// spec's env; extraVolumes and extraVolumeMounts in both; no probes, no resources, no
// securityContext, the default RollingUpdate strategy.
//
//	go run ./hack/openmcpshape --namespace openmcp-system --environment default [--run-command-extra FLAG]... < clusterprovider.yaml
//
// The Job is printed first: apply it, wait for it to succeed (as openMCP does), then apply the
// rest (--part run).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// clusterProvider is the part of openMCP's ClusterProvider (openmcp.cloud/v1alpha1) that shapes
// the objects.
type clusterProvider struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Image             string                            `json:"image"`
		ImagePullSecrets  []corev1.LocalObjectReference     `json:"imagePullSecrets,omitempty"`
		InitCommand       []string                          `json:"initCommand,omitempty"`
		RunCommand        []string                          `json:"runCommand,omitempty"`
		Env               []struct{ Name, Value string }    `json:"env,omitempty"`
		Verbosity         string                            `json:"verbosity,omitempty"`
		ExtraVolumes      []corev1.Volume                   `json:"extraVolumes,omitempty"`
		ExtraVolumeMounts []corev1.VolumeMount              `json:"extraVolumeMounts,omitempty"`
		RunReplicas       int32                             `json:"runReplicas,omitempty"`
		TopologySpread    []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`
		Metrics           *struct {
			Disabled bool   `json:"disabled"`
			Port     *int32 `json:"port,omitempty"`
		} `json:"metrics,omitempty"`
	} `json:"spec"`
}

// envVar is openMCP's EnvVar: a name and a value, nothing else.
type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "openmcpshape:", err)
		os.Exit(1)
	}
}

func run(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("openmcpshape", flag.ContinueOnError)
	namespace := fs.String("namespace", "openmcp-system", "the namespace openMCP's operator deploys providers into (its pod's)")
	environment := fs.String("environment", "default", "openMCP's --environment")
	part := fs.String("part", "init", "init: service accounts, bindings and the init Job; run: the Deployment")
	image := fs.String("image", "", "replace spec.image (the image under test)")
	var extra multiFlag
	fs.Var(&extra, "run-command-extra", "a flag appended to spec.runCommand, as a user would add it there (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	cp := &clusterProvider{}
	if err := yaml.UnmarshalStrict(data, cp); err != nil {
		return fmt.Errorf("reading the ClusterProvider: %w", err)
	}
	if cp.Kind != "ClusterProvider" || cp.Metadata.Name == "" || cp.Spec.Image == "" {
		return errors.New("want a ClusterProvider with metadata.name and spec.image")
	}
	if *image != "" {
		cp.Spec.Image = *image
	}
	cp.Spec.RunCommand = append(cp.Spec.RunCommand, extra...)
	var objs []runtime.Object
	switch *part {
	case "init":
		objs = initObjects(cp, *namespace, *environment)
	case "run":
		objs = []runtime.Object{deployment(cp, *namespace, *environment)}
	default:
		return fmt.Errorf("--part %q: want init or run", *part)
	}
	for _, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "---\n%s", b)
	}
	return nil
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func name(cp *clusterProvider, suffix string) string {
	n := "cp-" + strings.ToLower(cp.Metadata.Name)
	if suffix != "" {
		n += "-" + suffix
	}
	return n
}

func labels(cp *clusterProvider, component string) map[string]string {
	return map[string]string{
		"app.kubernetes.io/managed-by": "openmcp-operator",
		"app.kubernetes.io/name":       "ClusterProvider",
		"app.kubernetes.io/instance":   cp.Metadata.Name,
		"app.kubernetes.io/component":  component,
	}
}

// contractArgs appends the flags openMCP's operator adds to every command.
func contractArgs(command []string, def string, cp *clusterProvider, environment string) []string {
	args := slices.Clone(command)
	if len(args) == 0 {
		args = []string{def}
	}
	return append(args, "--environment="+environment, "--verbosity="+cp.Spec.Verbosity, "--provider-name="+cp.Metadata.Name)
}

func env(cp *clusterProvider) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range cp.Spec.Env {
		out = append(out, corev1.EnvVar{Name: e.Name, Value: e.Value})
	}
	field := func(n, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: n, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return append(out, field("POD_NAME", "metadata.name"), field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_IP", "status.podIP"), field("POD_SERVICE_ACCOUNT_NAME", "spec.serviceAccountName"))
}

func initObjects(cp *clusterProvider, namespace, environment string) []runtime.Object {
	var objs []runtime.Object
	for _, suffix := range []string{"", "init"} {
		component := "controller"
		if suffix != "" {
			component = "init-job"
		}
		objs = append(objs,
			&corev1.ServiceAccount{
				TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
				ObjectMeta: metav1.ObjectMeta{Name: name(cp, suffix), Namespace: namespace, Labels: labels(cp, component)},
			},
			&rbacv1.ClusterRoleBinding{
				TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
				ObjectMeta: metav1.ObjectMeta{Name: "openmcp.cloud:" + name(cp, suffix), Labels: labels(cp, component)},
				Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name(cp, suffix), Namespace: namespace}},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			})
	}
	objs = append(objs, &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: name(cp, "init"), Namespace: namespace, Labels: labels(cp, "init-job")},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To[int32](4),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(cp, "init-job")},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "init", Image: cp.Spec.Image, ImagePullPolicy: corev1.PullIfNotPresent,
						Args: contractArgs(cp.Spec.InitCommand, "init", cp, environment), Env: env(cp),
						VolumeMounts: cp.Spec.ExtraVolumeMounts,
					}},
					ServiceAccountName: name(cp, "init"),
					ImagePullSecrets:   cp.Spec.ImagePullSecrets,
					RestartPolicy:      corev1.RestartPolicyNever,
					Volumes:            cp.Spec.ExtraVolumes,
				},
			},
		},
	})
	return objs
}

func deployment(cp *clusterProvider, namespace, environment string) *appsv1.Deployment {
	replicas := cp.Spec.RunReplicas
	if replicas == 0 {
		replicas = 1
	}
	args := contractArgs(cp.Spec.RunCommand, "run", cp, environment)
	if replicas > 1 {
		args = append(args, "--leader-elect=true")
	}
	c := corev1.Container{
		Name: name(cp, ""), Image: cp.Spec.Image, ImagePullPolicy: corev1.PullIfNotPresent,
		Args: args, Env: env(cp), VolumeMounts: cp.Spec.ExtraVolumeMounts,
	}
	if m := cp.Spec.Metrics; m == nil || !m.Disabled {
		port := int32(8080)
		if m != nil && m.Port != nil {
			port = *m.Port
		}
		c.Args = append(c.Args, fmt.Sprintf("--metrics-bind-address=:%d", port), "--metrics-secure=false")
		c.Ports = []corev1.ContainerPort{{Name: "metrics", ContainerPort: port, Protocol: corev1.ProtocolTCP}}
	}
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name(cp, ""), Namespace: namespace, Labels: labels(cp, "controller")},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels(cp, "controller")},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels(cp, "controller")},
				Spec: corev1.PodSpec{
					Containers:                []corev1.Container{c},
					ImagePullSecrets:          cp.Spec.ImagePullSecrets,
					ServiceAccountName:        name(cp, ""),
					Volumes:                   cp.Spec.ExtraVolumes,
					TopologySpreadConstraints: cp.Spec.TopologySpread,
				},
			},
		},
	}
}
