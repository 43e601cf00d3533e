package hosted

import (
	"context"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Outcomes of applier.apply.
const (
	workloadKept    = iota // as planned: nothing written
	workloadWritten        // made, or changed to the plan
	workloadWaits          // differs from the plan, but its turn to roll has not come
)

// applier is the one way every component writes its objects: server-side apply as FieldOwner,
// skipped when the object in the host's cache carries the hash of the rendered object
// (AnnotationInputs, Rendered) and nobody changed it since the backend's last apply. What the
// last apply returned is remembered per object: its generation, or its resourceVersion for kinds
// without one. A change by someone else (a new generation: kubectl scale, an edit) is drift, put
// back by applying again. After a restart of the operator nothing is remembered: a workload is
// then compared by a server-side dry run once (a new operator version whose plan renders the same
// never rolls it), any other object is applied once (a no-op for the API server when unchanged).
type applier struct {
	mu sync.Mutex
	// last is what the backend's last apply of each object returned, by kind/namespace/name.
	last map[string]appliedVersion
}

// appliedVersion is what an apply returned: the object's rendered hash and its generation (or
// resourceVersion).
type appliedVersion struct {
	hash, version string
}

// versionOf is obj's generation, or its resourceVersion when its kind has none.
func versionOf(obj client.Object) (v string, generation bool) {
	if g := obj.GetGeneration(); g > 0 {
		return strconv.FormatInt(g, 10), true
	}
	return "r" + obj.GetResourceVersion(), false
}

func applyKey(obj client.Object) string {
	return obj.GetObjectKind().GroupVersionKind().Kind + "/" + obj.GetNamespace() + "/" + obj.GetName()
}

// applyPlanned makes obj (typed, with TypeMeta) as planned, through the applier. A missing object
// is created. An existing one is written only when its rendered hash changed, or when someone
// else changed it since the last apply (drift). turn, when set, is asked before a change that
// rolls pods (bounded rolling, --hosted-max-rolling); never for a creation. Objects without
// AnnotationInputs are stamped (stamp). A namespace is applied only when new or the backend's own
// (claimNamespace).
func (h *host) applyPlanned(ctx context.Context, obj client.Object, turn func() bool) (int, error) {
	if obj.GetAnnotations()[AnnotationInputs] == "" {
		obj = stamp(obj)
	}
	want := obj.GetAnnotations()[AnnotationInputs]
	key := applyKey(obj)
	cur := obj.DeepCopyObject().(client.Object)
	err := h.cache.Get(ctx, client.ObjectKeyFromObject(obj), cur)
	switch {
	case apierrors.IsNotFound(err):
		return workloadWritten, h.applyRemembered(ctx, key, obj)
	case err != nil:
		return workloadKept, err
	}
	if cur.GetAnnotations()[AnnotationInputs] == want {
		kept, err := h.unchanged(ctx, key, obj, cur, turn != nil)
		if err != nil || kept {
			return workloadKept, err
		}
	}
	if turn != nil && !turn() {
		return workloadWaits, nil
	}
	return workloadWritten, h.applyRemembered(ctx, key, obj)
}

// unchanged reports whether cur, which carries obj's rendered hash, is as the backend's last
// apply left it. Nothing remembered (a restart): a workload (dry) is compared by a server-side
// dry run, whose generation shows whether applying would change its spec.
func (h *host) unchanged(ctx context.Context, key string, obj, cur client.Object, dry bool) (bool, error) {
	now, generation := versionOf(cur)
	h.applied.mu.Lock()
	last, ok := h.applied.last[key]
	h.applied.mu.Unlock()
	switch {
	case ok && last.hash == obj.GetAnnotations()[AnnotationInputs]:
		if now == last.version {
			return true, nil
		}
		// The cache lags behind our own apply: an older generation than the one applied.
		return generation && cur.GetGeneration() < mustInt(last.version), nil
	case !dry:
		return false, nil
	}
	res, err := h.applyResult(ctx, obj, client.DryRunAll)
	if err != nil {
		return false, err
	}
	if res.GetGeneration() != cur.GetGeneration() {
		return false, nil
	}
	h.remember(key, obj, cur)
	return true, nil
}

func mustInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// applyRemembered applies obj and remembers what the API server returned.
func (h *host) applyRemembered(ctx context.Context, key string, obj client.Object) error {
	if ns := obj.GetNamespace(); ns == "" && obj.GetObjectKind().GroupVersionKind().Kind == "Namespace" {
		if err := h.claimNamespace(ctx, obj.GetName()); err != nil {
			return err
		}
	}
	res, err := h.applyResult(ctx, obj)
	if err != nil {
		return err
	}
	h.remember(key, obj, res)
	return nil
}

// remember records got (an apply's answer, or the cached object found as planned) as the last
// applied version of obj.
func (h *host) remember(key string, obj client.Object, got client.Object) {
	v, _ := versionOf(got)
	h.applied.mu.Lock()
	defer h.applied.mu.Unlock()
	if h.applied.last == nil {
		h.applied.last = map[string]appliedVersion{}
	}
	h.applied.last[key] = appliedVersion{hash: obj.GetAnnotations()[AnnotationInputs], version: v}
}

// forgetApplied drops what is remembered of the objects of namespace ns (deleted).
func (h *host) forgetApplied(ns string) {
	h.applied.mu.Lock()
	defer h.applied.mu.Unlock()
	for k := range h.applied.last {
		if parts := strings.SplitN(k, "/", 3); len(parts) == 3 && parts[1] == ns {
			delete(h.applied.last, k)
		}
	}
}
