package hosted

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// NameRecord is the ConfigMap, in a control plane's namespace, in which the backend records what
// the control plane was made with: its version, image, service range, exposure, external host,
// seed and etcd storage. The record, not the ProviderConfig of the moment, decides what an
// existing control plane runs: a ProviderConfig change applies to new Clusters. The Cluster's
// status.providerStatus shows it and is never read back, except once to adopt a control plane
// made before the record existed.
const NameRecord = "control-plane-record"

// recordKey is the record's key in its ConfigMap.
const recordKey = "record.json"

// providerStatus is the record (NameRecord) and, as output, the Cluster's status.providerStatus.
type providerStatus struct {
	Backend      string `json:"backend"`
	Namespace    string `json:"namespace"`
	Seed         string `json:"seed,omitempty"`
	Version      string `json:"version"`
	Image        string `json:"image"`
	ServiceCIDR  string `json:"serviceCIDR"`
	Exposure     string `json:"exposure"`
	ExternalHost string `json:"externalHost,omitempty"`
	// UpgradeFrom is the version the control plane moves from while it rolls to Version.
	UpgradeFrom string `json:"upgradeFrom,omitempty"`
	// StorageClassName and StorageSize are etcd's claim; no class: an emptyDir.
	StorageClassName string `json:"storageClassName,omitempty"`
	StorageSize      string `json:"storageSize,omitempty"`
	// HighAvailability: three etcd members and two API servers (Spec.HighAvailability).
	HighAvailability bool `json:"highAvailability,omitempty"`
	// EtcdDataDir is etcd's data folder on its claims ("": "data"), EtcdRestoredFrom the snapshot
	// a restore made it from, RestoredMark what the API servers' pods are marked with since the
	// last restore (Spec.RestoredMark): kept after the restore, so that nothing rolls again.
	EtcdDataDir      string         `json:"etcdDataDir,omitempty"`
	EtcdRestoredFrom *RestoreSource `json:"etcdRestoredFrom,omitempty"`
	RestoredMark     string         `json:"restoredMark,omitempty"`
	// Restore is a restore under way (restore.go); Restored the last one, done or failed.
	Restore  *restoreRun       `json:"restore,omitempty"`
	Restored *backend.Restored `json:"restored,omitempty"`
	// SeedKey is the key of the seed's kubeconfig in its Secret.
	SeedKey string `json:"seedKey,omitempty"`
	// Etcd is the last report of etcd's maintenance (maintain.go).
	Etcd *etcdHealth `json:"etcd,omitempty"`
	// Preflight is the last check of an image the control plane was to roll to (preflight.go).
	Preflight *imageCheck `json:"preflight,omitempty"`
	// ImageRefresh is the last value of the Cluster's AnnotationImageRefresh that was acted on.
	ImageRefresh string `json:"imageRefresh,omitempty"`
	// Encryption is the state of the encryption at rest, in the status only (encryption.go:
	// Secret SecretEncryption is its record).
	Encryption *encryption.Status `json:"encryption,omitempty"`
	// Hibernated, when set, is the control plane's hibernation: etcd and the API servers scaled
	// to zero (component_hibernation.go). Waking is a wake under way: when it began and why.
	Hibernated *hibernation `json:"hibernated,omitempty"`
	Waking     *waking      `json:"waking,omitempty"`
	// Demanded is the value of annotation backend.AnnotationHibernate last acted on: a value
	// hibernates the control plane once, when it appears (a request may wake it after).
	Demanded string `json:"demanded,omitempty"`
	// WokeAt is when the control plane last began to serve behind its door: the first time, or
	// after a wake. Its idle clock starts there at the latest (a control plane slow to start, or
	// woken for the operator's need, has had no client yet).
	WokeAt *time.Time `json:"wokeAt,omitempty"`
}

// statusOf is cl's status.providerStatus, if this backend wrote it: only a hint where to look
// (locate) and the record of a control plane made before NameRecord existed.
func statusOf(cl *clustersv1alpha1.Cluster) providerStatus {
	var ps providerStatus
	if cl.Status.ProviderStatus == nil || json.Unmarshal(cl.Status.ProviderStatus.Raw, &ps) != nil || ps.Backend != Name {
		return providerStatus{}
	}
	return ps
}

// seedRef is the seed the record names; nil for the platform.
func (ps providerStatus) seedRef() *providersv1alpha1.SeedRef {
	if ps.Seed == "" {
		return nil
	}
	return &providersv1alpha1.SeedRef{SecretName: ps.Seed, Key: ps.SeedKey}
}

// readRecord reads the record of the control plane in namespace ns of h; found is false when
// there is none.
func readRecord(ctx context.Context, h *host, ns string) (ps providerStatus, found bool, err error) {
	cm := &corev1.ConfigMap{}
	if err := h.memo.Get(ctx, client.ObjectKey{Namespace: ns, Name: NameRecord}, cm); apierrors.IsNotFound(err) {
		return ps, false, nil
	} else if err != nil {
		return ps, false, fmt.Errorf("reading ConfigMap %s/%s: %w", ns, NameRecord, err)
	}
	if err := json.Unmarshal([]byte(cm.Data[recordKey]), &ps); err != nil || ps.Backend != Name {
		return ps, false, fmt.Errorf("ConfigMap %s/%s holds no record of this backend (%v): left as it is; delete it to have it made anew from the Cluster's status", ns, NameRecord, err)
	}
	return ps, true, nil
}

// writeRecord writes ps into the record of s's control plane, when it changed.
func writeRecord(ctx context.Context, h *host, s *Spec, ps providerStatus) error {
	ps.Encryption = nil // status only: Secret SecretEncryption is its record
	data, err := json.Marshal(ps)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{}
	err = h.memo.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameRecord}, cm)
	switch {
	case apierrors.IsNotFound(err):
		cm = &corev1.ConfigMap{ObjectMeta: s.meta(NameRecord, ""), Data: map[string]string{recordKey: string(data)}}
		if err := h.memo.Create(ctx, cm); err != nil {
			return fmt.Errorf("creating ConfigMap %s/%s: %w", s.Namespace, NameRecord, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading ConfigMap %s/%s: %w", s.Namespace, NameRecord, err)
	case cm.Data[recordKey] == string(data):
		return nil
	}
	cm.Data = map[string]string{recordKey: string(data)}
	if err := h.memo.Update(ctx, cm); err != nil {
		return fmt.Errorf("updating ConfigMap %s/%s: %w", s.Namespace, NameRecord, err)
	}
	return nil
}

// storageOf is the etcd storage a control plane made before its storage was recorded runs on:
// its StatefulSet's claim template, or none (an emptyDir).
func storageOf(ctx context.Context, h *host, ns string) (class, size string, err error) {
	sts := &appsv1.StatefulSet{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: ns, Name: NameEtcd}, sts); apierrors.IsNotFound(err) {
		return "", "", nil
	} else if err != nil {
		return "", "", err
	}
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Spec.StorageClassName != nil {
			class = *t.Spec.StorageClassName
		}
		if q, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]; ok {
			size = q.String()
		}
	}
	return class, size, nil
}

// locate finds cl's control plane: the host whose namespace NamespaceFor(cl.UID) belongs to cl,
// and its record. It looks where it found it before, where the Cluster's status says, on the
// ProviderConfig's seed and on the platform, so that a control plane is found (and deleted) even
// when its first Ensure failed half-way or the ProviderConfig's seed changed since. found is false
// for a Cluster with no control plane yet: h is then where a new one goes (the ProviderConfig's
// seed). h is nil while the backend starts.
func (b *Backend) locate(ctx context.Context, cl *clustersv1alpha1.Cluster, seed *providersv1alpha1.SeedRef) (h *host, ps providerStatus, found bool, err error) {
	var candidates []*providersv1alpha1.SeedRef
	b.mu.Lock()
	if ref, ok := b.where[cl.UID]; ok {
		candidates = append(candidates, ref)
	}
	b.mu.Unlock()
	candidates = append(candidates, statusOf(cl).seedRef(), seed, nil)
	ns := NamespaceFor(cl.UID)
	tried := map[string]bool{}
	for _, ref := range candidates {
		name := ""
		if ref != nil {
			name = ref.SecretName
			if seed != nil && seed.SecretName == name {
				ref = seed // its key
			}
		}
		if tried[name] {
			continue
		}
		tried[name] = true
		c, err := b.hostFor(ctx, ref)
		if err != nil || c == nil {
			return nil, ps, false, err
		}
		nsObj := &corev1.Namespace{}
		if err := c.getNamespace(ctx, ns, nsObj); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return nil, ps, false, fmt.Errorf("looking for namespace %s: %w", ns, err)
		}
		if err := notOurs(nsObj, cl.UID); err != nil {
			return nil, ps, false, err
		}
		if ps, found, err = readRecord(ctx, c, ns); err != nil {
			return nil, ps, false, err
		}
		if !found { // made before the record existed, or its first Ensure stopped before it
			ps = statusOf(cl)
			if ps.StorageClassName, ps.StorageSize, err = storageOf(ctx, c, ns); err != nil {
				return nil, ps, false, err
			}
			ps.Seed, ps.SeedKey = name, ""
			if ref != nil {
				ps.SeedKey = ref.Key
			}
		}
		b.mu.Lock()
		b.where[cl.UID] = ref
		b.mu.Unlock()
		return c, ps, true, nil
	}
	h, err = b.hostFor(ctx, seed)
	return h, providerStatus{}, false, err
}

// getNamespace reads namespace name from the host's cache, which holds the backend's own, or
// from the API server when the cache does not hold it (someone else's, or just made).
func (h *host) getNamespace(ctx context.Context, name string, ns *corev1.Namespace) error {
	if err := h.cache.Get(ctx, client.ObjectKey{Name: name}, ns); err == nil {
		return nil
	}
	return h.client.Get(ctx, client.ObjectKey{Name: name}, ns)
}
