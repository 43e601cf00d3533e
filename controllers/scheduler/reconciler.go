package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/keymutex"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// ControllerName names the controller, its metrics and logs, and reports its Events.
const ControllerName = "clusterrequest-scheduler"

// Finalizer is the finalizer the scheduler puts on every ClusterRequest it answers; it releases the
// request's Cluster before the request goes.
const Finalizer = "clusters.openmcp.cloud/request"

// DefaultMaxConcurrentReconciles is the number of ClusterRequests worked on in parallel unless
// Reconciler.MaxConcurrentReconciles says otherwise. Decisions are taken one at a time (see
// book), in memory; the writes (the request's finalizer, the Cluster's, the status) of several
// requests run in parallel, as many as the API server takes (docs/benchmarks.md).
const DefaultMaxConcurrentReconciles = 8

// RBAC markers are package markers: they must not be part of a declaration's doc comment.
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusterrequests,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusterrequests/status,verbs=patch
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusters,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconciler is the ClusterRequest scheduler: it answers each ClusterRequest with a Cluster, chosen
// among the existing ones or created, and releases it when the request goes. Set it up with
// SetupWithManager.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server. Default:
	// mgr.GetClient().
	Client client.Client

	// Recorder emits the Events. Default: mgr.GetEventRecorder(ControllerName).
	Recorder events.EventRecorder

	// Config is the scheduler: section, defaulted and validated. It is read once: a change needs
	// a restart.
	Config *Config

	// MaxConcurrentReconciles is the number of workers. Default: DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int

	// Intn draws the Random strategy's choice. Default: math/rand/v2.IntN.
	Intn func(int) int

	requests labels.Selector
	// mu serializes decisions and guards the book; creations and releases write under it, claims
	// of existing Clusters outside it, ordered per Cluster by stripes.
	mu      sync.Mutex
	book    *book
	stripes keymutex.KeyMutex
}

// Reconcile answers one ClusterRequest: fetch → not ours? done → operation annotation → deleting?
// release its Cluster → finalizer → keep or choose or create its Cluster → status. A request that
// waits for something returns without error: a Cluster watch brings it back.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cr := &clustersv1alpha1.ClusterRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.wants(cr) {
		return ctrl.Result{}, nil
	}
	if stop, err := kit.HandleOperation(ctx, r.Client, cr); stop || err != nil {
		return ctrl.Result{}, err
	}
	if !cr.DeletionTimestamp.IsZero() {
		return kit.QuietConflict(ctrl.Result{}, r.reconcileDelete(ctx, cr))
	}
	return kit.QuietConflict(ctrl.Result{}, r.reconcileNormal(ctx, cr))
}

// wants reports whether ClusterRequest o is the scheduler's: it matches selectors.requests and has
// no ignore operation. Only the labels decide, as in openMCP's scheduler: instances with disjoint
// selectors share the finalizer name, so carrying it says nothing about which one answered. (A
// request relabelled out of the selector is left to whoever selects it now.)
func (r *Reconciler) wants(o client.Object) bool {
	return r.requests.Matches(labels.Set(o.GetLabels())) && kit.OperationOf(o) != kit.OperationIgnore
}

// reconcileNormal makes sure cr has its Cluster and reports the outcome in the status. An error
// with a reason (waiting, or something to fix) is reported and not retried; a conflict is retried
// at once without a report; any other error is reported and retried with backoff.
func (r *Reconciler) reconcileNormal(ctx context.Context, cr *clustersv1alpha1.ClusterRequest) error {
	if err := kit.AddFinalizer(ctx, r.Client, cr, Finalizer); err != nil {
		return err
	}
	before := cr.DeepCopy()
	cl, how, err := r.schedule(ctx, cr)
	switch {
	case apierrors.IsConflict(err):
		return err
	case err != nil:
		setNotScheduled(cr, err)
	default:
		setGranted(cr, cl, how)
	}
	if perr := kit.PatchStatusIfChanged(ctx, r.Client, before, cr, statusOf); perr != nil {
		return errors.Join(err, fmt.Errorf("patching the status: %w", perr))
	}
	r.report(ctx, before, cr, cl, err)
	if kit.ReasonOf(err, "") != "" {
		return nil
	}
	return err
}

// report logs, counts and emits an Event when the Scheduled condition took another reason.
func (r *Reconciler) report(ctx context.Context, before, cr *clustersv1alpha1.ClusterRequest, cl *clustersv1alpha1.Cluster, err error) {
	reason := reasonOf(cr)
	if reason == reasonOf(before) {
		return
	}
	metricAnswers.WithLabelValues(cr.Status.Phase, reason).Inc()
	if err == nil {
		log.FromContext(ctx).Info("Granted the ClusterRequest", "cluster", klog.KObj(cl))
		r.Recorder.Eventf(cr, cl, corev1.EventTypeNormal, ReasonGranted, "Schedule", "Granted Cluster %s/%s", cl.Namespace, cl.Name)
		return
	}
	log.FromContext(ctx).Info("The ClusterRequest is not granted", "reason", reason, "message", err.Error())
	r.Recorder.Eventf(cr, nil, corev1.EventTypeWarning, reason, "Schedule", "%s", err.Error())
}

// schedule finds or makes cr's Cluster and says how, in words for the condition's message.
func (r *Reconciler) schedule(ctx context.Context, cr *clustersv1alpha1.ClusterRequest) (*clustersv1alpha1.Cluster, string, error) {
	r.mu.Lock()
	cl, how, err := r.decide(ctx, cr)
	if err != nil || !needsWrite(cl, cr) {
		r.mu.Unlock()
		return cl, how, err
	}
	reused := !carries(cr.UID)(cl)
	r.book.pend(cl, RequestFinalizer(cr.UID))
	r.mu.Unlock()
	cl, err = r.claim(ctx, cl, cr)
	if err == nil && reused {
		metricClusters.WithLabelValues("reused").Inc()
	}
	return cl, how, err
}

// decide finds or makes cr's Cluster (hold r.mu): a Cluster returned without the request's
// finalizer (or, if Exclusive, its propagated metadata) is still to be claimed.
func (r *Reconciler) decide(ctx context.Context, cr *clustersv1alpha1.ClusterRequest) (*clustersv1alpha1.Cluster, string, error) {
	purpose := cr.Spec.Purpose
	pm := r.Config.PurposeMappings[purpose]
	clusters, err := r.book.clusters(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("listing Clusters: %w", err)
	}
	if cr.Status.Cluster != nil {
		return r.keep(ctx, cr, pm, clusters)
	}
	// An earlier pass chose a Cluster but did not get to write the status.
	if i := slices.IndexFunc(clusters, carries(cr.UID)); i >= 0 {
		return clusters[i], describe(clusters[i], pm), nil
	}
	if pm == nil {
		return nil, "", kit.Errorf(ReasonNoPurposeMapping,
			"the scheduler has no purposeMapping for purpose %q (it has %s); add one to scheduler.purposeMappings in the operator's --config and restart the operator, or make a new request with a purpose it has (spec.purpose cannot change)",
			purpose, strings.Join(slices.Sorted(maps.Keys(r.Config.PurposeMappings)), ", "))
	}
	if choice := r.Config.Choose(purpose, pm, cr, clusters, r.Intn); choice.Cluster != nil {
		return choice.Cluster, describe(choice.Cluster, pm), nil
	}
	nc := NewCluster(purpose, pm, cr)
	if nc.Name != "" {
		if i := slices.IndexFunc(clusters, named(client.ObjectKeyFromObject(nc))); i >= 0 {
			return r.existing(ctx, cr, pm, clusters[i])
		}
	}
	cl, err := r.create(ctx, nc)
	if err != nil {
		return nil, "", err
	}
	metricClusters.WithLabelValues("created").Inc()
	r.Recorder.Eventf(cr, cl, corev1.EventTypeNormal, ReasonClusterCreated, "Schedule", "Created Cluster %s/%s of profile %s", cl.Namespace, cl.Name, cl.Spec.Profile)
	return cl, describe(cl, pm), nil
}

// keep looks after the Cluster cr was granted: it puts the request's finalizer and propagated
// metadata back if they are missing, waits while a Cluster that no longer holds the finalizer is
// being deleted, and creates the Cluster anew, under the same name, if it is gone.
func (r *Reconciler) keep(ctx context.Context, cr *clustersv1alpha1.ClusterRequest, pm *PurposeMapping, clusters []*clustersv1alpha1.Cluster) (*clustersv1alpha1.Cluster, string, error) {
	key := cr.Status.Cluster.Key(cr.Namespace)
	i := slices.IndexFunc(clusters, named(key))
	if i < 0 {
		return r.recreate(ctx, cr, pm, key)
	}
	cl := clusters[i]
	if !cl.DeletionTimestamp.IsZero() {
		if !carries(cr.UID)(cl) {
			return nil, "", kit.Errorf(ReasonWaitingForCluster,
				"Cluster %s is being deleted without this request's finalizer %s; it is created anew once it is gone", key, RequestFinalizer(cr.UID))
		}
		return cl, "being deleted: this request's finalizer keeps it until the request is deleted", nil
	}
	return cl, describe(cl, pm), nil
}

// recreate creates the Cluster key of granted request cr anew after someone deleted it.
func (r *Reconciler) recreate(ctx context.Context, cr *clustersv1alpha1.ClusterRequest, pm *PurposeMapping, key types.NamespacedName) (*clustersv1alpha1.Cluster, string, error) {
	if pm == nil {
		return nil, "", kit.Errorf(ReasonNoPurposeMapping,
			"Cluster %s is gone and the scheduler has no purposeMapping for purpose %q to create it anew; add one to scheduler.purposeMappings and restart the operator, or delete this request", key, cr.Spec.Purpose)
	}
	nc := NewCluster(cr.Spec.Purpose, pm, cr)
	nc.Namespace, nc.Name, nc.GenerateName = key.Namespace, key.Name, ""
	cl, err := r.create(ctx, nc)
	if err != nil {
		return nil, "", err
	}
	metricClusters.WithLabelValues("recreated").Inc()
	log.FromContext(ctx).Info("Created the granted Cluster anew: it was gone", "cluster", klog.KObj(cl))
	r.Recorder.Eventf(cr, cl, corev1.EventTypeWarning, ReasonClusterRecreated, "Schedule",
		"Cluster %s was gone; created it anew, empty, under the same name", key)
	return cl, describe(cl, pm), nil
}

// existing decides about cl, the Cluster of the name the request's new Cluster would get: an
// unused one that fits the purpose is taken; one being deleted is waited for; any other is a
// conflict the user must resolve.
func (r *Reconciler) existing(ctx context.Context, cr *clustersv1alpha1.ClusterRequest, pm *PurposeMapping, cl *clustersv1alpha1.Cluster) (*clustersv1alpha1.Cluster, string, error) {
	key := client.ObjectKeyFromObject(cl)
	switch {
	case !cl.DeletionTimestamp.IsZero():
		return nil, "", kit.Errorf(ReasonWaitingForCluster,
			"Cluster %s, the name this request's Cluster gets, is being deleted; it is created anew once the old one is gone", key)
	case !r.Config.Fits(cr.Spec.Purpose, pm, cr, cl):
		return nil, "", kit.Errorf(ReasonClusterConflict,
			"Cluster %s, the name this request's Cluster gets, exists but may not serve purpose %q (spec.purposes %v, labels %v; it must list the purpose and match the selectors): rename or delete that Cluster, or set the label %s: \"true\" on a new request to have a generated name",
			key, cr.Spec.Purpose, cl.Spec.Purposes, cl.Labels, LabelRandomizeClusterName)
	case TenancyCount(cl) > 0:
		return nil, "", kit.Errorf(ReasonClusterConflict,
			"Cluster %s, the name this request's Cluster gets, already serves another request; delete that request, or set the label %s: \"true\" on a new request to have a generated name",
			key, LabelRandomizeClusterName)
	}
	return cl, describe(cl, pm), nil
}

// needsWrite reports whether cl lacks cr's finalizer or, if Exclusive, cr's propagated metadata.
func needsWrite(cl *clustersv1alpha1.Cluster, cr *clustersv1alpha1.ClusterRequest) bool {
	if !carries(cr.UID)(cl) {
		return true
	}
	return cl.Spec.Tenancy == clustersv1alpha1.TenancyExclusive && Propagate(cr, cl.DeepCopy())
}

// claim writes what cr needs on cl, the Cluster decided for it (with the finalizer booked as
// pending): the request's finalizer, every other pending finalizer of that Cluster (one write for
// the decisions taken meanwhile), and, if Exclusive, cr's propagated metadata. Writes to one
// Cluster are taken one at a time (a stripe lock), each optimistically locked on the latest
// version the scheduler knows; writes to different Clusters run in parallel, outside the decision
// lock. On failure only cr's own finalizer is unbooked: the other decisions write their own.
func (r *Reconciler) claim(ctx context.Context, cl *clustersv1alpha1.Cluster, cr *clustersv1alpha1.ClusterRequest) (*clustersv1alpha1.Cluster, error) {
	key, f := client.ObjectKeyFromObject(cl), RequestFinalizer(cr.UID)
	r.stripes.LockKey(key.String())
	defer func() { _ = r.stripes.UnlockKey(key.String()) }() // a hashed KeyMutex's unlock does not fail
	r.mu.Lock()
	base, err := r.book.latest(ctx, key)
	batch := r.book.pendingOf(key)
	r.mu.Unlock()
	var written *clustersv1alpha1.Cluster
	if err == nil {
		written, err = r.writeClaim(ctx, base, cr, f, batch)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.book.unpend(key, f)
		return nil, err
	}
	if written != base {
		r.book.assume(written, false)
	}
	r.book.unpend(key, batch...)
	r.book.unpend(key, f)
	return written, nil
}

// writeClaim patches base with cr's finalizer f, the batch and, if Exclusive, cr's propagated
// metadata, and returns the written Cluster, or base if nothing was missing.
func (r *Reconciler) writeClaim(ctx context.Context, base *clustersv1alpha1.Cluster, cr *clustersv1alpha1.ClusterRequest, f string, batch []string) (*clustersv1alpha1.Cluster, error) {
	next := base.DeepCopy()
	changed := false
	for _, fin := range append(batch, f) {
		changed = controllerutil.AddFinalizer(next, fin) || changed
	}
	if next.Spec.Tenancy == clustersv1alpha1.TenancyExclusive && Propagate(cr, next) {
		changed = true
	}
	if !changed {
		return base, nil
	}
	if err := r.Client.Patch(ctx, next, kit.LockedMergeFrom(base)); err != nil {
		return nil, fmt.Errorf("updating Cluster %s: %w", klog.KObj(base), err)
	}
	return next, nil
}

// stripes is the number of stripe locks (keymutex.NewHashed) that order the writes to one Cluster.
const stripes = 64

// create creates nc and books it. A Cluster that exists meanwhile is a conflict (retried at once,
// on a cache that shows it); a Cluster the API server rejects is for the user to fix.
func (r *Reconciler) create(ctx context.Context, nc *clustersv1alpha1.Cluster) (*clustersv1alpha1.Cluster, error) {
	err := r.Client.Create(ctx, nc)
	switch {
	case err == nil:
		r.book.assume(nc, true)
		return nc, nil
	case apierrors.IsAlreadyExists(err):
		return nil, apierrors.NewConflict(clustersv1alpha1.GroupVersion.WithResource("clusters").GroupResource(), nc.Name, err)
	case apierrors.IsInvalid(err), apierrors.IsNotFound(err), apierrors.IsBadRequest(err):
		return nil, kit.Errorf(ReasonClusterRejected,
			"the API server rejected the new Cluster %s (fix the purpose's template in scheduler.purposeMappings, or create its namespace, and restart the operator): %v",
			types.NamespacedName{Namespace: nc.Namespace, Name: nameOf(nc)}, err)
	default:
		return nil, fmt.Errorf("creating Cluster %s/%s: %w", nc.Namespace, nameOf(nc), err)
	}
}

// nameOf is the name of a Cluster to be created, or its prefix with a star.
func nameOf(nc *clustersv1alpha1.Cluster) string {
	if nc.Name != "" {
		return nc.Name
	}
	return nc.GenerateName + "*"
}

// reconcileDelete releases the Clusters of a deleted request, deletes those left without a
// request that ask for it, waits for that deletion with spec.waitForClusterDeletion, and then
// removes the request's finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, cr *clustersv1alpha1.ClusterRequest) error {
	if !controllerutil.ContainsFinalizer(cr, Finalizer) {
		return nil
	}
	gone, err := r.release(ctx, cr)
	if err != nil {
		return err
	}
	if ptr.Deref(cr.Spec.WaitForClusterDeletion, false) && gone != nil {
		before := cr.DeepCopy()
		setNotScheduled(cr, kit.Errorf(ReasonWaitingForClusterDeletion,
			"the request is deleted once Cluster %s is gone (spec.waitForClusterDeletion)", klog.KObj(gone)))
		if err := kit.PatchStatusIfChanged(ctx, r.Client, before, cr, statusOf); err != nil {
			return fmt.Errorf("patching the status: %w", err)
		}
		return nil
	}
	if err := kit.RemoveFinalizer(ctx, r.Client, cr, Finalizer); err != nil {
		return err
	}
	log.FromContext(ctx).Info("Released the deleted ClusterRequest")
	return nil
}

// release removes cr's finalizer from every Cluster that carries it, then deletes its Cluster
// (status.cluster, and any released one) if it serves no request and carries
// delete-without-requests "true". It returns the request's Cluster if that is being deleted.
func (r *Reconciler) release(ctx context.Context, cr *clustersv1alpha1.ClusterRequest) (*clustersv1alpha1.Cluster, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clusters, err := r.book.clusters(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing Clusters: %w", err)
	}
	var own types.NamespacedName // the Cluster the request was granted, if any
	if cr.Status.Cluster != nil {
		own = cr.Status.Cluster.Key(cr.Namespace)
	}
	var released []*clustersv1alpha1.Cluster
	for _, cl := range clusters {
		key := client.ObjectKeyFromObject(cl)
		if !carries(cr.UID)(cl) {
			if key == own {
				released = append(released, cl) // released by an earlier pass that did not get to delete it
			}
			continue
		}
		// The write's base is the latest version without other requests' pending finalizers:
		// they are written by their own claims.
		base, err := r.book.latest(ctx, key)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading Cluster %s: %w", key, err)
		}
		next := base.DeepCopy()
		controllerutil.RemoveFinalizer(next, RequestFinalizer(cr.UID))
		if err := r.Client.Patch(ctx, next, kit.LockedMergeFrom(base)); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("releasing Cluster %s: %w", key, err)
		}
		r.book.assume(next, false)
		metricClusters.WithLabelValues("released").Inc()
		r.Recorder.Eventf(cr, next, corev1.EventTypeNormal, ReasonClusterReleased, "Release", "Released Cluster %s/%s", next.Namespace, next.Name)
		released = append(released, next)
	}
	var gone *clustersv1alpha1.Cluster
	for _, cl := range released {
		key := client.ObjectKeyFromObject(cl)
		unused := TenancyCount(cl) == 0 && len(r.book.pendingOf(key)) == 0
		switch {
		case cl.DeletionTimestamp.IsZero() && unused && DeleteWithoutRequests(cl):
			err := r.Client.Delete(ctx, cl, client.Preconditions{UID: &cl.UID, ResourceVersion: &cl.ResourceVersion})
			if client.IgnoreNotFound(err) != nil {
				return nil, fmt.Errorf("deleting Cluster %s, which no request uses: %w", key, err)
			}
			r.book.forget(cl)
			metricClusters.WithLabelValues("deleted").Inc()
			r.Recorder.Eventf(cr, cl, corev1.EventTypeNormal, ReasonClusterDeleted, "Release",
				"Deleted Cluster %s/%s: no request uses it and it has %s: \"true\"", cl.Namespace, cl.Name, LabelDeleteWithoutRequests)
			gone = cl
		case !cl.DeletionTimestamp.IsZero() && key == own:
			gone = cl
		}
	}
	return gone, nil
}

// describe says in words how cl serves requests of pm. It does not count the requests, so that
// the condition's message stays the same while others come and go.
func describe(cl *clustersv1alpha1.Cluster, pm *PurposeMapping) string {
	switch {
	case cl.Spec.Tenancy == clustersv1alpha1.TenancyExclusive:
		return "exclusive"
	case pm == nil || pm.TenancyCount == 0:
		return "shared"
	default:
		return fmt.Sprintf("shared by at most %d requests", pm.TenancyCount)
	}
}

// carries returns a test for the Clusters that carry the finalizer of the request with uid.
func carries(uid types.UID) func(*clustersv1alpha1.Cluster) bool {
	f := RequestFinalizer(uid)
	return func(cl *clustersv1alpha1.Cluster) bool { return slices.Contains(cl.Finalizers, f) }
}

// named returns a test for the Cluster with key.
func named(key types.NamespacedName) func(*clustersv1alpha1.Cluster) bool {
	return func(cl *clustersv1alpha1.Cluster) bool { return cl.Namespace == key.Namespace && cl.Name == key.Name }
}
