package accessrequest

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Sweeper reconciles the Clusters of one ClusterProfile for their grants: it deletes from a
// Cluster's cluster the ServiceAccounts, (Cluster)Roles and bindings this operator made for
// AccessRequests that no longer exist (or were deleted and made again), so that a restore from a
// snapshot taken before a request was deleted does not bring its access back. It runs when the
// Cluster becomes Ready, when it reports a restore or a loss of data it has not swept after
// (SweepMarker, remembered in AnnotationGrantsSwept, which also brings the Cluster's
// AccessRequests back to their reconciler so that those that exist are granted again at once),
// and every Options.GrantCheck, for grants whose request went while the operator was down.
type Sweeper struct {
	kit.ProfileScope
	// Options are the AccessRequest reconcilers'; set them WithDefaults. Environment names the
	// grants; SecretReader (the API reader) confirms that a request is gone before its grants go.
	Options Options
}

// Reconcile sweeps the grants of one Cluster; a lost optimistic-lock race is retried quietly.
func (s *Sweeper) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return kit.QuietConflict(s.reconcile(ctx, req))
}

func (s *Sweeper) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cl := &clustersv1alpha1.Cluster{}
	if err := s.Client.Get(ctx, req.NamespacedName, cl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// A cluster that does not serve is swept when it becomes Ready (an update that brings it back).
	if cl.Spec.Profile != s.Profile || !cl.DeletionTimestamp.IsZero() || s.Backend == nil || cl.Status.Phase != common.PhaseReady {
		return reconcile.Result{}, nil
	}
	marker := SweepMarker(cl)
	due := marker != "" && cl.Annotations[AnnotationGrantsSwept] != marker
	if !due && Hibernated(cl) {
		// Not woken for the periodic sweep: its wake changes its status, which brings it back.
		return reconcile.Result{}, nil
	}
	cfg, err := s.Backend.AdminConfig(ctx, cl)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("reaching the cluster to sweep its grants: %w", err)
	}
	t, err := newTarget(cfg, s.Options.WrapTransport)
	if err != nil {
		return reconcile.Result{}, err
	}
	removed, err := s.sweep(ctx, t)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("sweeping the grants of AccessRequests that are gone: %w", err)
	}
	if len(removed) > 0 {
		log.FromContext(ctx).Info("Removed the grants of AccessRequests that no longer exist", "count", len(removed), "objects", listed(removed, 20))
	}
	if !due {
		if len(removed) > 0 {
			s.Event(cl, corev1.EventTypeWarning, ReasonGrantsSwept, "Sweep",
				"Removed %d object(s) made for AccessRequests that no longer exist (deleted while the operator could not revoke them): %s", len(removed), listed(removed, 10))
		}
		return reconcile.Result{RequeueAfter: s.Options.GrantCheck}, nil
	}
	// The annotation's change is what brings the Cluster's AccessRequests back to their
	// reconciler (the engine's Cluster watch): they are granted again after the sweep.
	base := cl.DeepCopy()
	if cl.Annotations == nil {
		cl.Annotations = map[string]string{}
	}
	cl.Annotations[AnnotationGrantsSwept] = marker
	if err := s.Client.Patch(ctx, cl, client.MergeFrom(base)); err != nil {
		return reconcile.Result{}, fmt.Errorf("recording the grant sweep in annotation %s: %w", AnnotationGrantsSwept, err)
	}
	requests, err := s.requests(ctx, cl)
	if err != nil {
		return reconcile.Result{}, err
	}
	what := "none"
	if len(removed) > 0 {
		what = listed(removed, 10)
	}
	s.Event(cl, corev1.EventTypeNormal, ReasonGrantsSwept, "Sweep",
		"After the cluster's data was replaced (restored or lost), %d object(s) made for AccessRequests that no longer exist were removed, so their tokens no longer work (%s); the %d AccessRequest(s) of the Cluster are granted again now",
		len(removed), what, requests)
	return reconcile.Result{RequeueAfter: s.Options.GrantCheck}, nil
}

// sweep deletes, kind by kind in the order of kinds (bindings before roles, the ServiceAccount
// last), every object of the cluster with this operator's request labels whose request is gone
// (judge), and returns what it deleted. An object made anew since it was listed is not deleted
// (UID precondition). Deleting goes on past an error; all are returned.
func (s *Sweeper) sweep(ctx context.Context, t target) ([]grantRef, error) {
	sel, err := grantSelector()
	if err != nil {
		return nil, err
	}
	requests := map[client.ObjectKey]*clustersv1alpha1.AccessRequest{}
	var removed []grantRef
	var errs []error
	for _, k := range kinds {
		if !k.owned {
			continue
		}
		list, err := t.resource(k, "").List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return removed, errors.Join(append(errs, fmt.Errorf("listing the %ss of AccessRequests: %w", k.name, err))...)
		}
		for _, u := range list.Items {
			o := grantRef{kind: k.name, namespace: u.GetNamespace(), name: u.GetName(), uid: u.GetUID(), labels: u.GetLabels(), annotations: u.GetAnnotations()}
			gone, err := s.gone(ctx, o, requests)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !gone {
				continue
			}
			del := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(o.uid)}}
			err = t.resource(k, o.namespace).Delete(ctx, o.name, del)
			switch {
			case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
				// gone already, or made anew since the list: the next sweep judges the new one
			case err != nil:
				errs = append(errs, fmt.Errorf("deleting %s: %w", o, err))
			default:
				removed = append(removed, o)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// gone reports whether o is an orphan (judge): its request is looked up in the cache, remembered
// in requests, and an orphan is confirmed with the API server (Options.SecretReader), since the
// cache may not have seen a request made since o was.
func (s *Sweeper) gone(ctx context.Context, o grantRef, requests map[client.ObjectKey]*clustersv1alpha1.AccessRequest) (bool, error) {
	key := o.request()
	ar, seen := requests[key]
	if !seen && key.Name != "" {
		var err error
		if ar, err = s.request(ctx, s.Client, key); err != nil {
			return false, err
		}
		requests[key] = ar
	}
	if judge(o, ar, s.Options.Environment, s.ProviderName) != orphan {
		return false, nil
	}
	if s.Options.SecretReader == nil {
		return true, nil
	}
	live, err := s.request(ctx, s.Options.SecretReader, key)
	if err != nil {
		return false, err
	}
	requests[key] = live
	return judge(o, live, s.Options.Environment, s.ProviderName) == orphan, nil
}

// request reads the AccessRequest key through r; nil when it does not exist.
func (s *Sweeper) request(ctx context.Context, r client.Reader, key client.ObjectKey) (*clustersv1alpha1.AccessRequest, error) {
	ar := &clustersv1alpha1.AccessRequest{}
	if err := r.Get(ctx, key, ar); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading AccessRequest %s: %w", key, err)
	}
	return ar, nil
}

// requests counts the AccessRequests for cl that this operator answers.
func (s *Sweeper) requests(ctx context.Context, cl *clustersv1alpha1.Cluster) (int, error) {
	list := &clustersv1alpha1.AccessRequestList{}
	if err := s.Client.List(ctx, list, client.MatchingFields{IndexClusterRef: client.ObjectKeyFromObject(cl).String()}); err != nil {
		return 0, fmt.Errorf("listing the AccessRequests of Cluster %s: %w", client.ObjectKeyFromObject(cl), err)
	}
	return len(list.Items), nil
}

// grantSelector selects the objects this operator made for AccessRequests: managed by it, with a
// RequestID.
func grantSelector() (string, error) {
	managed, err := labels.NewRequirement(LabelManagedBy, selection.Equals, []string{ManagedByValue})
	if err != nil {
		return "", err
	}
	withID, err := labels.NewRequirement(LabelRequestID, selection.Exists, nil)
	if err != nil {
		return "", err
	}
	return labels.NewSelector().Add(*managed, *withID).String(), nil
}

// listed names the first n of refs, and how many more there are.
func listed(refs []grantRef, n int) string {
	names := make([]string, 0, min(n, len(refs)))
	for _, o := range refs[:min(n, len(refs))] {
		names = append(names, o.String())
	}
	out := strings.Join(names, ", ")
	if len(refs) > n {
		out += fmt.Sprintf(" and %d more", len(refs)-n)
	}
	return out
}

// Hibernated reports whether cl's cluster is hibernated (condition Hibernated True): no process
// of it runs, so nothing in it changed, and a request to it would wake it.
func Hibernated(cl *clustersv1alpha1.Cluster) bool {
	return meta.IsStatusConditionTrue(cl.Status.Conditions, backend.PartHibernated)
}
