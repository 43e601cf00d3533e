package scheduler

import (
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// Scope says where the scheduler looks for candidate Clusters.
type Scope string

const (
	// ScopeCluster: Clusters of every namespace are candidates (the default).
	ScopeCluster Scope = "Cluster"
	// ScopeNamespaced: only Clusters in the template's namespace, else the request's.
	ScopeNamespaced Scope = "Namespaced"
)

// Strategy says which of several candidate Clusters a Shared request gets.
type Strategy string

const (
	// StrategyBalanced: the candidate with the fewest requests, ties to the first by
	// namespace/name (the default).
	StrategyBalanced Strategy = "Balanced"
	// StrategySimple: the first candidate by namespace/name.
	StrategySimple Strategy = "Simple"
	// StrategyRandom: any candidate.
	StrategyRandom Strategy = "Random"
)

// Config is the `scheduler:` section of the operator's configuration file.
type Config struct {
	// Scope is Cluster (default) or Namespaced.
	Scope Scope `json:"scope,omitempty"`
	// Strategy is Balanced (default), Simple or Random.
	Strategy Strategy `json:"strategy,omitempty"`
	// Selectors limit what the scheduler considers at all.
	Selectors Selectors `json:"selectors,omitempty"`
	// PurposeMappings map a ClusterRequest's spec.purpose to the Clusters that serve it.
	PurposeMappings map[string]*PurposeMapping `json:"purposeMappings"`
}

// Selectors are the global label selectors of the scheduler.
type Selectors struct {
	// Clusters: only Clusters that match are candidates. Unset: all.
	Clusters *metav1.LabelSelector `json:"clusters,omitempty"`
	// Requests: only ClusterRequests that match are answered. Unset: all.
	Requests *metav1.LabelSelector `json:"requests,omitempty"`
}

// PurposeMapping says which Clusters serve one purpose and how new ones look.
type PurposeMapping struct {
	// TenancyCount is how many requests a Shared Cluster serves at most; 0 means unlimited.
	// Exclusive mappings must leave it 0.
	TenancyCount int `json:"tenancyCount,omitempty"`
	// Selector narrows the candidates of this purpose, ANDed with Selectors.Clusters.
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
	// Template is what a new Cluster of this purpose looks like.
	Template ClusterTemplate `json:"template"`
}

// ClusterTemplate is the metadata and spec of the Clusters the scheduler creates.
type ClusterTemplate struct {
	Metadata TemplateMeta                 `json:"metadata,omitempty"`
	Spec     clustersv1alpha1.ClusterSpec `json:"spec"`
}

// TemplateMeta is the part of a Cluster's metadata a template may set.
type TemplateMeta struct {
	Name         string            `json:"name,omitempty"`
	GenerateName string            `json:"generateName,omitempty"`
	Namespace    string            `json:"namespace,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Annotations  map[string]string `json:"annotations,omitempty"`
}

// path is where the section lives in the configuration file; errors name paths below it.
var path = field.NewPath("scheduler")

// Default fills in the defaults: scope Cluster, strategy Balanced.
func (c *Config) Default() {
	if c.Scope == "" {
		c.Scope = ScopeCluster
	}
	if c.Strategy == "" {
		c.Strategy = StrategyBalanced
	}
}

// Validate reports every problem of the (defaulted) section, each naming its field path, for
// example `scheduler.purposeMappings[exclusive].tenancyCount`.
func (c *Config) Validate() error {
	var errs field.ErrorList
	if !slices.Contains([]Scope{ScopeCluster, ScopeNamespaced}, c.Scope) {
		errs = append(errs, field.NotSupported(path.Child("scope"), c.Scope, []Scope{ScopeCluster, ScopeNamespaced}))
	}
	if !slices.Contains([]Strategy{StrategyBalanced, StrategySimple, StrategyRandom}, c.Strategy) {
		errs = append(errs, field.NotSupported(path.Child("strategy"), c.Strategy, []Strategy{StrategyBalanced, StrategySimple, StrategyRandom}))
	}
	opts := metav1validation.LabelSelectorValidationOptions{}
	errs = append(errs, metav1validation.ValidateLabelSelector(c.Selectors.Clusters, opts, path.Child("selectors", "clusters"))...)
	errs = append(errs, metav1validation.ValidateLabelSelector(c.Selectors.Requests, opts, path.Child("selectors", "requests"))...)
	if len(c.PurposeMappings) == 0 {
		errs = append(errs, field.Required(path.Child("purposeMappings"), "name at least one purpose, or leave the scheduler out of --controllers"))
	}
	for _, purpose := range slices.Sorted(maps.Keys(c.PurposeMappings)) {
		errs = append(errs, c.validateMapping(purpose, opts)...)
	}
	return errs.ToAggregate()
}

func (c *Config) validateMapping(purpose string, opts metav1validation.LabelSelectorValidationOptions) field.ErrorList {
	p := path.Child("purposeMappings").Key(purpose)
	pm := c.PurposeMappings[purpose]
	var errs field.ErrorList
	if purpose == "" {
		errs = append(errs, field.Invalid(p, purpose, "a purpose must not be empty"))
	}
	if pm == nil {
		return append(errs, field.Required(p, "a mapping needs a template"))
	}
	spec, meta := p.Child("template", "spec"), p.Child("template", "metadata")
	if pm.Template.Spec.Profile == "" {
		errs = append(errs, field.Required(spec.Child("profile"), "the ClusterProfile of the Clusters this purpose creates"))
	}
	switch pm.Template.Spec.Tenancy {
	case clustersv1alpha1.TenancyExclusive:
		if pm.TenancyCount != 0 {
			errs = append(errs, field.Invalid(p.Child("tenancyCount"), pm.TenancyCount, "an Exclusive Cluster serves one request: leave tenancyCount 0"))
		}
	case clustersv1alpha1.TenancyShared:
		if pm.TenancyCount < 0 {
			errs = append(errs, field.Invalid(p.Child("tenancyCount"), pm.TenancyCount, "must be 0 (unlimited) or more"))
		}
	case "":
		errs = append(errs, field.Required(spec.Child("tenancy"), "Exclusive or Shared"))
	default:
		errs = append(errs, field.NotSupported(spec.Child("tenancy"), pm.Template.Spec.Tenancy,
			[]clustersv1alpha1.Tenancy{clustersv1alpha1.TenancyExclusive, clustersv1alpha1.TenancyShared}))
	}
	m := pm.Template.Metadata
	for _, f := range []struct{ name, value string }{{"name", m.Name}, {"namespace", m.Namespace}} {
		if f.value != "" {
			for _, msg := range validation.IsDNS1123Subdomain(f.value) {
				errs = append(errs, field.Invalid(meta.Child(f.name), f.value, msg))
			}
		}
	}
	if m.GenerateName != "" {
		// A prefix: the hash of 8 characters follows it.
		for _, msg := range validation.IsDNS1123Subdomain(m.GenerateName + "a") {
			errs = append(errs, field.Invalid(meta.Child("generateName"), m.GenerateName, msg))
		}
	}
	errs = append(errs, metav1validation.ValidateLabels(m.Labels, meta.Child("labels"))...)
	errs = append(errs, metav1validation.ValidateLabelSelector(pm.Selector, opts, p.Child("selector"))...)
	if len(errs) > 0 {
		return errs
	}
	sel, err := metav1.LabelSelectorAsSelector(CombinedSelector(c.Selectors.Clusters, pm.Selector))
	if err != nil {
		return append(errs, field.Invalid(p.Child("selector"), pm.Selector, err.Error()))
	}
	if !sel.Matches(labels.Set(m.Labels)) {
		errs = append(errs, field.Invalid(meta.Child("labels"), m.Labels, fmt.Sprintf(
			"the Clusters this purpose creates must match the selectors they are chosen by (scheduler.selectors.clusters and this purpose's selector: %s)", sel)))
	}
	return errs
}

// RequestSelector is selectors.requests as a labels.Selector: every request when it is unset
// (metav1.LabelSelectorAsSelector would make a nil selector match nothing).
func (c *Config) RequestSelector() (labels.Selector, error) {
	if c.Selectors.Requests == nil {
		return labels.Everything(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(c.Selectors.Requests)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path.Child("selectors", "requests"), err)
	}
	return sel, nil
}

// CombinedSelector is the selector a purpose's candidates must match: the global Clusters
// selector ANDed with the purpose's. On a key in both matchLabels the global value wins; the
// matchExpressions of both apply. Neither argument is changed.
func CombinedSelector(global, purpose *metav1.LabelSelector) *metav1.LabelSelector {
	out := &metav1.LabelSelector{}
	for _, s := range []*metav1.LabelSelector{purpose, global} { // global last: its values win
		if s == nil {
			continue
		}
		if len(s.MatchLabels) > 0 && out.MatchLabels == nil {
			out.MatchLabels = map[string]string{}
		}
		maps.Copy(out.MatchLabels, s.MatchLabels)
		for _, e := range s.MatchExpressions {
			out.MatchExpressions = append(out.MatchExpressions, *e.DeepCopy())
		}
	}
	return out
}
