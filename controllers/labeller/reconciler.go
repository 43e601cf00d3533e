package labeller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// ControllerName names the controller, its metrics and logs, and reports its Events.
const ControllerName = "accessrequest-labeller"

// DefaultMaxConcurrentReconciles is the number of AccessRequests labelled in parallel unless
// Reconciler.MaxConcurrentReconciles says otherwise. A pass is mostly waiting for two PATCHes,
// so several workers are needed to keep the API server busy; beyond that its CPU is the limit
// (docs/benchmarks.md).
const DefaultMaxConcurrentReconciles = 8

// RBAC markers are package markers: they must not be part of a declaration's doc comment.
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=accessrequests,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=accessrequests/status,verbs=patch
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusterrequests;clusters;clusterprofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler labels AccessRequests with their ClusterProvider and ClusterProfile. Set it up with
// SetupWithManager; the zero value plus a manager is a working labeller for all AccessRequests.
type Reconciler struct {
	// Client reads from the manager's cache (with the indexes SetupWithManager registers) and
	// writes to the API server. Default: mgr.GetClient().
	Client client.Client

	// Recorder emits the Warning Event on a label conflict. Default:
	// mgr.GetEventRecorder(ControllerName) (events.k8s.io/v1 Events).
	Recorder events.EventRecorder

	// Selector restricts the labeller to AccessRequests whose labels match (see
	// Config.AsSelector). Default: labels.Everything().
	Selector labels.Selector

	// MaxConcurrentReconciles is the number of workers. Default:
	// DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int

	// handedOver maps the UID of a request this labeller labelled and set Pending in one pass to
	// the resourceVersion of its labelled, not yet Pending, version. The labels write's own
	// update event brings the request back, often before the cache has the Pending version: that
	// stale version is skipped instead of being set Pending a second time (a write that could only
	// fail on its lock). The entry goes at that next pass, whichever version it sees.
	handedOver sync.Map
}

// Reconcile prepares one AccessRequest: fetch → not ours? done → operation annotation → resolve
// → one labels PATCH (when resolved) → one status PATCH (only if the labeller has something to
// report or an earlier condition of its own to clear). An
// AccessRequest that waits for another object returns without error; a watch on that object
// brings it back.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	ar := &clustersv1alpha1.AccessRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, ar); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// spec.ttl applies to every AccessRequest the selector matches, labelled or not. Every pass
	// returns the time left: its queue entry may have replaced the one of an earlier pass.
	expiry, expired, err := r.expire(ctx, ar)
	if err != nil || expired {
		return ctrl.Result{}, err
	}
	if rv, ok := r.handedOver.LoadAndDelete(ar.UID); ok && rv == ar.ResourceVersion {
		return ctrl.Result{RequeueAfter: expiry}, nil // the cache is behind this labeller's own hand-over
	}
	// A labelled request goes back to its provider through phase Pending when its spec changed.
	if r.resets(ar) {
		return ctrl.Result{RequeueAfter: expiry}, r.setPending(ctx, ar)
	}
	// Checked before the operation annotation: once both labels are set, even a reconcile
	// annotation belongs to the provider's reconciler, not to us.
	if !r.owns(ar) {
		return ctrl.Result{RequeueAfter: expiry}, nil
	}
	// The labeller keeps no state that could let it skip work: every pass resolves afresh, so a
	// reconcile annotation only needs to be removed.
	if stop, err := kit.HandleOperation(ctx, r.Client, ar); stop || err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.reconcileNormal(ctx, ar)
	if expiry > 0 && (res.RequeueAfter == 0 || expiry < res.RequeueAfter) {
		res.RequeueAfter = expiry
	}
	return res, err
}

// expire deletes ar once its spec.ttl has passed (openMCP's behaviour; the provider's finalizer
// then revokes the access) and reports it expired. Before that it returns how long is left, so
// that the request is looked at again then; zero without a TTL.
func (r *Reconciler) expire(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (left time.Duration, expired bool, err error) {
	if ar.Spec.TTL == nil || !r.Selector.Matches(labels.Set(ar.Labels)) {
		return 0, false, nil
	}
	if left = time.Until(ar.CreationTimestamp.Add(ar.Spec.TTL.Duration)); left > 0 {
		return left, false, nil
	}
	if ar.DeletionTimestamp.IsZero() {
		if err := r.Client.Delete(ctx, ar, client.Preconditions{UID: &ar.UID}); client.IgnoreNotFound(err) != nil {
			return 0, false, fmt.Errorf("deleting the expired AccessRequest: %w", err)
		}
		log.FromContext(ctx).Info("Deleted the AccessRequest: its spec.ttl has passed", "ttl", ar.Spec.TTL.Duration)
		r.Recorder.Eventf(ar, nil, corev1.EventTypeNormal, ReasonExpired, "Delete", "spec.ttl %s has passed; the AccessRequest is deleted", ar.Spec.TTL.Duration)
	}
	return 0, true, nil
}

// reconcileNormal resolves ar's provider, writes the labels, then reports the outcome in the
// status.
func (r *Reconciler) reconcileNormal(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (ctrl.Result, error) {
	t, err := r.resolve(ctx, ar)
	if err == nil {
		err = checkLabels(ar.Labels, t)
	}
	if err != nil {
		return r.reconcileUnresolved(ctx, ar, err)
	}
	if err := r.patchLabels(ctx, ar, t); err != nil {
		return ctrl.Result{}, err // the status is left alone: the retry writes it
	}
	// Labelled, the AccessRequest is handed to the provider by phase Pending (openMCP's handshake,
	// kit.ProviderResponsible): the provider acts on nothing else, so the two never write the phase
	// at once. The write is optimistically locked on the labelled version.
	// A conflict (changed since it was labelled) is retried quietly, from the newer version.
	labelled := ar.ResourceVersion
	if err := r.patchStatus(ctx, ar, t, nil); err != nil {
		return kit.QuietConflict(ctrl.Result{}, err)
	}
	r.handedOver.Store(ar.UID, labelled)
	return ctrl.Result{}, nil
}

// setPending hands the labelled request ar back to its provider: phase Pending for its current
// generation (kit.NeedsPending says when), optimistically locked so that a provider's newer
// answer is never overwritten.
func (r *Reconciler) setPending(ctx context.Context, ar *clustersv1alpha1.AccessRequest) error {
	before := ar.DeepCopy()
	kit.SetPending(ar)
	err := kit.PatchStatusIfChanged(ctx, r.Client, before, ar, statusOf)
	if apierrors.IsConflict(err) {
		return nil // changed meanwhile: its update event brings it back if it still needs this
	}
	if err != nil {
		return fmt.Errorf("setting the AccessRequest Pending: %w", err)
	}
	log.FromContext(ctx).V(1).Info("Set the AccessRequest Pending for its provider", "generation", ar.Generation, "phaseWas", before.Status.Phase)
	return nil
}

// reconcileUnresolved reports why ar cannot be labelled. A reason error (waiting for an object, or
// for a user to fix something) is not retried: a watch brings the AccessRequest back. Any other
// error is returned for a retry with backoff.
func (r *Reconciler) reconcileUnresolved(ctx context.Context, ar *clustersv1alpha1.AccessRequest, err error) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	reason := kit.ReasonOf(err, "")
	if reason == ReasonLabelConflict {
		logger.Error(err, "Not labelling the AccessRequest")
		r.Recorder.Eventf(ar, nil, corev1.EventTypeWarning, ReasonLabelConflict, "Label", "%s", err.Error())
	}
	if perr := r.patchStatus(ctx, ar, target{}, err); perr != nil {
		return ctrl.Result{}, errors.Join(err, perr)
	}
	if reason == "" {
		return ctrl.Result{}, err
	}
	logger.V(1).Info("AccessRequest not labelled yet", "reason", reason, "message", err.Error())
	return ctrl.Result{}, nil
}

// patchStatus writes setResolution's outcome with one status PATCH, or nothing if the status
// would not change. The PATCH is optimistically locked, because the merge patch replaces the
// whole conditions list: right after the labels are set, the provider's reconciler may already
// write this status, and its write must win.
func (r *Reconciler) patchStatus(ctx context.Context, ar *clustersv1alpha1.AccessRequest, t target, resolveErr error) error {
	before := ar.DeepCopy()
	setResolution(ar, t, resolveErr)
	if err := kit.PatchStatusIfChanged(ctx, r.Client, before, ar, statusOf); err != nil {
		return fmt.Errorf("patching the status: %w", err)
	}
	return nil
}

// patchLabels adds both labels and, if empty, spec.clusterRef in one merge patch that fails if
// the AccessRequest changed since it was read, so a concurrent label change is never overwritten.
func (r *Reconciler) patchLabels(ctx context.Context, ar *clustersv1alpha1.AccessRequest, t target) error {
	base := ar.DeepCopy()
	if ar.Labels == nil {
		ar.Labels = make(map[string]string, 2)
	}
	for _, l := range t.labels() {
		ar.Labels[l.key] = l.value
	}
	if ar.Spec.ClusterRef == nil {
		ar.Spec.ClusterRef = &common.ObjectReference{Namespace: t.Cluster.Namespace, Name: t.Cluster.Name}
	}
	if err := r.Client.Patch(ctx, ar, kit.LockedMergeFrom(base)); err != nil {
		return fmt.Errorf("labelling: %w", err)
	}
	log.FromContext(ctx).Info("Labelled the AccessRequest", "provider", t.Provider, "profile", t.Profile,
		"cluster", klog.KRef(t.Cluster.Namespace, t.Cluster.Name))
	return nil
}

func statusOf(ar *clustersv1alpha1.AccessRequest) any { return ar.Status }
