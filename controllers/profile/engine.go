package profile

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
	"github.com/openmcp-local/cluster-provider/manager"
)

// CacheOptions restricts the shared cache to what the operator needs of kinds that may be
// numerous: of Secrets, only the kubeconfig Secrets this operator writes, and only when
// watchSecrets (the operator may list and watch Secrets in every namespace).
func CacheOptions(watchSecrets bool) cache.Options {
	if !watchSecrets {
		return cache.Options{}
	}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Secret{}: {Label: labels.SelectorFromSet(labels.Set{accessrequest.LabelManagedBy: accessrequest.ManagedByValue})},
	}}
}

// ClientOptions are the manager client's: without watchSecrets, Secrets are read from the API
// server, never through an informer (which would need list and watch).
func ClientOptions(watchSecrets bool) client.Options {
	if watchSecrets {
		return client.Options{}
	}
	return client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
}

// NewEngine returns the controller engine of a provider over c: the kinds it routes (Kinds) and
// the secondary watches of its AccessRequest reconcilers: a Cluster that becomes Ready, goes
// away, starts deleting or had its grants swept after a restore (accessrequest.Sweeper, which
// sets accessrequest.AnnotationGrantsSwept: the requests that exist are granted again at once)
// reaches the requests for it; with watchSecrets, a kubeconfig Secret
// that is edited or deleted reaches the request that owns it (without, the request's next grant
// check finds it).
func NewEngine(ctx context.Context, c cache.Cache, scheme *runtime.Scheme, providerName string, workers Workers, watchSecrets bool, log logr.Logger) (*manager.Engine, error) {
	if err := c.IndexField(ctx, &clustersv1alpha1.AccessRequest{}, accessrequest.IndexClusterRef, func(o client.Object) []string {
		ar := o.(*clustersv1alpha1.AccessRequest)
		if accessrequest.ProfileOf(ar, providerName) == "" || ar.Spec.ClusterRef == nil {
			return nil
		}
		return []string{accessrequest.ClusterKeyOf(ar).String()}
	}); err != nil {
		return nil, fmt.Errorf("adding the AccessRequest index %s: %w", accessrequest.IndexClusterRef, err)
	}
	return manager.New(ctx, c, manager.Options{
		Scheme:  scheme,
		Kinds:   Kinds(providerName, workers),
		Watches: Watches(c, providerName, watchSecrets),
		Logger:  log,
	})
}

// Watches are the engine's secondary watches for a provider; r reads the shared cache. Without
// watchSecrets, the Secret watch is left out.
func Watches(r client.Reader, providerName string, watchSecrets bool) []manager.Watch {
	watches := []manager.Watch{
		{
			Name:       "cluster-to-accessrequest",
			Object:     &clustersv1alpha1.Cluster{},
			Kind:       KindAccessRequest,
			Predicates: []predicate.Predicate{predicate.Or(clusterAvailabilityChanged(), kit.AnnotationsChanged(accessrequest.AnnotationGrantsSwept))},
			Map: func(ctx context.Context, o client.Object) []manager.Target {
				list := &clustersv1alpha1.AccessRequestList{}
				if err := r.List(ctx, list, client.MatchingFields{accessrequest.IndexClusterRef: client.ObjectKeyFromObject(o).String()}); err != nil {
					return nil
				}
				targets := make([]manager.Target, 0, len(list.Items))
				for i := range list.Items {
					ar := &list.Items[i]
					targets = append(targets, manager.Target{Profile: accessrequest.ProfileOf(ar, providerName),
						Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ar)}})
				}
				return targets
			},
		},
		{
			Name:   "secret-to-accessrequest",
			Object: &corev1.Secret{},
			Kind:   KindAccessRequest,
			Map: func(ctx context.Context, o client.Object) []manager.Target {
				owner := ownerRequest(o)
				if owner == "" {
					return nil
				}
				ar := &clustersv1alpha1.AccessRequest{}
				if err := r.Get(ctx, client.ObjectKey{Namespace: o.GetNamespace(), Name: owner}, ar); err != nil {
					return nil
				}
				p := accessrequest.ProfileOf(ar, providerName)
				if p == "" {
					return nil
				}
				return []manager.Target{{Profile: p, Request: reconcile.Request{NamespacedName: client.ObjectKeyFromObject(ar)}}}
			},
		},
	}
	if !watchSecrets {
		watches = watches[:1]
	}
	return watches
}

// ownerRequest is the name of the AccessRequest that controls o, or "".
func ownerRequest(o client.Object) string {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != "AccessRequest" || ref.APIVersion != clustersv1alpha1.GroupVersion.String() {
		return ""
	}
	return ref.Name
}

// clusterAvailabilityChanged passes the Cluster events that can change an AccessRequest's answer:
// creation, deletion, the phase (Ready or not) and the start of the deletion.
func clusterAvailabilityChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*clustersv1alpha1.Cluster)
			n, ok2 := e.ObjectNew.(*clustersv1alpha1.Cluster)
			return ok1 && ok2 && (o.Status.Phase != n.Status.Phase || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero())
		},
	}
}
