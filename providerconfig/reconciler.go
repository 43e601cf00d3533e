package providerconfig

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/manager"
)

// +kubebuilder:rbac:groups=providers.clusters.openmcp.cloud,resources=providerconfigs,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=providers.clusters.openmcp.cloud,resources=providerconfigs/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusterprofiles,verbs=get;list;watch;create;patch;update;delete
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=clusters,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Engine runs profiles; *manager.Engine is one.
type Engine interface {
	StartProfile(ctx context.Context, p manager.Profile) error
	StopProfile(name string)
	Running(name string) (hash string, ok bool)
}

// Builder builds the profile of a ProviderConfig; *profile.Builder is one.
type Builder interface {
	Build(name string, pc *providersv1alpha1.ProviderConfig) manager.Profile
}

// Reconciler reconciles ProviderConfigs.
type Reconciler struct {
	// Client reads from the shared cache and writes to the API server.
	Client client.Client
	// Recorder emits Events on ProviderConfigs.
	Recorder events.EventRecorder
	// Engine runs the profiles.
	Engine Engine
	// Builder builds a profile's reconcilers.
	Builder Builder
	// Backends run the clusters, by spec.backend; they decide which versions the profile offers.
	Backends backend.Registry
	// ProviderName is this operator's --provider-name.
	ProviderName string
	// Environment is this operator's --environment; it prefixes profile names.
	Environment string
}

// SetupWithManager registers the controller: ProviderConfigs with the standard event filter,
// plus the Clusters and ClusterProfiles of this provider's profiles, mapped to their
// ProviderConfig by the profile name.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	toConfig := func(profileName string) []reconcile.Request {
		if name, ok := profile.ConfigName(r.Environment, r.ProviderName, profileName); ok {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: name}}}
		}
		return nil
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("providerconfig").
		For(&providersv1alpha1.ProviderConfig{}, builder.WithPredicates(kit.StandardFilter())).
		Watches(&clustersv1alpha1.Cluster{},
			handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				return toConfig(profile.ClusterKey(o))
			}),
			// Only a Cluster's appearance and disappearance matter here (the deletion count).
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool { return false }})).
		Watches(&clustersv1alpha1.ClusterProfile{},
			handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				return toConfig(o.GetName())
			})).
		Complete(r)
}

// Reconcile follows the usual shape: fetch, operation annotation, then reconcileDelete or
// reconcileNormal; the status is written once at the end. A lost optimistic-lock race (another
// writer changed the ProviderConfig) is retried quietly.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return kit.QuietConflict(r.reconcile(ctx, req))
}

func (r *Reconciler) reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, retErr error) {
	name := profile.Name(r.Environment, r.ProviderName, req.Name)
	pc := &providersv1alpha1.ProviderConfig{}
	if err := r.Client.Get(ctx, req.NamespacedName, pc); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone without our finalizer (removed by hand): nothing may keep running for it.
			r.Engine.StopProfile(name)
			r.dropPools(name)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if stop, err := kit.HandleOperation(ctx, r.Client, pc); stop || err != nil {
		return reconcile.Result{}, err
	}

	if !pc.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, pc, name)
	}
	if err := kit.AddFinalizer(ctx, r.Client, pc, kit.Finalizer(r.ProviderName)); err != nil {
		return reconcile.Result{}, err
	}
	// The snapshot is taken after the finalizer patch: the status patch is locked on its
	// resourceVersion.
	base := pc.DeepCopy()
	defer func() {
		finish(pc)
		if err := kit.PatchStatusIfChanged(ctx, r.Client, base, pc, statusOf); err != nil {
			retErr = errors.Join(retErr, fmt.Errorf("writing the status: %w", err))
		}
	}()
	return r.reconcileNormal(ctx, pc, name)
}

func (r *Reconciler) reconcileNormal(ctx context.Context, pc *providersv1alpha1.ProviderConfig, name string) (reconcile.Result, error) {
	pc.Status.Profile = name
	if err := validate(pc, name); err != nil {
		r.event(pc, "Warning", ReasonInvalidSpec, "Validate", "The spec is invalid; nothing changes until it is fixed: %v", err)
		setInvalid(pc, err)
		return reconcile.Result{}, nil
	}
	setCondition(pc, ConditionSpecValid, true, ReasonValid, "The spec is valid.")
	be := profile.Bind(r.Backends.Get(string(pc.Spec.Backend)), pc)
	offer := r.offer(pc, be)

	if err := r.publish(ctx, pc, name, offer.Versions); err != nil {
		reason := kit.ReasonOf(err, ReasonPublishFailed)
		setCondition(pc, ConditionProfilePublished, false, reason, err.Error())
		if reason == ReasonProfileNameTaken {
			r.event(pc, "Warning", reason, "Publish", "%v", err)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	setCondition(pc, ConditionProfilePublished, true, ReasonPublished, fmt.Sprintf("ClusterProfile %s is published.", name))
	if err := r.run(ctx, pc, name); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: r.pool(pc, name, offer, be)}, nil
}

// poolRecheck is how often the state of a pool that is not full is looked at again.
const poolRecheck = 5 * time.Second

// pool keeps the spare clusters pc's spec.pool asks for with be (bound to pc; a backend.Pooler
// keeps spares), records their state in the status, and returns when to look again (0: the pool is
// full, or there is none).
func (r *Reconciler) pool(pc *providersv1alpha1.ProviderConfig, name string, offer backend.Offer, be backend.Backend) time.Duration {
	size := pc.Spec.Pool.SizeOf()
	pooler, ok := be.(backend.Pooler)
	if !ok {
		pc.Status.Pool = nil
		if size == 0 {
			meta.RemoveStatusCondition(&pc.Status.Conditions, ConditionPoolReady)
		} else {
			setCondition(pc, ConditionPoolReady, false, ReasonPoolUnavailable, fmt.Sprintf(
				"Backend %q keeps no spare clusters in this operator; remove spec.pool.", pc.Spec.Backend))
		}
		return 0
	}
	version, err := offer.Choose("")
	if size > 0 && err != nil {
		pooler.SetPool(name, backend.Pool{})
		pc.Status.Pool = nil
		setCondition(pc, ConditionPoolReady, false, ReasonPoolUnavailable, fmt.Sprintf(
			"No spare cluster is made: the profile offers no default version (%v); set spec.defaultVersion.", err))
		return 0
	}
	st := pooler.SetPool(name, backend.Pool{Size: size, Version: version, Hibernated: pc.Spec.Pool != nil && pc.Spec.Pool.Hibernated})
	if size == 0 {
		pc.Status.Pool = nil
		meta.RemoveStatusCondition(&pc.Status.Conditions, ConditionPoolReady)
		return 0
	}
	pc.Status.Pool = &providersv1alpha1.PoolStatus{Version: version, Ready: int32(st.Ready), Starting: int32(st.Starting)}
	if st.Ready >= size {
		setCondition(pc, ConditionPoolReady, true, ReasonPoolFull, fmt.Sprintf(
			"%d spare cluster(s) of Kubernetes %s are ready; a new Cluster of that version claims one.", st.Ready, version))
		return 0
	}
	setCondition(pc, ConditionPoolReady, false, ReasonPoolFilling, fmt.Sprintf(
		"%d of %d spare cluster(s) of Kubernetes %s are ready, %d starting. Spares are made while the operator has free places for clusters and no Cluster waits for one.",
		st.Ready, size, version, st.Starting))
	return poolRecheck
}

// dropPools removes the spares every backend keeps for the profile name.
func (r *Reconciler) dropPools(name string) {
	for _, be := range r.Backends {
		if p, ok := be.(backend.Pooler); ok {
			p.SetPool(name, backend.Pool{})
		}
	}
}

// offer computes the versions the profile offers and records in a condition which wanted versions
// the backend be (bound to pc, as the profile's; nil if it does not run here) does not serve.
func (r *Reconciler) offer(pc *providersv1alpha1.ProviderConfig, be backend.Backend) backend.Offer {
	offer := profile.OfferOf(pc, be)
	switch {
	case be == nil:
		setCondition(pc, ConditionVersionsServed, false, ReasonBackendUnavailable, fmt.Sprintf(
			"Backend %q does not run in this operator, so the ClusterProfile offers no version and no Cluster of it is provisioned.", pc.Spec.Backend))
	case len(offer.Missing) > 0:
		setCondition(pc, ConditionVersionsServed, false, ReasonVersionsNotServed, backend.MissingMessage(be.Name(), offer.Missing, be.Versions()))
	default:
		setCondition(pc, ConditionVersionsServed, true, ReasonVersionsServed, fmt.Sprintf(
			"The %s backend serves every offered version: %s.", be.Name(), versionList(offer.Versions)))
	}
	return offer
}

func versionList(vs []clustersv1alpha1.SupportedK8sVersion) string {
	names := make([]string, len(vs))
	for i, v := range vs {
		names[i] = v.Version
	}
	return strings.Join(names, ", ")
}

// publish creates or updates the ClusterProfile, offering versions, unless a profile of that name
// belongs to another provider or ProviderConfig.
func (r *Reconciler) publish(ctx context.Context, pc *providersv1alpha1.ProviderConfig, name string, versions []clustersv1alpha1.SupportedK8sVersion) error {
	cp := &clustersv1alpha1.ClusterProfile{}
	cp.Name = name
	op, err := controllerutil.CreateOrPatch(ctx, r.Client, cp, func() error {
		if cp.ResourceVersion != "" && !r.owns(cp, pc.Name) {
			return kit.Errorf(ReasonProfileNameTaken,
				"ClusterProfile %s already exists and belongs to provider %q, ProviderConfig %q; it is left alone. Rename this ProviderConfig or remove that profile",
				name, cp.Spec.ProviderRef.Name, cp.Spec.ProviderConfigRef.Name)
		}
		cp.Spec = clustersv1alpha1.ClusterProfileSpec{
			ProviderRef:       common.LocalObjectReference{Name: r.ProviderName},
			ProviderConfigRef: common.LocalObjectReference{Name: pc.Name},
			SupportedVersions: versions,
		}
		return nil
	})
	if err != nil {
		if kit.ReasonOf(err, "") != "" {
			return err
		}
		return fmt.Errorf("publishing ClusterProfile %s: %w", name, err)
	}
	if op != controllerutil.OperationResultNone {
		r.event(pc, "Normal", ReasonPublished, "Publish", "ClusterProfile %s %s", name, op)
	}
	return nil
}

func (r *Reconciler) owns(cp *clustersv1alpha1.ClusterProfile, configName string) bool {
	return cp.Spec.ProviderRef.Name == r.ProviderName && cp.Spec.ProviderConfigRef.Name == configName
}

// run starts the profile's reconcilers, or restarts them if the spec changed.
func (r *Reconciler) run(ctx context.Context, pc *providersv1alpha1.ProviderConfig, name string) error {
	p := r.Builder.Build(name, pc)
	oldHash, wasRunning := r.Engine.Running(name)
	if err := r.Engine.StartProfile(ctx, p); err != nil {
		setCondition(pc, ConditionControllersRunning, false, ReasonStartFailed, fmt.Sprintf("Starting the controllers of %s failed: %v", name, err))
		return err
	}
	setCondition(pc, ConditionControllersRunning, true, ReasonRunning, fmt.Sprintf("The Cluster and AccessRequest controllers of %s run.", name))
	switch {
	case !wasRunning:
		r.event(pc, "Normal", ReasonStarted, "Start", "Started the controllers of ClusterProfile %s", name)
	case oldHash != p.Hash:
		r.event(pc, "Normal", ReasonRestarted, "Restart", "Restarted the controllers of ClusterProfile %s: the spec changed", name)
	}
	return nil
}

// reconcileDelete keeps the profile running while Clusters use it; when none is left it stops
// the controllers, deletes the ClusterProfile and removes the finalizer.
func (r *Reconciler) reconcileDelete(ctx context.Context, pc *providersv1alpha1.ProviderConfig, name string) (res reconcile.Result, retErr error) {
	if !controllerutil.ContainsFinalizer(pc, kit.Finalizer(r.ProviderName)) {
		return reconcile.Result{}, nil
	}
	clusters := &clustersv1alpha1.ClusterList{}
	if err := r.Client.List(ctx, clusters, manager.MatchingKey(profile.KindCluster, name)); err != nil {
		return reconcile.Result{}, fmt.Errorf("counting the Clusters of %s: %w", name, err)
	}
	if n := len(clusters.Items); n > 0 {
		base := pc.DeepCopy()
		defer func() {
			finish(pc)
			if err := kit.PatchStatusIfChanged(ctx, r.Client, base, pc, statusOf); err != nil {
				retErr = errors.Join(retErr, fmt.Errorf("writing the status: %w", err))
			}
		}()
		before := slices.Clone(pc.Status.Conditions)
		setClustersRemaining(pc, name, n, client.ObjectKeyFromObject(&clusters.Items[0]).String())
		if !conditionMessageEqual(before, pc.Status.Conditions, ConditionClustersDeleted) {
			r.event(pc, "Normal", ReasonClustersRemaining, "Delete", "Waiting for %d Cluster(s) of ClusterProfile %s to be deleted", n, name)
		}
		// The profile's controllers delete the Clusters; after an operator restart they must run
		// again for that.
		return reconcile.Result{}, r.Engine.StartProfile(ctx, r.Builder.Build(name, pc))
	}

	r.Engine.StopProfile(name)
	r.dropPools(name)
	cp := &clustersv1alpha1.ClusterProfile{}
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, cp)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return reconcile.Result{}, err
	case r.owns(cp, pc.Name):
		if err := r.Client.Delete(ctx, cp, client.Preconditions{UID: &cp.UID}); client.IgnoreNotFound(err) != nil {
			r.event(pc, "Warning", ReasonProfileDeleteError, "Delete", "Deleting ClusterProfile %s failed: %v", name, err)
			return reconcile.Result{}, fmt.Errorf("deleting ClusterProfile %s: %w", name, err)
		}
	}
	if err := kit.RemoveFinalizer(ctx, r.Client, pc, kit.Finalizer(r.ProviderName)); err != nil {
		return reconcile.Result{}, err
	}
	r.event(pc, "Normal", ReasonDeleted, "Delete", "Stopped the controllers and deleted ClusterProfile %s", name)
	return reconcile.Result{}, nil
}

func (r *Reconciler) event(pc *providersv1alpha1.ProviderConfig, eventType, reason, action, note string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(pc, nil, eventType, reason, action, note, args...)
	}
}

func statusOf(pc *providersv1alpha1.ProviderConfig) any { return pc.Status }

// conditionMessageEqual reports whether the condition of type t has the same message in a and b.
func conditionMessageEqual(a, b []metav1.Condition, t string) bool {
	ca, cb := meta.FindStatusCondition(a, t), meta.FindStatusCondition(b, t)
	return ca != nil && cb != nil && ca.Message == cb.Message
}
