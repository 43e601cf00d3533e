package kit

import (
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-local/cluster-provider/api/common"
)

// SetCondition sets a condition of status for the object's generation; the transition time
// changes only when the condition's status does (meta.SetStatusCondition). Conditions of other
// types are kept.
func SetCondition(s *common.Status, generation int64, condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		ObservedGeneration: generation,
		Reason:             reason,
		Message:            message,
	})
}

// ReconciledPhase sets observedGeneration and derives the phase as controller-guidelines.md
// asks: Terminating while deleting, Ready if every condition is True, Progressing otherwise.
//
// Conditions of the types in informational do not count: they say something worth knowing about
// a resource that works as it is (the guidelines' "good reason"), as a refused version change of
// a Cluster that keeps serving its version.
func ReconciledPhase(s *common.Status, generation int64, deleting bool, informational ...string) {
	s.ObservedGeneration = generation
	switch {
	case deleting:
		s.Phase = common.PhaseTerminating
	case allTrue(s.Conditions, informational):
		s.Phase = common.PhaseReady
	default:
		s.Phase = common.PhaseProgressing
	}
}

func allTrue(conds []metav1.Condition, informational []string) bool {
	for _, c := range conds {
		if c.Status != metav1.ConditionTrue && !slices.Contains(informational, c.Type) {
			return false
		}
	}
	return true
}

// ReasonError is an error that carries the condition reason it should be reported with. Wrap it
// with %w; ReasonOf finds it again.
type ReasonError struct {
	Reason string
	Err    error
}

// Error returns the message, which is meant for the user: it says what to fix.
func (e *ReasonError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *ReasonError) Unwrap() error { return e.Err }

// Errorf returns a ReasonError with a formatted message.
func Errorf(reason, format string, args ...any) error {
	return &ReasonError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ConditionReason returns the reason; it makes ReasonError a Reasoner.
func (e *ReasonError) ConditionReason() string { return e.Reason }

// Reasoner is an error that names the condition reason it must be reported with; ReasonError and
// backend.Error are.
type Reasoner interface {
	error
	ConditionReason() string
}

// ReasonOf returns the reason of the first Reasoner in err's chain, or fallback.
func ReasonOf(err error, fallback string) string {
	var re Reasoner
	if errors.As(err, &re) {
		return re.ConditionReason()
	}
	return fallback
}

// conflictRetry is how soon a reconcile that lost an optimistic-lock race runs again.
const conflictRetry = 100 * time.Millisecond

// QuietConflict turns a conflict (another writer changed the object since it was read) into a
// quick retry without an error: the next reconcile reads fresh data. That is routine, not a failure
// worth an ERROR line and a stack trace.
func QuietConflict(res reconcile.Result, err error) (reconcile.Result, error) {
	if err != nil && apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}
