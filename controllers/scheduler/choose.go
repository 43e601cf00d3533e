package scheduler

import (
	"cmp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// requestFinalizerPrefix starts the finalizer a Cluster carries for each request it serves; the
// number of distinct such finalizers is the Cluster's tenancy count. Nothing else marks usage.
const requestFinalizerPrefix = "request.clusters.openmcp.cloud/"

// RequestFinalizer is the finalizer a Cluster carries while it serves the request with uid.
func RequestFinalizer(uid types.UID) string { return requestFinalizerPrefix + string(uid) }

// TenancyCount is how many requests cl serves: its distinct request finalizers.
func TenancyCount(cl *clustersv1alpha1.Cluster) int {
	n := 0
	for i, f := range cl.Finalizers {
		if strings.HasPrefix(f, requestFinalizerPrefix) && !slices.Contains(cl.Finalizers[:i], f) {
			n++
		}
	}
	return n
}

// Choice is what Choose decided for one request.
type Choice struct {
	// Cluster is the Cluster that serves the request, or nil: a new one must be created.
	Cluster *clustersv1alpha1.Cluster
	// Already: the Cluster carries the request's finalizer (an earlier pass chose it).
	Already bool
}

// Choose picks, among clusters, the one that serves req (of purpose pm under c): a candidate fits
// (Fits). A candidate that already carries the request's finalizer is the answer (recovery after a
// crash). Otherwise a Shared mapping takes, of the candidates not being deleted and below
// tenancyCount, the one the strategy picks (intn draws for Random); an Exclusive mapping never
// reuses a Cluster. clusters is not changed.
func (c *Config) Choose(purpose string, pm *PurposeMapping, req *clustersv1alpha1.ClusterRequest, clusters []*clustersv1alpha1.Cluster, intn func(int) int) Choice {
	sel, err := metav1.LabelSelectorAsSelector(CombinedSelector(c.Selectors.Clusters, pm.Selector))
	if err != nil { // Validate rejects such a configuration before anything runs
		return Choice{}
	}
	var candidates []*clustersv1alpha1.Cluster
	for _, cl := range clusters {
		if !c.fits(purpose, pm, req, cl, sel) {
			continue
		}
		if slices.Contains(cl.Finalizers, RequestFinalizer(req.UID)) {
			return Choice{Cluster: cl, Already: true}
		}
		candidates = append(candidates, cl)
	}
	if pm.Template.Spec.Tenancy != clustersv1alpha1.TenancyShared {
		return Choice{}
	}
	candidates = slices.DeleteFunc(candidates, func(cl *clustersv1alpha1.Cluster) bool {
		return !cl.DeletionTimestamp.IsZero() || pm.TenancyCount > 0 && TenancyCount(cl) >= pm.TenancyCount
	})
	if len(candidates) == 0 {
		return Choice{}
	}
	byName := func(a, b *clustersv1alpha1.Cluster) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	}
	slices.SortFunc(candidates, byName)
	switch c.Strategy {
	case StrategyRandom:
		return Choice{Cluster: candidates[intn(len(candidates))]}
	case StrategySimple:
		return Choice{Cluster: candidates[0]}
	default: // Balanced: the fewest requests, ties to the first by namespace/name
		return Choice{Cluster: slices.MinFunc(candidates, func(a, b *clustersv1alpha1.Cluster) int {
			return cmp.Or(cmp.Compare(TenancyCount(a), TenancyCount(b)), byName(a, b))
		})}
	}
}

// Fits reports whether cl may serve req of purpose under pm: it is in scope, matches the combined
// selector and lists the purpose in spec.purposes.
func (c *Config) Fits(purpose string, pm *PurposeMapping, req *clustersv1alpha1.ClusterRequest, cl *clustersv1alpha1.Cluster) bool {
	sel, err := metav1.LabelSelectorAsSelector(CombinedSelector(c.Selectors.Clusters, pm.Selector))
	return err == nil && c.fits(purpose, pm, req, cl, sel)
}

func (c *Config) fits(purpose string, pm *PurposeMapping, req *clustersv1alpha1.ClusterRequest, cl *clustersv1alpha1.Cluster, sel labels.Selector) bool {
	return c.inScope(pm, req, cl) && sel.Matches(labels.Set(cl.Labels)) && slices.Contains(cl.Spec.Purposes, purpose)
}

// inScope: with scope Namespaced, only Clusters in the template's namespace, else the request's.
func (c *Config) inScope(pm *PurposeMapping, req *clustersv1alpha1.ClusterRequest, cl *clustersv1alpha1.Cluster) bool {
	if c.Scope != ScopeNamespaced {
		return true
	}
	return cl.Namespace == cmp.Or(pm.Template.Metadata.Namespace, req.Namespace)
}
