package v1alpha1

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/api/common"
)

// This file is the cluster selector library: three simple selectors (identities, labels,
// purposes) and the four aggregates combining them. Every selector is meant to be embedded inline
// into other API types, so its fields appear directly in the parent's YAML.
//
// Each simple selector has an unexported matches method that assumes the selector is valid; the
// exported Matches validates first, so an invalid selector never matches anything. Aggregates
// validate once and then call the parts' matches methods (see aggregate).

// ObjectWithPurposes is an object that selectors can filter: a client.Object that has a list of
// purposes. Cluster and ClusterRequest implement it.
//
// +kubebuilder:object:generate=false
type ObjectWithPurposes interface {
	client.Object

	// GetPurposes returns the object's purposes; nil or empty if it has none.
	GetPurposes() []string
}

var (
	_ ObjectWithPurposes = &Cluster{}
	_ ObjectWithPurposes = &ClusterRequest{}
)

// Selector filters ObjectWithPurposes. It is implemented by every selector type in this package.
//
// +kubebuilder:object:generate=false
type Selector interface {
	// Empty returns true if the selector does not restrict objects in any way, that is, if it
	// matches every possible object.
	Empty() bool

	// Matches returns true if the selector matches the object. It returns false for an invalid
	// selector (one whose Validate returns an error).
	Matches(obj ObjectWithPurposes) bool

	// Validate returns an error that names every problem of the selector, or nil if the selector
	// is valid.
	Validate() error
}

var (
	_ Selector = &IdentitySelector{}
	_ Selector = &LabelSelector{}
	_ Selector = &PurposeSelector{}
	_ Selector = &IdentityLabelSelector{}
	_ Selector = &IdentityPurposeSelector{}
	_ Selector = &LabelPurposeSelector{}
	_ Selector = &IdentityLabelPurposeSelector{}
)

// selectorPart is a simple selector as seen by the aggregates: matches is Matches without the
// validation, which the aggregate has already done.
type selectorPart interface {
	Selector
	matches(obj ObjectWithPurposes) bool
}

var (
	_ selectorPart = &IdentitySelector{}
	_ selectorPart = &LabelSelector{}
	_ selectorPart = &PurposeSelector{}
)

// matchIfValid is the Matches of every simple selector: false if s is invalid, else s.matches.
func matchIfValid(s selectorPart, obj ObjectWithPurposes) bool {
	return s.Validate() == nil && s.matches(obj)
}

// IdentitySelector matches exactly the objects it references by name and namespace.
//
// Unlike the other selectors it distinguishes a nil list of identities, which matches every object
// (Empty returns true), from an empty list, which matches no object (Empty returns false). The
// field therefore has no omitempty, so both survive a JSON or YAML round trip as
// `matchIdentities: null` and `matchIdentities: []`.
type IdentitySelector struct {
	// MatchIdentities lists the objects to match, by name and namespace; the namespace of a
	// cluster-scoped object is empty. Null (or unset) matches every object, an empty list none.
	// +optional
	// +nullable
	MatchIdentities []common.ObjectReference `json:"matchIdentities"`
}

// Empty returns true if the list of identities is nil; an empty but non-nil list matches nothing
// and is not Empty.
func (s *IdentitySelector) Empty() bool {
	return s.MatchIdentities == nil
}

// Matches returns true if the selector is Empty or references the object's name and namespace
// exactly. It returns false for an invalid selector.
func (s *IdentitySelector) Matches(obj ObjectWithPurposes) bool {
	return matchIfValid(s, obj)
}

// Validate returns an error for every identity without a name.
func (s *IdentitySelector) Validate() error {
	var errs []error
	for i, id := range s.MatchIdentities {
		if id.Name == "" {
			errs = append(errs, fmt.Errorf("%s must not be empty",
				field.NewPath("matchIdentities").Index(i).Child("name")))
		}
	}
	return errors.Join(errs...)
}

func (s *IdentitySelector) matches(obj ObjectWithPurposes) bool {
	if s.Empty() {
		return true
	}
	return slices.ContainsFunc(s.MatchIdentities, func(id common.ObjectReference) bool {
		return id.Name == obj.GetName() && id.Namespace == obj.GetNamespace()
	})
}

// LabelSelector matches objects by their labels. It wraps the Kubernetes label selector
// (matchLabels and matchExpressions with the operators In, NotIn, Exists and DoesNotExist) and
// evaluates it with k8s.io/apimachinery/pkg/labels.
type LabelSelector struct {
	metav1.LabelSelector `json:",inline"`
}

// Empty returns true if the selector has neither matchLabels nor matchExpressions.
func (s *LabelSelector) Empty() bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}

// Matches returns true if the object's labels satisfy the selector. It returns false for an
// invalid selector.
func (s *LabelSelector) Matches(obj ObjectWithPurposes) bool {
	return matchIfValid(s, obj)
}

// Validate validates the selector like the Kubernetes API server validates label selectors:
// label keys and values must be well-formed and every operator must be one of In, NotIn, Exists
// and DoesNotExist.
func (s *LabelSelector) Validate() error {
	// A nil path: the selector is inline, so its fields are at the root of the parent's selector.
	return metav1validation.ValidateLabelSelector(&s.LabelSelector,
		metav1validation.LabelSelectorValidationOptions{}, nil).ToAggregate()
}

func (s *LabelSelector) matches(obj ObjectWithPurposes) bool {
	sel, err := metav1.LabelSelectorAsSelector(&s.LabelSelector)
	if err != nil {
		return false
	}
	return sel.Matches(labels.Set(obj.GetLabels()))
}

// PurposeSelectorOperator is how a PurposeSelectorRequirement compares its values with an object's
// purposes.
// +kubebuilder:validation:Enum=ContainsAll;ContainsAny;ContainsNone;Equals
type PurposeSelectorOperator string

const (
	// PurposeSelectorOpContainsAll matches if the object has every purpose of the requirement.
	PurposeSelectorOpContainsAll PurposeSelectorOperator = "ContainsAll"
	// PurposeSelectorOpContainsAny matches if the object has at least one purpose of the
	// requirement.
	PurposeSelectorOpContainsAny PurposeSelectorOperator = "ContainsAny"
	// PurposeSelectorOpContainsNone matches if the object has none of the requirement's purposes.
	PurposeSelectorOpContainsNone PurposeSelectorOperator = "ContainsNone"
	// PurposeSelectorOpEquals matches if the object's purposes and the requirement's values are
	// the same set: order and duplicates on either side do not matter.
	PurposeSelectorOpEquals PurposeSelectorOperator = "Equals"
)

// purposeSelectorOperators are the valid operators, in the order error messages list them.
var purposeSelectorOperators = []PurposeSelectorOperator{
	PurposeSelectorOpContainsAll,
	PurposeSelectorOpContainsAny,
	PurposeSelectorOpContainsNone,
	PurposeSelectorOpEquals,
}

// PurposeSelector matches objects by their purposes (ObjectWithPurposes.GetPurposes). It looks
// like the matchExpressions of a label selector.
type PurposeSelector struct {
	// MatchPurposes are requirements on the object's purposes; all of them must be met. No
	// requirements match every object.
	// +optional
	MatchPurposes []PurposeSelectorRequirement `json:"matchPurposes,omitempty"`
}

// PurposeSelectorRequirement is one requirement of a PurposeSelector.
type PurposeSelectorRequirement struct {
	// Operator is ContainsAll, ContainsAny, ContainsNone or Equals.
	Operator PurposeSelectorOperator `json:"operator"`

	// Values are the purposes the operator compares the object's purposes with. Empty strings are
	// invalid.
	// +optional
	// +kubebuilder:validation:items:MinLength=1
	Values []string `json:"values,omitempty"`
}

// Empty returns true if the selector has no requirements.
func (s *PurposeSelector) Empty() bool {
	return len(s.MatchPurposes) == 0
}

// Matches returns true if the object's purposes meet every requirement. It returns false for an
// invalid selector.
func (s *PurposeSelector) Matches(obj ObjectWithPurposes) bool {
	return matchIfValid(s, obj)
}

// Validate returns an error for every unknown operator and every empty value.
func (s *PurposeSelector) Validate() error {
	var errs []error
	for i, r := range s.MatchPurposes {
		path := field.NewPath("matchPurposes").Index(i)
		if !slices.Contains(purposeSelectorOperators, r.Operator) {
			errs = append(errs, fmt.Errorf("%s %q is not one of %s",
				path.Child("operator"), r.Operator, joinOperators(purposeSelectorOperators)))
		}
		for j, v := range r.Values {
			if v == "" {
				errs = append(errs, fmt.Errorf("%s must not be empty", path.Child("values").Index(j)))
			}
		}
	}
	return errors.Join(errs...)
}

func (s *PurposeSelector) matches(obj ObjectWithPurposes) bool {
	purposes := obj.GetPurposes()
	for _, r := range s.MatchPurposes {
		if !r.matches(purposes) {
			return false
		}
	}
	return true
}

// matches returns true if purposes meet the requirement; false for an unknown operator.
func (r *PurposeSelectorRequirement) matches(purposes []string) bool {
	has := func(p string) bool { return slices.Contains(purposes, p) }
	switch r.Operator {
	case PurposeSelectorOpContainsAll:
		return !slices.ContainsFunc(r.Values, func(v string) bool { return !has(v) })
	case PurposeSelectorOpContainsAny:
		return slices.ContainsFunc(r.Values, has)
	case PurposeSelectorOpContainsNone:
		return !slices.ContainsFunc(r.Values, has)
	case PurposeSelectorOpEquals:
		// Set equality: every value is a purpose and every purpose is a value.
		return !slices.ContainsFunc(r.Values, func(v string) bool { return !has(v) }) &&
			!slices.ContainsFunc(purposes, func(p string) bool { return !slices.Contains(r.Values, p) })
	default:
		return false
	}
}

func joinOperators(ops []PurposeSelectorOperator) string {
	names := make([]string, len(ops))
	for i, op := range ops {
		names[i] = string(op)
	}
	return strings.Join(names, ", ")
}

// aggregate is the logic shared by the aggregate selectors.
type aggregate struct {
	// identities is the identity part, or nil if the aggregate has none.
	identities *IdentitySelector
	// others are the remaining parts, ANDed unless the identity part overrides them.
	others []selectorPart
}

func (a aggregate) parts() []selectorPart {
	if a.identities == nil {
		return a.others
	}
	return append([]selectorPart{a.identities}, a.others...)
}

// Empty ANDs the parts' Empty.
func (a aggregate) Empty() bool {
	for _, p := range a.parts() {
		if !p.Empty() {
			return false
		}
	}
	return true
}

// Validate joins the parts' errors.
func (a aggregate) Validate() error {
	var errs []error
	for _, p := range a.parts() {
		errs = append(errs, p.Validate())
	}
	return errors.Join(errs...)
}

// Matches returns false if any part is invalid. Otherwise a non-Empty identity part is the only
// part evaluated; without one, all other parts must match.
func (a aggregate) Matches(obj ObjectWithPurposes) bool {
	if a.Validate() != nil {
		return false
	}
	if a.identities != nil && !a.identities.Empty() {
		return a.identities.matches(obj)
	}
	for _, p := range a.others {
		if !p.matches(obj) {
			return false
		}
	}
	return true
}

// IdentityLabelSelector combines an IdentitySelector and a LabelSelector: its YAML has the fields
// matchIdentities, matchLabels and matchExpressions.
//
// If matchIdentities is not null, only the identities are evaluated and the labels are ignored;
// otherwise the label selector decides.
type IdentityLabelSelector struct {
	IdentitySelector `json:",inline"`
	LabelSelector    `json:",inline"`
}

func (s *IdentityLabelSelector) aggregate() aggregate {
	return aggregate{identities: &s.IdentitySelector, others: []selectorPart{&s.LabelSelector}}
}

// Empty returns true if both parts are Empty.
func (s *IdentityLabelSelector) Empty() bool { return s.aggregate().Empty() }

// Matches returns false for an invalid selector. Otherwise it matches by identity if
// matchIdentities is not null, else by labels.
func (s *IdentityLabelSelector) Matches(obj ObjectWithPurposes) bool {
	return s.aggregate().Matches(obj)
}

// Validate returns the errors of both parts, joined.
func (s *IdentityLabelSelector) Validate() error { return s.aggregate().Validate() }

// IdentityPurposeSelector combines an IdentitySelector and a PurposeSelector: its YAML has the
// fields matchIdentities and matchPurposes.
//
// If matchIdentities is not null, only the identities are evaluated and the purposes are ignored;
// otherwise the purpose selector decides.
type IdentityPurposeSelector struct {
	IdentitySelector `json:",inline"`
	PurposeSelector  `json:",inline"`
}

func (s *IdentityPurposeSelector) aggregate() aggregate {
	return aggregate{identities: &s.IdentitySelector, others: []selectorPart{&s.PurposeSelector}}
}

// Empty returns true if both parts are Empty.
func (s *IdentityPurposeSelector) Empty() bool { return s.aggregate().Empty() }

// Matches returns false for an invalid selector. Otherwise it matches by identity if
// matchIdentities is not null, else by purposes.
func (s *IdentityPurposeSelector) Matches(obj ObjectWithPurposes) bool {
	return s.aggregate().Matches(obj)
}

// Validate returns the errors of both parts, joined.
func (s *IdentityPurposeSelector) Validate() error { return s.aggregate().Validate() }

// LabelPurposeSelector combines a LabelSelector and a PurposeSelector: its YAML has the fields
// matchLabels, matchExpressions and matchPurposes. An object must satisfy both parts.
type LabelPurposeSelector struct {
	LabelSelector   `json:",inline"`
	PurposeSelector `json:",inline"`
}

func (s *LabelPurposeSelector) aggregate() aggregate {
	return aggregate{others: []selectorPart{&s.LabelSelector, &s.PurposeSelector}}
}

// Empty returns true if both parts are Empty.
func (s *LabelPurposeSelector) Empty() bool { return s.aggregate().Empty() }

// Matches returns false for an invalid selector. Otherwise it returns true if the object matches
// both the labels and the purposes.
func (s *LabelPurposeSelector) Matches(obj ObjectWithPurposes) bool {
	return s.aggregate().Matches(obj)
}

// Validate returns the errors of both parts, joined.
func (s *LabelPurposeSelector) Validate() error { return s.aggregate().Validate() }

// IdentityLabelPurposeSelector combines an IdentitySelector, a LabelSelector and a
// PurposeSelector: its YAML has the fields matchIdentities, matchLabels, matchExpressions and
// matchPurposes.
//
// If matchIdentities is not null, only the identities are evaluated; otherwise an object must
// match both the labels and the purposes.
type IdentityLabelPurposeSelector struct {
	IdentitySelector `json:",inline"`
	LabelSelector    `json:",inline"`
	PurposeSelector  `json:",inline"`
}

func (s *IdentityLabelPurposeSelector) aggregate() aggregate {
	return aggregate{
		identities: &s.IdentitySelector,
		others:     []selectorPart{&s.LabelSelector, &s.PurposeSelector},
	}
}

// Empty returns true if all three parts are Empty.
func (s *IdentityLabelPurposeSelector) Empty() bool { return s.aggregate().Empty() }

// Matches returns false for an invalid selector. Otherwise it matches by identity if
// matchIdentities is not null, else by labels and purposes together.
func (s *IdentityLabelPurposeSelector) Matches(obj ObjectWithPurposes) bool {
	return s.aggregate().Matches(obj)
}

// Validate returns the errors of all three parts, joined.
func (s *IdentityLabelPurposeSelector) Validate() error { return s.aggregate().Validate() }
