package hosted

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"k8s.io/apimachinery/pkg/types"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
)

// authnKey is the key of the authentication configuration in its ConfigMap.
const authnKey = authconfig.FileName

// AdminConfig is Backend.AdminConfig with the bound ProviderConfig.
func (v *Bound) AdminConfig(ctx context.Context, cl *clustersv1alpha1.Cluster) (*rest.Config, error) {
	return v.Backend.adminConfig(ctx, cl, v.pc)
}

// SetJWTAuthenticators is Backend.SetJWTAuthenticators with the bound ProviderConfig.
func (v *Bound) SetJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator) (bool, error) {
	return v.Backend.setJWTAuthenticators(ctx, cl, jwt, v.pc)
}

// AdminConfig returns the operator's rest.Config for cl's API server.
func (b *Backend) AdminConfig(ctx context.Context, cl *clustersv1alpha1.Cluster) (*rest.Config, error) {
	pc, err := b.config(ctx, cl)
	if err != nil {
		return nil, err
	}
	return b.adminConfig(ctx, cl, pc)
}

// adminConfig is AdminConfig with cl's ProviderConfig pc: the config the last Ensure made, or
// one made from the record and the admin certificate's Secret (after a restart of the operator),
// without writing anything. A control plane that is not made yet is an error the caller retries.
func (b *Backend) adminConfig(ctx context.Context, cl *clustersv1alpha1.Cluster, pc *providersv1alpha1.ProviderConfig) (*rest.Config, error) {
	b.mu.Lock()
	cfg, door := b.admin[cl.UID], b.doors[cl.UID]
	if !b.asleep[cl.UID] {
		door = "" // awake: straight to the API servers, not counted as a client's use
	}
	b.mu.Unlock()
	if cfg != nil {
		return throughDoor(rest.CopyConfig(cfg), door), nil
	}
	h, ps, found, err := b.locate(ctx, cl, seedOf(pc))
	switch {
	case err != nil:
		return nil, err
	case h == nil:
		return nil, fmt.Errorf("the hosted backend is starting: no credentials for the control plane of %s yet", backend.RefOf(cl))
	case !found || ps.Version == "":
		return nil, fmt.Errorf("the hosted control plane of %s is not made yet: its credentials come with it", backend.RefOf(cl))
	}
	ns := NamespaceFor(cl.UID)
	admin := &corev1.Secret{}
	if err := h.memo.Get(ctx, client.ObjectKey{Namespace: ns, Name: SecretAdmin}, admin); err != nil {
		return nil, fmt.Errorf("the hosted control plane of %s has no admin certificate yet (Secret %s/%s): %w", backend.RefOf(cl), ns, SecretAdmin, err)
	}
	external := ""
	if !h.internal {
		s := &Spec{Namespace: ns, Exposure: corev1.ServiceType(ps.Exposure)}
		settings := &providersv1alpha1.HostedBackendConfig{}
		if external, _, err = b.external(ctx, h, s, settings, &ps); err != nil {
			return nil, err
		}
	}
	// The admin Secret's ca.crt is the cluster CA's trust bundle (ensureLeaf).
	return adminConfig(h, ns, external, admin.Data["ca.crt"], admin.Data["tls.crt"], admin.Data["tls.key"]), nil
}

// throughDoor makes cfg, the operator's config for the API server's internal Service, reach it
// through the front door's address in the host while the control plane is hibernated (door; "":
// it is awake, has no door, or the operator is outside the host and goes through the door anyway,
// on the endpoint): the requests of AccessRequests then wake it, and wait for it; awake, they do
// not count as a client's use. The serving certificate names the internal Service, which the TLS
// handshake asks for.
func throughDoor(cfg *rest.Config, door string) *rest.Config {
	if door == "" {
		return cfg
	}
	if u, err := url.Parse(cfg.Host); err == nil && cfg.TLSClientConfig.ServerName == "" {
		cfg.TLSClientConfig.ServerName = u.Hostname()
	}
	cfg.Host = door
	return cfg
}

// wakeFor asks the hibernation component to wake cl's control plane, hibernated, for the
// operator's own need (an OIDC configuration, a snapshot), and reports whether it was hibernated.
func (b *Backend) wakeFor(cl *clustersv1alpha1.Cluster) bool {
	b.mu.Lock()
	asleep := b.asleep[cl.UID]
	if asleep {
		b.wanted[cl.UID] = true
	}
	b.mu.Unlock()
	if asleep && b.opts.Notify != nil {
		b.opts.Notify(backend.RefOf(cl))
	}
	return asleep
}

// wantedAwake reports whether the operator asked to wake the control plane of uid (wakeFor), and
// forgets it.
func (b *Backend) wantedAwake(uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.wanted[uid]
	delete(b.wanted, uid)
	return w
}

// SetJWTAuthenticators writes jwt into the control plane's authentication ConfigMap, makes the
// kubelet refresh the API server pods' copy at once, and reports whether the API server runs with it.
func (b *Backend) SetJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator) (bool, error) {
	pc, err := b.config(ctx, cl)
	if err != nil {
		return false, err
	}
	return b.setJWTAuthenticators(ctx, cl, jwt, pc)
}

// setJWTAuthenticators is SetJWTAuthenticators with cl's ProviderConfig pc.
func (b *Backend) setJWTAuthenticators(ctx context.Context, cl *clustersv1alpha1.Cluster, jwt []apiserverv1.JWTAuthenticator, pc *providersv1alpha1.ProviderConfig) (bool, error) {
	data, err := authconfig.Render(jwt)
	if err != nil {
		return false, err
	}
	h, _, found, err := b.locate(ctx, cl, seedOf(pc))
	if err != nil || h == nil {
		return false, err
	}
	if !found {
		return false, fmt.Errorf("the hosted control plane of %s does not exist yet", backend.RefOf(cl))
	}
	ns := NamespaceFor(cl.UID)
	b.wakeFor(cl) // its API servers start with the configuration
	cm := &corev1.ConfigMap{}
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: NameAuthn}, cm); err != nil {
		return false, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, NameAuthn, err)
	}
	if cm.Data[authnKey] != string(data) {
		cm.Data = map[string]string{authnKey: string(data)}
		if err := h.client.Update(ctx, cm); err != nil {
			return false, fmt.Errorf("updating ConfigMap %s/%s: %w", ns, NameAuthn, err)
		}
	}
	sum := hashOf([]string{string(data)})
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels{LabelComponent: ComponentAPIServer}); err != nil {
		return false, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Annotations[AnnotationAuthn] == sum || p.DeletionTimestamp != nil {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[AnnotationAuthn] = sum
		if err := h.client.Patch(ctx, p, patch); client.IgnoreNotFound(err) != nil {
			return false, fmt.Errorf("annotating pod %s/%s: %w", ns, p.Name, err)
		}
	}
	cfg, err := b.adminConfig(ctx, cl, pc)
	if err != nil {
		return false, err
	}
	return authconfig.AppliedAt(ctx, cfg, data)
}

func hashOf(ss []string) string {
	h := sha256.New()
	for _, s := range ss {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
