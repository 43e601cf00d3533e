package scheduler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

func TestNewCluster(t *testing.T) {
	req := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "foo", Name: "exclusive", UID: "u-1",
		Labels:      map[string]string{PropagatedPrefix + "team": "a", "private": "x"},
		Annotations: map[string]string{PropagatedPrefix + "cost": "42"},
	}, Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "exclusive"}}
	pm := &PurposeMapping{Template: ClusterTemplate{
		Metadata: TemplateMeta{Labels: map[string]string{"env": "dev"}, Annotations: map[string]string{"note": "n"}},
		Spec:     clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyExclusive, Purposes: []string{"base"}},
	}}

	cl := NewCluster("exclusive", pm, req)
	assert.Equal(t, "exclusive-qilq5nsb", cl.Name)
	assert.Empty(t, cl.GenerateName)
	assert.Equal(t, "foo", cl.Namespace, "the request's namespace when the template names none")
	assert.Equal(t, map[string]string{"env": "dev", LabelDeleteWithoutRequests: "true", PropagatedPrefix + "team": "a"}, cl.Labels,
		"template labels, openMCP's delete-without-requests label, the propagated ones")
	assert.Equal(t, map[string]string{"note": "n", PropagatedPrefix + "cost": "42"}, cl.Annotations)
	assert.Equal(t, []string{"base", "exclusive"}, cl.Spec.Purposes)
	assert.Equal(t, []string{"request.clusters.openmcp.cloud/u-1"}, cl.Finalizers)
	assert.Equal(t, "prof", cl.Spec.Profile)

	// The template is unchanged: one request's metadata never leaks into the next Cluster
	// (openMCP's scheduler writes into the template's maps).
	assert.Equal(t, map[string]string{"env": "dev"}, pm.Template.Metadata.Labels)
	assert.Equal(t, map[string]string{"note": "n"}, pm.Template.Metadata.Annotations)
	assert.Equal(t, []string{"base"}, pm.Template.Spec.Purposes)
	other := NewCluster("exclusive", pm, &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "foo", Name: "second", UID: "u-2"}})
	assert.Equal(t, map[string]string{"env": "dev", LabelDeleteWithoutRequests: "true"}, other.Labels)
	assert.NotEqual(t, cl.Name, other.Name)

	t.Run("the template decides delete-without-requests when its labels set the key", func(t *testing.T) {
		// A template written for openMCP's scheduler: label "false" keeps the Cluster.
		pm := &PurposeMapping{Template: ClusterTemplate{
			Metadata: TemplateMeta{Namespace: "clusters", Labels: map[string]string{LabelDeleteWithoutRequests: "false"}},
			Spec:     clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyShared},
		}}
		cl := NewCluster("shared", pm, req)
		assert.Equal(t, "false", cl.Labels[LabelDeleteWithoutRequests])
		assert.False(t, DeleteWithoutRequests(cl))
		assert.Empty(t, cl.Annotations)
		assert.Equal(t, "clusters", cl.Namespace)
		assert.Equal(t, "shared", cl.Name, "one Cluster for everyone")
		assert.NotContains(t, cl.Labels, PropagatedPrefix+"team", "a Shared Cluster gets no request's metadata")
	})
	t.Run("randomized name", func(t *testing.T) {
		r := req.DeepCopy()
		r.Labels[LabelRandomizeClusterName] = "true"
		cl := NewCluster("exclusive", pm, r)
		assert.Empty(t, cl.Name)
		assert.Equal(t, "exclusive-", cl.GenerateName)
	})
	t.Run("nil template maps", func(t *testing.T) {
		pm := &PurposeMapping{Template: ClusterTemplate{Spec: clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyExclusive}}}
		cl := NewCluster("x", pm, &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "r"}})
		assert.Equal(t, map[string]string{LabelDeleteWithoutRequests: "true"}, cl.Labels)
		assert.Nil(t, cl.Annotations)
	})
}

func TestDeleteWithoutRequests(t *testing.T) {
	tests := map[string]struct {
		labels, annotations map[string]string
		want                bool
	}{
		"label true":                           {labels: map[string]string{LabelDeleteWithoutRequests: "true"}, want: true},
		"label false":                          {labels: map[string]string{LabelDeleteWithoutRequests: "false"}},
		"label other value":                    {labels: map[string]string{LabelDeleteWithoutRequests: "yes"}},
		"neither":                              {},
		"legacy annotation true, no label":     {annotations: map[string]string{LegacyAnnotationDeleteWithoutRequests: "true"}, want: true},
		"legacy annotation false, no label":    {annotations: map[string]string{LegacyAnnotationDeleteWithoutRequests: "false"}},
		"label false wins over the annotation": {labels: map[string]string{LabelDeleteWithoutRequests: "false"}, annotations: map[string]string{LegacyAnnotationDeleteWithoutRequests: "true"}},
		"label true wins over the annotation":  {labels: map[string]string{LabelDeleteWithoutRequests: "true"}, annotations: map[string]string{LegacyAnnotationDeleteWithoutRequests: "false"}, want: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			cl := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Labels: tt.labels, Annotations: tt.annotations}}
			assert.Equal(t, tt.want, DeleteWithoutRequests(cl))
		})
	}
}

func TestPropagate(t *testing.T) {
	req := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{
		Labels: map[string]string{PropagatedPrefix + "a": "1", "b": "2"}, Annotations: map[string]string{PropagatedPrefix + "c": "3"},
	}}
	cl := &clustersv1alpha1.Cluster{} // nil maps
	assert.True(t, Propagate(req, cl))
	assert.Equal(t, map[string]string{PropagatedPrefix + "a": "1"}, cl.Labels)
	assert.Equal(t, map[string]string{PropagatedPrefix + "c": "3"}, cl.Annotations)
	assert.False(t, Propagate(req, cl), "nothing new")

	req.Labels[PropagatedPrefix+"a"] = "changed"
	delete(req.Annotations, PropagatedPrefix+"c")
	assert.True(t, Propagate(req, cl))
	assert.Equal(t, "changed", cl.Labels[PropagatedPrefix+"a"])
	assert.Equal(t, "3", cl.Annotations[PropagatedPrefix+"c"], "never removed")
	assert.False(t, Propagate(&clustersv1alpha1.ClusterRequest{}, cl), "a request without metadata")
}
