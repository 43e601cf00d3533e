package scheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// cluster is a Cluster ns/name of purpose "p" with env=dev, serving the requests with uids.
func cluster(ns, name string, uids ...types.UID) clustersv1alpha1.Cluster {
	cl := clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"env": "dev"}},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyShared, Purposes: []string{"p"}},
	}
	for _, u := range uids {
		cl.Finalizers = append(cl.Finalizers, RequestFinalizer(u))
	}
	return cl
}

func TestTenancyCount(t *testing.T) {
	cl := cluster("ns", "a", "u1", "u2")
	cl.Finalizers = append(cl.Finalizers, RequestFinalizer("u1"), "other/finalizer")
	assert.Equal(t, 2, TenancyCount(&cl), "distinct request finalizers only")
	assert.Equal(t, "request.clusters.openmcp.cloud/u1", RequestFinalizer("u1"))
}

func TestChoose(t *testing.T) {
	req := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r", UID: "me"},
		Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "p"}}
	shared := func(count int) *PurposeMapping {
		return &PurposeMapping{TenancyCount: count, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}, Template: ClusterTemplate{
			Metadata: TemplateMeta{Labels: map[string]string{"env": "dev"}},
			Spec:     clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyShared},
		}}
	}
	exclusive := &PurposeMapping{Template: ClusterTemplate{Spec: clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyExclusive}}}
	deleting := cluster("a", "deleting")
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	otherPurpose := cluster("a", "other")
	otherPurpose.Spec.Purposes = []string{"q"}
	prod := cluster("a", "prod")
	prod.Labels = map[string]string{"env": "prod"}

	for _, tc := range []struct {
		name     string
		cfg      Config
		pm       *PurposeMapping
		clusters []clustersv1alpha1.Cluster
		want     string // namespace/name, "" for a new Cluster
		already  bool
	}{
		{"balanced: the fewest requests", Config{}, shared(0),
			[]clustersv1alpha1.Cluster{cluster("a", "x", "u1", "u2"), cluster("b", "y", "u3"), cluster("c", "z", "u4", "u5")}, "b/y", false},
		{"balanced: ties to the first by namespace/name", Config{}, shared(0),
			[]clustersv1alpha1.Cluster{cluster("b", "a", "u1"), cluster("a", "z", "u2"), cluster("a", "y", "u3")}, "a/y", false},
		{"simple: the first by namespace/name", Config{Strategy: StrategySimple}, shared(0),
			[]clustersv1alpha1.Cluster{cluster("b", "a"), cluster("a", "z", "u1", "u2", "u3")}, "a/z", false},
		{"random: what the draw says, among sorted candidates", Config{Strategy: StrategyRandom}, shared(0),
			[]clustersv1alpha1.Cluster{cluster("a", "z"), cluster("a", "x"), cluster("a", "y")}, "a/z", false},
		{"full clusters are no candidates", Config{}, shared(2),
			[]clustersv1alpha1.Cluster{cluster("a", "full", "u1", "u2"), cluster("a", "half", "u3")}, "a/half", false},
		{"all full: a new Cluster", Config{}, shared(1),
			[]clustersv1alpha1.Cluster{cluster("a", "full", "u1")}, "", false},
		{"clusters being deleted, of another purpose, or not matching the selector are no candidates", Config{}, shared(0),
			[]clustersv1alpha1.Cluster{deleting, otherPurpose, prod}, "", false},
		{"the cluster that carries the request's finalizer is the answer, even full or being deleted", Config{}, shared(1),
			[]clustersv1alpha1.Cluster{cluster("a", "free"), func() clustersv1alpha1.Cluster {
				c := cluster("a", "mine", "u9", "me")
				c.DeletionTimestamp = &now
				return c
			}()}, "a/mine", true},
		{"exclusive never reuses a cluster", Config{}, exclusive,
			[]clustersv1alpha1.Cluster{cluster("a", "free")}, "", false},
		{"exclusive: its own cluster after a crash", Config{}, exclusive,
			[]clustersv1alpha1.Cluster{cluster("a", "free"), cluster("a", "mine", "me")}, "a/mine", true},
		{"namespaced scope: the request's namespace", Config{Scope: ScopeNamespaced}, shared(0),
			[]clustersv1alpha1.Cluster{cluster("a", "x"), cluster("team", "y", "u1")}, "team/y", false},
		{"namespaced scope: the template's namespace first", Config{Scope: ScopeNamespaced}, func() *PurposeMapping {
			pm := shared(0)
			pm.Template.Metadata.Namespace = "a"
			return pm
		}(), []clustersv1alpha1.Cluster{cluster("a", "x", "u1"), cluster("team", "y")}, "a/x", false},
		{"the global selector applies, and wins over the purpose's on a shared key", Config{Selectors: Selectors{Clusters: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}, shared(0),
			[]clustersv1alpha1.Cluster{cluster("a", "dev"), prod}, "a/prod", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Default()
			before := len(tc.clusters)
			ptrs := make([]*clustersv1alpha1.Cluster, len(tc.clusters))
			for i := range tc.clusters {
				ptrs[i] = &tc.clusters[i]
			}
			got := tc.cfg.Choose("p", tc.pm, req, ptrs, func(n int) int { return n - 1 })
			assert.Len(t, tc.clusters, before)
			if tc.want == "" {
				assert.Nil(t, got.Cluster)
				return
			}
			if assert.NotNil(t, got.Cluster) {
				assert.Equal(t, tc.want, got.Cluster.Namespace+"/"+got.Cluster.Name)
				assert.Equal(t, tc.already, got.Already)
			}
		})
	}
}
