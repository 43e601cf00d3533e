package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusters,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusters/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusterprofiles,verbs=get;list;watch

// retryDelete is how soon a deletion the backend has not finished is looked at again.
const retryDelete = time.Second

// Reconciler reconciles the Clusters of one ClusterProfile: it makes the backend run a cluster
// for each and reports what the backend observes.
type Reconciler struct {
	kit.ProfileScope
}

// want is what cl asks of the backend: its version.
func (r *Reconciler) want(cl *clustersv1alpha1.Cluster) backend.Want {
	return backend.WantOf(r.Offer, cl.Spec.Kubernetes.Version)
}

// Reconcile follows the usual shape: fetch, responsibility check, operation annotation,
// then reconcileDelete or reconcileNormal with one status patch. A lost optimistic-lock race is
// retried quietly.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return kit.QuietConflict(r.reconcile(ctx, req))
}

func (r *Reconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cl := &clustersv1alpha1.Cluster{}
	if err := r.Client.Get(ctx, req.NamespacedName, cl); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	mine, err := r.responsible(ctx, cl)
	if errors.Is(err, errProfileNotCached) {
		// The profile's controllers start as soon as the ClusterProfile is written, which may be
		// before the cache holds it.
		return reconcile.Result{RequeueAfter: retryProfile}, nil
	}
	if err != nil || !mine {
		return reconcile.Result{}, err
	}
	if stop, err := kit.HandleOperation(ctx, r.Client, cl); stop || err != nil {
		return reconcile.Result{}, err
	}
	if !cl.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, cl)
	}
	return r.reconcileNormal(ctx, cl)
}

// errProfileNotCached: the ClusterProfile of the running profile is not in the cache yet.
var errProfileNotCached = errors.New("the ClusterProfile is not in the cache yet")

// retryProfile is how soon a Cluster is looked at again when its ClusterProfile is not cached yet.
const retryProfile = 200 * time.Millisecond

// responsible reports whether cl's profile is the one this instance serves and belongs to this
// provider. A Cluster of another provider's profile is not this reconciler's business: it is
// neither touched nor an error. This instance runs only while the ProviderConfig controller has
// published its ClusterProfile, so a profile missing from the cache is one the cache has not
// seen yet (errProfileNotCached).
func (r *Reconciler) responsible(ctx context.Context, cl *clustersv1alpha1.Cluster) (bool, error) {
	if cl.Spec.Profile != r.Profile {
		return false, nil
	}
	prof := &clustersv1alpha1.ClusterProfile{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: cl.Spec.Profile}, prof); err != nil {
		if apierrors.IsNotFound(err) {
			return false, errProfileNotCached
		}
		return false, fmt.Errorf("reading ClusterProfile %s: %w", cl.Spec.Profile, err)
	}
	return prof.Spec.ProviderRef.Name == r.ProviderName, nil
}

// reconcileNormal makes the backend run cl's cluster and records what it observes. It never waits
// for the cluster: the backend notifies the engine when the cluster's state changes, and a
// not-Ready cluster is looked at again after the backend's RetryAfter as a safety net.
func (r *Reconciler) reconcileNormal(ctx context.Context, cl *clustersv1alpha1.Cluster) (reconcile.Result, error) {
	if err := kit.AddFinalizer(ctx, r.Client, cl, kit.Finalizer(r.ProviderName)); err != nil {
		return reconcile.Result{}, err
	}
	if r.Backend == nil {
		return r.writeStatus(ctx, cl, cl.DeepCopy(), func() {
			setNotProvisioned(cl, ReasonBackendUnavailable, fmt.Sprintf(
				"The ProviderConfig of profile %s asks for backend %q, which does not run in this operator; nothing is provisioned.", r.Profile, r.BackendName))
		})
	}
	want, held, err := r.beforeUpgrade(ctx, cl)
	if err != nil {
		return reconcile.Result{}, err
	}
	state, err := r.Backend.Ensure(ctx, cl, want)
	if err != nil {
		reason := kit.ReasonOf(err, ReasonProvisioningFailed)
		_, serr := r.writeStatus(ctx, cl, cl.DeepCopy(), func() { setNotProvisioned(cl, reason, err.Error()) })
		if reason != ReasonProvisioningFailed {
			// The user must act: a change of theirs triggers a reconcile, or, for a fix outside
			// the API (a restored file, freed space), the backend's RetryAfter does.
			return reconcile.Result{RequeueAfter: backend.RetryAfter(err)}, serr
		}
		return reconcile.Result{}, errors.Join(fmt.Errorf("provisioning: %w", err), serr)
	}
	for _, w := range state.Warnings {
		r.Event(cl, "Warning", w.Reason, "Provision", "%s", w.Message)
	}
	for _, n := range state.Notices {
		r.Event(cl, "Normal", n.Reason, "Hibernate", "%s", n.Message)
	}
	bks, err := r.backups(ctx, cl, &state, want)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.patchMetadata(ctx, cl, state); err != nil {
		return reconcile.Result{}, err
	}
	var setErr error
	_, err = r.writeStatus(ctx, cl, cl.DeepCopy(), func() {
		setErr = setState(cl, r.BackendName, state, bks.snapshots)
		bks.apply(cl, state, r.Profile)
		held.apply(cl)
	})
	requeue := state.RetryAfter
	if held != nil && (requeue == 0 || held.requeue < requeue) {
		requeue = held.requeue
	}
	if bks.requeue > 0 && (requeue == 0 || bks.requeue < requeue) {
		requeue = bks.requeue
	}
	return reconcile.Result{RequeueAfter: requeue}, errors.Join(setErr, err)
}

// backups carries out what cl asks of its snapshots (a restore, a snapshot now) and takes the
// snapshots its schedule calls for, where the backend takes any. A restore started changes the
// state: *state is observed again.
func (r *Reconciler) backups(ctx context.Context, cl *clustersv1alpha1.Cluster, state *backend.State, want backend.Want) (backups, error) {
	bk, ok := r.Backend.(backend.Backups)
	if !ok {
		out := backups{}
		if asked := cl.Annotations[backend.AnnotationSnapshot] + cl.Annotations[backend.AnnotationRestore]; asked != "" {
			out.unsupported = fmt.Sprintf("The %s backend takes no snapshots: annotations %s and %s do nothing here.",
				r.BackendName, backend.AnnotationSnapshot, backend.AnnotationRestore)
		}
		return out, nil
	}
	refused, started, err := r.restore(ctx, cl, bk)
	if err != nil {
		return backups{}, err
	}
	if started {
		if *state, err = r.Backend.Ensure(ctx, cl, want); err != nil {
			return backups{}, fmt.Errorf("observing the cluster after starting the restore: %w", err)
		}
	}
	// A cluster being restored is not Ready: no snapshot is taken of it; its list stays shown.
	out, err := r.snapshot(ctx, cl, bk, *state)
	out.refused = refused
	return out, err
}

// writeStatus applies set to cl, emits the Events its condition changes call for and writes the
// status with one locked patch against base.
func (r *Reconciler) writeStatus(ctx context.Context, cl, base *clustersv1alpha1.Cluster, set func()) (reconcile.Result, error) {
	set()
	finish(cl)
	recordReady(cl)
	r.events(cl, base.Status.Conditions, base.Status.Phase)
	if err := kit.PatchStatusIfChanged(ctx, r.Client, base, cl, statusOf); err != nil {
		return reconcile.Result{}, fmt.Errorf("writing the status: %w", err)
	}
	return reconcile.Result{}, nil
}

// events emits an Event for every condition change worth one.
func (r *Reconciler) events(cl *clustersv1alpha1.Cluster, before []metav1.Condition, wasPhase string) {
	if changed, c := transition(before, cl.Status.Conditions, ConditionProvisioned); changed {
		switch {
		case c.Reason == ReasonDataLost:
			r.Event(cl, "Warning", ReasonDataLost, "Provision", "%s", c.Message)
		case c.Status == metav1.ConditionTrue:
			r.Event(cl, "Normal", ReasonProvisioned, "Provision", "%s", c.Message)
		case c.Reason != backend.ReasonBackendStarting:
			r.Event(cl, "Warning", c.Reason, "Provision", "%s", c.Message)
		}
	}
	if changed, c := transition(before, cl.Status.Conditions, ConditionVersionUpToDate); changed {
		switch c.Reason {
		case backend.ReasonVersionChangeRefused, ReasonSnapshotBeforeUpgradeFailed:
			r.Event(cl, "Warning", c.Reason, "Upgrade", "%s", c.Message)
		case backend.ReasonUpgrading:
			r.Event(cl, "Normal", c.Reason, "Upgrade", "%s", c.Message)
		case ReasonVersionCurrent:
			if b := meta.FindStatusCondition(before, ConditionVersionUpToDate); b != nil && b.Reason == backend.ReasonUpgrading {
				r.Event(cl, "Normal", ReasonUpgraded, "Upgrade", "%s", c.Message)
			}
		}
	}
	if changed, c := transition(before, cl.Status.Conditions, ConditionEtcdHealthy); changed {
		if c.Status != metav1.ConditionTrue {
			r.Event(cl, "Warning", c.Reason, "Etcd", "%s", c.Message)
		} else if b := meta.FindStatusCondition(before, ConditionEtcdHealthy); b != nil {
			r.Event(cl, "Normal", ReasonEtcdHealthy, "Etcd", "%s", "etcd takes writes again.")
		}
	}
	if changed, c := transition(before, cl.Status.Conditions, ConditionEndpointResilient); changed && c.Status != metav1.ConditionTrue {
		r.Event(cl, "Warning", c.Reason, "Expose", "%s", c.Message)
	}
	if changed, c := transition(before, cl.Status.Conditions, ConditionRestored); changed {
		switch c.Reason {
		case ReasonRestoreDone:
			r.Event(cl, "Normal", ReasonRestoreDone, "Restore", "%s", c.Message)
		case backend.ReasonRestoring:
			r.Event(cl, "Normal", c.Reason, "Restore", "%s", c.Message)
		default:
			r.Event(cl, "Warning", c.Reason, "Restore", "%s", c.Message)
		}
	}
	for _, condType := range []string{ConditionAPIServerReady, ConditionControllerManagerReady} {
		if changed, c := transition(before, cl.Status.Conditions, condType); changed && c.Reason == backend.ReasonRestarting {
			r.Event(cl, "Warning", ReasonProcessRestarted, "Restart", "%s", c.Message)
		}
	}
	if cl.Status.Phase == common.PhaseReady && wasPhase != common.PhaseReady {
		r.Event(cl, "Normal", ReasonReady, "Ready", "%s", readyMessage(cl))
	}
}

// patchMetadata sets the provider and k8sversion labels and the providerinfo annotation.
func (r *Reconciler) patchMetadata(ctx context.Context, cl *clustersv1alpha1.Cluster, s backend.State) error {
	want := map[string]string{clustersv1alpha1.ProviderLabel: r.ProviderName}
	if s.Version != "" {
		want[clustersv1alpha1.K8sVersionLabel] = s.Version
	}
	labels, annotations := cl.GetLabels(), cl.GetAnnotations()
	same := labels[clustersv1alpha1.ProviderLabel] == want[clustersv1alpha1.ProviderLabel] &&
		(s.Version == "" || labels[clustersv1alpha1.K8sVersionLabel] == s.Version) &&
		(s.Info == "" || annotations[clustersv1alpha1.ProviderInfoAnnotation] == s.Info)
	if same {
		return nil
	}
	base := cl.DeepCopy()
	if cl.Labels == nil {
		cl.Labels = map[string]string{}
	}
	for k, v := range want {
		cl.Labels[k] = v
	}
	if s.Info != "" {
		if cl.Annotations == nil {
			cl.Annotations = map[string]string{}
		}
		cl.Annotations[clustersv1alpha1.ProviderInfoAnnotation] = s.Info
	}
	if err := r.Client.Patch(ctx, cl, kit.LockedMergeFrom(base)); err != nil {
		return fmt.Errorf("labelling the Cluster: %w", err)
	}
	return nil
}

// reconcileDelete waits for the finalizers of other controllers, then has the backend delete the
// cluster, and removes this provider's finalizer once nothing of the cluster is left.
func (r *Reconciler) reconcileDelete(ctx context.Context, cl *clustersv1alpha1.Cluster) (reconcile.Result, error) {
	finalizer := kit.Finalizer(r.ProviderName)
	if !controllerutil.ContainsFinalizer(cl, finalizer) {
		return reconcile.Result{}, nil
	}
	if foreign := slices.DeleteFunc(slices.Clone(cl.Finalizers), func(f string) bool { return f == finalizer }); len(foreign) > 0 {
		// The Cluster's update that removes one of them triggers the next reconcile.
		return r.writeStatus(ctx, cl, cl.DeepCopy(), func() {
			before := cl.Status.DeepCopy()
			setWaitingForFinalizers(cl, foreign)
			if changed, _ := transition(before.Conditions, cl.Status.Conditions, ConditionDeleted); changed {
				r.Event(cl, "Normal", ReasonWaitingForFinalizers, "Delete", "Waiting for finalizers %v before deleting the cluster", foreign)
			}
		})
	}
	if r.Backend != nil {
		if res, wait, err := r.beforeDelete(ctx, cl); wait || err != nil {
			return res, err
		}
		gone, err := r.Backend.Delete(ctx, cl)
		if err != nil || !gone {
			_, serr := r.writeStatus(ctx, cl, cl.DeepCopy(), func() { setDeleting(cl, r.BackendName) })
			if err != nil {
				return reconcile.Result{}, errors.Join(fmt.Errorf("deleting the cluster: %w", err), serr)
			}
			return reconcile.Result{RequeueAfter: retryDelete}, serr
		}
	}
	if err := kit.RemoveFinalizer(ctx, r.Client, cl, finalizer); err != nil {
		return reconcile.Result{}, err
	}
	forgetBackups(cl)
	forgetReady(cl)
	log.FromContext(ctx).Info("Deleted the cluster", "backend", r.BackendName)
	r.Event(cl, "Normal", ReasonDeleted, "Delete", "The %s cluster is deleted", r.BackendName)
	return reconcile.Result{}, nil
}

func statusOf(cl *clustersv1alpha1.Cluster) any { return cl.Status }
