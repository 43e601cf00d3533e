package hosted

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// retryQuota is the safety net of a Cluster refused for its namespace's quota: a freed place
// notifies it at once (freed), but a notification can be lost (the operator restarting, its
// profile rebuilt at that moment), and a lost one must not strand it.
const retryQuota = 30 * time.Second

// shownAhead is how many of the Clusters ahead of a refused one its message names.
const shownAhead = 5

// admit decides whether cl, which has no control plane yet, may have one made under the
// ProviderConfig pcName's spec.hosted.maxClusters: the places of cl's namespace and profile go to
// the Clusters that have a control plane (whatever their age: one is never stopped) and then to
// the oldest of the others, by creationTimestamp then name. So the answer does not depend on the
// order of the reconciles, and what it reads (the Clusters, the control planes' namespaces) is on
// the API server, the same after a restart of the operator.
//
// Admitted, the caller holds the place's lock of cl's namespace and profile until it has made the
// control plane's namespace (which then counts for the others): it must call release, which may
// be called more than once. Refused, cl is remembered as a waiter (freed notifies it) and the error
// says why and what to do.
func (b *Backend) admit(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, settings *providersv1alpha1.HostedBackendConfig, pcName string) (release func(), err error) {
	if settings.MaxClusters == nil {
		b.wait(cl, false)
		return func() {}, nil
	}
	limit := int(*settings.MaxClusters)
	key := cl.Namespace + "/" + cl.Spec.Profile
	b.places.LockKey(key)
	release = sync.OnceFunc(func() { _ = b.places.UnlockKey(key) })
	ahead, err := b.ahead(ctx, h, cl)
	if err != nil {
		release()
		return nil, err
	}
	if len(ahead) < limit {
		b.wait(cl, false)
		return release, nil
	}
	b.wait(cl, true)
	release()
	names := ahead[:min(len(ahead), shownAhead)]
	if len(ahead) > shownAhead {
		names = append(slices.Clone(names), fmt.Sprintf("%d more", len(ahead)-shownAhead))
	}
	return nil, &backend.Error{Reason: backend.ReasonQuotaExceeded, RetryAfter: retryQuota, Err: fmt.Errorf(
		"namespace %s has %d Clusters of profile %s with a control plane or ahead of this one in line (%s), and spec.hosted.maxClusters of ProviderConfig %s allows %d: "+
			"this Cluster gets its control plane by itself once a place frees. Delete a Cluster of profile %s in namespace %s, or ask the platform administrator to raise spec.hosted.maxClusters of ProviderConfig %s",
		cl.Namespace, len(ahead), cl.Spec.Profile, strings.Join(names, ", "), pcName, limit, cl.Spec.Profile, cl.Namespace, pcName)}
}

// ahead returns, oldest first, the names of the Clusters of cl's namespace and profile that take
// a place before cl: those with a control plane (made, being made, or being deleted: a place frees
// when the control plane is gone), and the older ones not being deleted that wait for one. The
// caller holds the lock of cl's namespace and profile (places).
func (b *Backend) ahead(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster) ([]string, error) {
	list := &clustersv1alpha1.ClusterList{}
	if err := b.opts.Clusters.List(ctx, list, client.InNamespace(cl.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the Clusters of namespace %s for spec.hosted.maxClusters: %w", cl.Namespace, err)
	}
	others := slices.DeleteFunc(list.Items, func(o clustersv1alpha1.Cluster) bool {
		return o.UID == cl.UID || o.Spec.Profile != cl.Spec.Profile
	})
	slices.SortFunc(others, func(x, y clustersv1alpha1.Cluster) int { return inLine(&x, &y) })
	var ahead []string
	for i := range others {
		o := &others[i]
		take := o.DeletionTimestamp.IsZero() && inLine(o, cl) < 0
		if !take {
			var err error
			if take, err = b.hasControlPlane(ctx, h, o); err != nil {
				return nil, err
			}
		}
		if take {
			ahead = append(ahead, o.Name)
		}
	}
	return ahead, nil
}

// inLine orders Clusters for places: the older first, by creationTimestamp, then by name.
func inLine(x, y *clustersv1alpha1.Cluster) int {
	if c := x.CreationTimestamp.Compare(y.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Compare(x.Name, y.Name)
}

// hasControlPlane reports whether o has a control plane: one this backend found or made (where),
// none if this backend refused it (waiting: under the lock of o's namespace and profile, neither
// changes), else whether its namespace is on the host its status names, or on h, where new
// control planes of o's profile go (after a restart of the operator).
func (b *Backend) hasControlPlane(ctx context.Context, h *host, o *clustersv1alpha1.Cluster) (bool, error) {
	b.mu.Lock()
	_, made := b.where[o.UID]
	_, waits := b.waiting[o.UID]
	b.mu.Unlock()
	if made || waits {
		return made, nil
	}
	if ps := statusOf(o); ps.Backend == Name {
		var err error
		if h, err = b.hostFor(ctx, ps.seedRef()); err != nil || h == nil {
			return false, err
		}
	}
	ns := &corev1.Namespace{}
	err := h.client.Get(ctx, client.ObjectKey{Name: NamespaceFor(o.UID)}, ns)
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("looking for the control plane of Cluster %s/%s for spec.hosted.maxClusters: %w", o.Namespace, o.Name, err)
	}
	return ns.Labels[LabelClusterUID] == string(o.UID), nil
}

// wait records whether cl waits for a place of its namespace's quota.
func (b *Backend) wait(cl *clustersv1alpha1.Cluster, waits bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if waits {
		b.waiting[cl.UID] = backend.RefOf(cl)
	} else {
		delete(b.waiting, cl.UID)
	}
}

// freed notifies the Clusters that wait for a place of cl's namespace and profile: cl's control
// plane is gone (or cl, waiting itself, was deleted and is out of the line). Each decides again
// (admit); the order of the line, not that of the notifications, says who gets the place.
func (b *Backend) freed(cl *clustersv1alpha1.Cluster) {
	if b.opts.Notify == nil {
		return
	}
	b.mu.Lock()
	var refs []backend.Ref
	for uid, ref := range b.waiting {
		if uid != cl.UID && ref.Namespace == cl.Namespace && ref.Profile == cl.Spec.Profile {
			refs = append(refs, ref)
		}
	}
	b.mu.Unlock()
	for _, ref := range refs {
		b.opts.Notify(ref)
	}
}
