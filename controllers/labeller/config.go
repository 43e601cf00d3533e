package labeller

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Config is the optional accessRequest section of the operator's configuration file. The zero
// value (or a nil *Config) labels every AccessRequest.
type Config struct {
	// Selector restricts the labeller to AccessRequests whose labels match it. Instances with
	// disjoint selectors can share one cluster. Unset means all AccessRequests.
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// selectorPath is where Selector lives in the configuration file; errors name it.
var selectorPath = field.NewPath("accessRequest", "selector")

// Validate reports every problem of the configuration, naming its field path (for example
// `accessRequest.selector.matchExpressions[0].operator`). Call it at start-up and stop on error.
func (c *Config) Validate() error {
	if c == nil {
		return nil
	}
	return metav1validation.ValidateLabelSelector(c.Selector, metav1validation.LabelSelectorValidationOptions{}, selectorPath).ToAggregate()
}

// AsSelector returns Selector as a labels.Selector for Reconciler.Selector: labels.Everything()
// when no selector is set. It fails on a selector Validate rejects.
func (c *Config) AsSelector() (labels.Selector, error) {
	if c == nil || c.Selector == nil {
		return labels.Everything(), nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	s, err := metav1.LabelSelectorAsSelector(c.Selector)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", selectorPath, err)
	}
	return s, nil
}
