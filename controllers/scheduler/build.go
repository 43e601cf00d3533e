package scheduler

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// Labels and annotations the scheduler reads or writes, as openMCP's scheduler names them.
const (
	// LabelDeleteWithoutRequests on a Cluster: "true" deletes it once no request uses it. The
	// scheduler sets it on the Clusters it creates unless the template's labels set the key, as
	// openMCP's scheduler does (its DeleteWithoutRequestsLabel).
	LabelDeleteWithoutRequests = "clusters.openmcp.cloud/delete-without-requests"
	// LegacyAnnotationDeleteWithoutRequests is the annotation of that name that releases before
	// openMCP's label was followed set instead. It is still honoured on a Cluster that has no
	// LabelDeleteWithoutRequests, so that Clusters made by those releases keep their behaviour;
	// nothing sets it any more.
	LegacyAnnotationDeleteWithoutRequests = LabelDeleteWithoutRequests
	// LabelRandomizeClusterName on a ClusterRequest: "true" lets the API server name its new
	// Cluster (generateName) instead of the request's hash.
	LabelRandomizeClusterName = "clusters.openmcp.cloud/randomize-cluster-name"
	// PropagatedPrefix starts the request labels and annotations an Exclusive Cluster receives.
	PropagatedPrefix = "metadata.open-control-plane.io/"
)

// NewCluster is the Cluster the scheduler creates for req of purpose under pm: namespace from the
// template, else the request's; labels and annotations from the template plus
// LabelDeleteWithoutRequests "true" unless the template's labels set that key (and, for an Exclusive
// Cluster, the request's propagated metadata); the template's spec with the purpose added to
// spec.purposes; the request's finalizer; the name of ClusterName. The template is never changed:
// every map and slice of the result is new.
func NewCluster(purpose string, pm *PurposeMapping, req *clustersv1alpha1.ClusterRequest) *clustersv1alpha1.Cluster {
	t := pm.Template
	name, generateName := ClusterName(purpose, pm, req.Namespace, req.Name, req.Labels[LabelRandomizeClusterName] == "true")
	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{
			Name:         name,
			GenerateName: generateName,
			Namespace:    cmp.Or(t.Metadata.Namespace, req.Namespace),
			Labels:       maps.Clone(t.Metadata.Labels),
			Annotations:  maps.Clone(t.Metadata.Annotations),
			Finalizers:   []string{RequestFinalizer(req.UID)},
		},
		Spec: *t.Spec.DeepCopy(),
	}
	if cl.Labels == nil {
		cl.Labels = map[string]string{}
	}
	if _, set := cl.Labels[LabelDeleteWithoutRequests]; !set {
		cl.Labels[LabelDeleteWithoutRequests] = "true"
	}
	if !slices.Contains(cl.Spec.Purposes, purpose) {
		cl.Spec.Purposes = append(cl.Spec.Purposes, purpose)
	}
	if t.Spec.Tenancy == clustersv1alpha1.TenancyExclusive {
		Propagate(req, cl)
	}
	return cl
}

// Propagate copies req's labels and annotations under PropagatedPrefix onto cl, adding or
// changing, never removing, and reports whether cl changed. It handles nil maps on either side.
func Propagate(req *clustersv1alpha1.ClusterRequest, cl *clustersv1alpha1.Cluster) bool {
	changed := false
	copyPrefixed := func(from map[string]string, to *map[string]string) {
		for k, v := range from {
			if !strings.HasPrefix(k, PropagatedPrefix) {
				continue
			}
			if old, ok := (*to)[k]; ok && old == v {
				continue
			}
			if *to == nil {
				*to = map[string]string{}
			}
			(*to)[k] = v
			changed = true
		}
	}
	copyPrefixed(req.Labels, &cl.Labels)
	copyPrefixed(req.Annotations, &cl.Annotations)
	return changed
}

// DeleteWithoutRequests reports whether cl is to be deleted once no request uses it: its label
// LabelDeleteWithoutRequests is "true", or, without that label, the legacy annotation is.
func DeleteWithoutRequests(cl *clustersv1alpha1.Cluster) bool {
	if v, ok := cl.Labels[LabelDeleteWithoutRequests]; ok {
		return v == "true"
	}
	return cl.Annotations[LegacyAnnotationDeleteWithoutRequests] == "true"
}
