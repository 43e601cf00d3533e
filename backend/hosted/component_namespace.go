package hosted

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/authconfig"
)

// namespaceComponent makes the control plane's namespace and what the later components need in
// it before they start: the authentication configuration, the Services, the NetworkPolicies, the
// audit policy and, when highly available, the PriorityClass, etcd's peer Service and the
// PodDisruptionBudgets (Spec.Objects).
type namespaceComponent struct{}

func (namespaceComponent) name() string { return "namespace" }

func (namespaceComponent) step(ctx context.Context, sc *scope) (result, error) {
	b, h, s := sc.b, sc.h, sc.s
	if _, err := h.applyPlanned(ctx, s.NamespaceObject(), nil); err != nil {
		return result{}, err
	}
	b.mu.Lock()
	b.where[sc.cl.UID] = sc.ps.seedRef()
	b.mu.Unlock()
	sc.release() // the namespace made, the control plane counts for the others (hasControlPlane)
	sc.release = func() {}
	if err := h.createOnce(ctx, b.authnConfigMap(s)); err != nil {
		return result{}, err
	}
	if s.HighAvailability {
		if err := h.ensurePriorityClass(ctx, b.opts.Logger); err != nil {
			return result{}, err
		}
	}
	for _, obj := range s.Objects() {
		if _, err := h.applyPlanned(ctx, obj, nil); err != nil {
			return result{}, err
		}
	}
	return result{}, nil
}

// createOnce creates obj unless the host's cache (or, for an object it does not hold, the API
// server) has it: its content is then someone else's to keep (SetJWTAuthenticators').
func (h *host) createOnce(ctx context.Context, obj client.Object) error {
	if h.memo.Get(ctx, client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object)) == nil {
		return nil
	}
	return h.createIfMissing(ctx, obj)
}

// authnConfigMap is the authentication configuration the API server starts with: no issuer.
func (b *Backend) authnConfigMap(s *Spec) *corev1.ConfigMap {
	return &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: s.meta(NameAuthn, ComponentAPIServer),
		Data: map[string]string{authnKey: authconfig.Empty}}
}
