package hosted

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// host is a cluster that runs control planes: the platform, or a seed.
type host struct {
	name string // "" for the platform, else the seed's Secret
	// client reads and writes directly.
	client client.Client
	// memo is client for the Secrets and ConfigMaps of the Ensure (keys, certificates, record):
	// it answers from memory while the cache shows them unchanged (reads.go).
	memo *memoClient
	// cache holds the backend's workloads, Services, pods and Jobs (label-selected) and tells the
	// backend of every change.
	cache cache.Cache
	// internal: the operator reaches the host's Services.
	internal bool
	cancel   context.CancelFunc
	// owned are the namespaces found to be the backend's own (claimNamespace).
	owned sync.Map
	// priority serializes ensurePriorityClass: one reconcile replaces an old class, the others
	// then find the new one.
	priority sync.Mutex
	// applied is what the applier (apply.go) last applied of each object.
	applied applier
	// apiIPs are the ClusterIPs of Service default/kubernetes (immutable): read once.
	apiMu  sync.Mutex
	apiIPs []string
}

// watched are the kinds whose changes notify the backend.
// Lease: the front doors report their use there (component_frontdoor.go): a connection to a
// hibernated control plane wakes it.
var watched = []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}, &corev1.Service{}, &corev1.Pod{}, &batchv1.Job{}, &coordinationv1.Lease{}}

// newHost makes the clients and watches of a host cluster; they stop with ctx.
func (b *Backend) newHost(ctx context.Context, name string, cfg *rest.Config, internal bool) (*host, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("a client of host cluster %q: %w", name, err)
	}
	selector := labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedBy})
	ca, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultLabelSelector: selector, ByObject: map[client.Object]cache.ByObject{
		// The addresses of the host's own API server, which the API servers must not reach.
		&discoveryv1.EndpointSlice{}: {
			Namespaces: map[string]cache.Config{metav1.NamespaceDefault: {}},
			Label:      labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: hostAPIService}),
		},
	}})
	if err != nil {
		return nil, fmt.Errorf("a cache of host cluster %q: %w", name, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	memo := &memoClient{Client: c, meta: ca, secretRecheck: b.opts.SecretRecheck}
	h := &host{name: name, client: c, memo: memo, cache: ca, internal: internal, cancel: cancel}
	for _, obj := range watched {
		inf, err := ca.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			cancel()
			return nil, err
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc:    b.notify,
			UpdateFunc: func(_, o any) { b.notify(o) },
			DeleteFunc: b.notify,
		}); err != nil {
			cancel()
			return nil, err
		}
	}
	go func() {
		if err := ca.Start(ctx); err != nil {
			b.opts.Logger.Error(err, "The watches of a host cluster stopped", "host", name)
		}
	}()
	if !ca.WaitForCacheSync(ctx) {
		cancel()
		return nil, fmt.Errorf("the watches of host cluster %q did not sync", name)
	}
	return h, nil
}

// notify tells the engine about the Cluster whose object changed.
func (b *Backend) notify(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	o, ok := obj.(client.Object)
	if !ok || b.opts.Notify == nil {
		return
	}
	ref, ok := refOf(o)
	if ok {
		b.opts.Notify(ref)
	}
}

// refOf reads the Cluster an object belongs to from its annotations (pods have them from their
// template).
func refOf(o client.Object) (backend.Ref, bool) {
	if c, ok := o.GetAnnotations()[AnnotationCluster]; ok {
		ns, name, found := strings.Cut(c, "/")
		if found {
			return backend.Ref{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Profile: o.GetAnnotations()[AnnotationProfile]}, true
		}
	}
	return backend.Ref{}, false
}

// hostFor returns the host of a ProviderConfig's seed (the platform without one), connecting to a
// seed the first time; nil while the backend has not started.
func (b *Backend) hostFor(ctx context.Context, seed *providersv1alpha1.SeedRef) (*host, error) {
	b.mu.Lock()
	started := b.ctx
	name := ""
	if seed != nil {
		name = seed.SecretName
	}
	h := b.hosts[name]
	b.mu.Unlock()
	if started == nil {
		return nil, nil
	}
	if h != nil {
		return h, nil
	}
	if b.opts.SeedConfig == nil {
		return nil, fmt.Errorf("spec.hosted.seed names Secret %s, but this operator has no seeds configured", name)
	}
	cfg, err := b.opts.SeedConfig(ctx, *seed)
	if err != nil {
		return nil, err
	}
	h, err = b.newHost(started, name, cfg, false)
	if err != nil {
		return nil, fmt.Errorf("seed %s: %w", name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.hosts[name]; cur != nil { // another reconcile connected first
		h.cancel()
		return cur, nil
	}
	b.hosts[name] = h
	b.opts.Logger.Info("Connected to a seed cluster", "seed", name, "host", cfg.Host)
	return h, nil
}

// apply server-side applies obj (typed, with TypeMeta) as FieldOwner; a namespace only when it
// is new or the backend's own (claimNamespace).
func (h *host) apply(ctx context.Context, obj client.Object) error {
	if ns, ok := obj.(*corev1.Namespace); ok {
		if err := h.claimNamespace(ctx, ns.Name); err != nil {
			return err
		}
	}
	_, err := h.applyResult(ctx, obj)
	return err
}

// claimNamespace returns nil when namespace name does not exist or is the backend's own
// (notOurs).
func (h *host) claimNamespace(ctx context.Context, name string) error {
	if _, ok := h.owned.Load(name); ok {
		return nil
	}
	ns := &corev1.Namespace{}
	err := h.client.Get(ctx, client.ObjectKey{Name: name}, ns)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading namespace %s: %w", name, err)
	}
	if err := notOurs(ns, ""); err != nil {
		return err
	}
	h.owned.Store(name, true)
	return nil
}

// notOurs returns why ns, named as a namespace of the backend, is not one it made (nil when it is):
// the backend labels its own LabelManagedBy=ManagedBy (only the operator may set that label,
// deploy/policy/operator.yaml) and, a control plane's, LabelClusterUID with its Cluster's UID (uid,
// unless empty). One made by someone else is never adopted: whoever made it may have placed a
// RoleBinding or a pod there that would read the keys the backend writes into it.
func notOurs(ns *corev1.Namespace, uid types.UID) error {
	switch {
	case ns.Labels[LabelManagedBy] != ManagedBy:
		return &backend.Error{Reason: backend.ReasonNamespaceTaken, RetryAfter: time.Minute, Err: fmt.Errorf(
			"namespace %s exists and was not made by the provider (it lacks the label %s=%s): it is left alone, nothing is written into it. "+
				"Delete that namespace if nothing in it is needed; the control plane is made once it is gone", ns.Name, LabelManagedBy, ManagedBy)}
	case uid != "" && ns.Labels[LabelClusterUID] != string(uid):
		return &backend.Error{Reason: backend.ReasonNamespaceTaken, RetryAfter: time.Minute, Err: fmt.Errorf(
			"namespace %s is the provider's but holds the control plane of another Cluster (label %s=%q): it is left alone. "+
				"Delete that namespace if it is no one's; the control plane is made once it is gone", ns.Name, LabelClusterUID, ns.Labels[LabelClusterUID])}
	}
	return nil
}

// applyResult server-side applies obj with opts (a dry run, say) and returns what the API server
// answered.
func (h *host) applyResult(ctx context.Context, obj client.Object, opts ...client.ApplyOption) (*unstructured.Unstructured, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(u, "status")
	if md, ok := u["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	res := &unstructured.Unstructured{Object: u}
	opts = append([]client.ApplyOption{client.FieldOwner(FieldOwner), client.ForceOwnership}, opts...)
	if err := h.client.Apply(ctx, client.ApplyConfigurationFromUnstructured(res), opts...); err != nil {
		return nil, fmt.Errorf("applying %s %s/%s: %w", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return res, nil
}

// createIfMissing creates obj unless it exists; its content is then someone else's to keep.
func (h *host) createIfMissing(ctx context.Context, obj client.Object) error {
	if err := h.client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// apiEndpoints are the addresses of the host cluster's own API server: the ClusterIPs of Service
// default/kubernetes (immutable: read once per host) and the addresses of its EndpointSlices
// (those the API servers publish themselves), watched by the host's cache, so a change reaches
// the NetworkPolicy at the control plane's next reconcile.
func (h *host) apiEndpoints(ctx context.Context) ([]string, error) {
	h.apiMu.Lock()
	addrs := slices.Clone(h.apiIPs)
	h.apiMu.Unlock()
	if addrs == nil {
		svc := &corev1.Service{}
		if err := h.client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: hostAPIService}, svc); err != nil {
			return nil, fmt.Errorf("reading Service %s/%s of host cluster %q, whose addresses the control planes must not reach: %w",
				metav1.NamespaceDefault, hostAPIService, h.name, err)
		}
		addrs = slices.Clone(svc.Spec.ClusterIPs)
		if len(addrs) == 0 && svc.Spec.ClusterIP != "" {
			addrs = []string{svc.Spec.ClusterIP}
		}
		h.apiMu.Lock()
		h.apiIPs = slices.Clone(addrs)
		h.apiMu.Unlock()
	}
	eps := &discoveryv1.EndpointSliceList{}
	if err := h.cache.List(ctx, eps, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{discoveryv1.LabelServiceName: hostAPIService}); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of Service %s/%s of host cluster %q, whose addresses the control planes must not reach "+
			"(the operator needs list and watch on endpointslices in namespace %s: deploy/hosted/hosted_role.yaml): %w",
			metav1.NamespaceDefault, hostAPIService, h.name, metav1.NamespaceDefault, err)
	}
	slices.SortFunc(eps.Items, func(a, b discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	for _, sl := range eps.Items {
		for _, ep := range sl.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
	}
	return addrs, nil
}

// operatorPods selects the pods of pod's namespace that carry pod's labels but those that differ
// between the replicas of one Deployment or StatefulSet (a revision's hash, a pod's name or
// index): the operator's replicas, before and after a rollout. A pod without other labels gives
// every pod of its namespace.
func operatorPods(pod *corev1.Pod) Pods {
	var labels map[string]string
	for k, v := range pod.Labels {
		switch k {
		case appsv1.DefaultDeploymentUniqueLabelKey, appsv1.ControllerRevisionHashLabelKey,
			appsv1.StatefulSetPodNameLabel, appsv1.PodIndexLabel:
			continue
		}
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = v
	}
	return Pods{Namespace: pod.Namespace, Labels: labels}
}

// hostAPIService is the Service of a cluster's own API server, in namespace default.
const hostAPIService = "kubernetes"

// ReasonPriorityClassNotOwned: PriorityClassControlPlane exists, is not the backend's, and lets
// its pods preempt: a highly available control plane is not made with it.
const ReasonPriorityClassNotOwned = "PriorityClassNotOwned"

// ensurePriorityClass makes PriorityClass when missing, and replaces the backend's own class when
// it is not current (PriorityClassCurrent: one made by an earlier version, whose pods preempt).
// Value and preemption policy are immutable, so it deletes the class and makes it anew, once: the
// deletion is bound to the class it read (UID and resourceVersion), so a class changed meanwhile
// is left to the next reconcile. Pods that run keep running (the API server set their priority
// when it admitted them); a pod created in the moment between deletion and creation is refused
// and made again by its controller. A class of that name without LabelManagedBy is someone
// else's and never touched: unless it is current already, highly available control planes are
// refused until its owner deletes it.
func (h *host) ensurePriorityClass(ctx context.Context, log logr.Logger) error {
	h.priority.Lock()
	defer h.priority.Unlock()
	want := PriorityClass()
	cur := &schedulingv1.PriorityClass{}
	if h.cache.Get(ctx, client.ObjectKey{Name: want.Name}, cur) == nil && PriorityClassCurrent(cur) {
		return nil // the backend's own (the cache holds no other), current
	}
	err := h.client.Get(ctx, client.ObjectKey{Name: want.Name}, cur)
	switch {
	case apierrors.IsNotFound(err):
		return h.createIfMissing(ctx, want)
	case err != nil:
		return fmt.Errorf("reading PriorityClass %s: %w", want.Name, err)
	case PriorityClassCurrent(cur):
		return nil
	case cur.Labels[LabelManagedBy] != ManagedBy:
		policy := "PreemptLowerPriority"
		if cur.PreemptionPolicy != nil {
			policy = string(*cur.PreemptionPolicy)
		}
		return &backend.Error{Reason: ReasonPriorityClassNotOwned, RetryAfter: time.Minute, Err: fmt.Errorf(
			"PriorityClass %s of host cluster %q is not this operator's (it lacks label %s=%s) and has value %d and preemptionPolicy %s: "+
				"highly available control planes run only with value %d and preemptionPolicy Never, so that they never preempt another tenant's pods; "+
				"the operator does not touch it: delete it (pods that run keep running) and the operator makes its own",
			want.Name, h.name, LabelManagedBy, ManagedBy, cur.Value, policy, want.Value)}
	}
	log.Info("Replacing the PriorityClass of an earlier version: its value and preemption policy are immutable",
		"priorityClass", want.Name, "host", h.name, "value", cur.Value, "preemptionPolicy", cur.PreemptionPolicy)
	if err := h.client.Delete(ctx, cur, client.Preconditions{UID: &cur.UID, ResourceVersion: &cur.ResourceVersion}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting PriorityClass %s to make it anew with preemptionPolicy Never: %w", want.Name, err)
	}
	return h.createIfMissing(ctx, want)
}
