package hosted

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
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

func typesUID(s string) types.UID { return types.UID(s) }
