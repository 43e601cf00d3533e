package hosted

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/objectstore"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// With spec.backup.objectStore set, the snapshot Jobs of the bound ProviderConfig's control
// planes upload each verified snapshot, encrypted, with its record and the encryption keys it
// needs, to the S3-compatible object store (cmd/etcd-snapshot save --store-…; backend/objectstore,
// the local backend's layout: <prefix>/<Cluster namespace>/<Cluster UID>/<snapshot>.…), and prune
// it with the same retention; a snapshot of the claim the store lacks (its Job could not upload
// it) goes with the next Job's (objectstore.Catalog.Sync). The store's credentials (the Secret of
// the operator's namespace the ProviderConfig names) are copied into the Job's own Secret in
// BackupNamespace, which the Job owns (deleted with it), and mounted into its pod only; a
// NetworkPolicy of BackupNamespace lets the Cluster's snapshot Jobs reach the store's port.
// Snapshots lists the store's catalog (the operator reaches the store itself) merged with the
// claim's ConfigMap.

const (
	// storeMount is where the snapshot Jobs find the store's credentials.
	storeMount = "/store"
	// storeKeysFile is the file, in the Job's Secret and under storeMount, of the encryption keys
	// uploaded with the snapshot (encryption.Kept).
	storeKeysFile = "keys.json"
	// storeCAFile is the file of the store's CA bundle.
	storeCAFile = "ca-bundle.crt"
)

// storeKeys are the keys of the credentials Secret, copied as they are.
var storeKeys = []string{providersv1alpha1.ObjectStoreAccessKeyID, providersv1alpha1.ObjectStoreSecretAccessKey, providersv1alpha1.ObjectStoreEncryptionKey}

// objectStoreOf is pc's object store; nil when it has none.
func objectStoreOf(pc *providersv1alpha1.ProviderConfig) *providersv1alpha1.BackupObjectStore {
	if pc == nil || pc.Spec.Backup == nil {
		return nil
	}
	return pc.Spec.Backup.ObjectStore
}

// storeCredentials reads the store's credentials Secret in the operator's namespace, checked:
// the three keys there, the encryption key of the right form. The values are never logged.
func (b *Backend) storeCredentials(ctx context.Context, cfg *providersv1alpha1.BackupObjectStore) (map[string][]byte, error) {
	ref := fmt.Sprintf("Secret %s (spec.backup.objectStore.credentialsSecretRef, in the operator's namespace %s)", cfg.CredentialsSecretRef.Name, b.opts.Namespace)
	if b.opts.Namespace == "" {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable,
			"the hosted backend does not know the operator's namespace, where the object store's credentials Secret %s is: run the operator in a pod, or set --leader-election-namespace", cfg.CredentialsSecretRef.Name)
	}
	h, err := b.hostFor(ctx, nil)
	if err != nil || h == nil {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable, "the hosted backend is starting: %v", err)
	}
	sec := &corev1.Secret{}
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: b.opts.Namespace, Name: cfg.CredentialsSecretRef.Name}, sec); err != nil {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable, "reading the object store's %s: %v; create it with keys %s", ref, err, strings.Join(storeKeys, ", "))
	}
	out := map[string][]byte{}
	for _, k := range storeKeys {
		if len(sec.Data[k]) == 0 {
			return nil, backend.Errorf(backend.ReasonBackupUnavailable, "the object store's %s has no key %s: it needs %s", ref, k, strings.Join(storeKeys, ", "))
		}
		out[k] = sec.Data[k]
	}
	if _, err := objectstore.ParseKey(strings.TrimSpace(string(out[providersv1alpha1.ObjectStoreEncryptionKey]))); err != nil {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable, "key %s of the object store's %s: %v", providersv1alpha1.ObjectStoreEncryptionKey, ref, err)
	}
	return out, nil
}

// catalog is the object store cfg names, as the operator reaches it.
func (b *Backend) catalog(ctx context.Context, cfg *providersv1alpha1.BackupObjectStore) (*objectstore.Catalog, error) {
	data, err := b.storeCredentials(ctx, cfg)
	if err != nil {
		return nil, err
	}
	key, err := objectstore.ParseKey(strings.TrimSpace(string(data[providersv1alpha1.ObjectStoreEncryptionKey])))
	if err != nil {
		return nil, err
	}
	st, err := objectstore.New(objectstore.Config{
		Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Prefix: cfg.Prefix, Region: cfg.Region,
		Insecure: cfg.Insecure, CABundle: []byte(cfg.CABundle), PathStyle: cfg.PathStyle,
		AccessKeyID:     strings.TrimSpace(string(data[providersv1alpha1.ObjectStoreAccessKeyID])),
		SecretAccessKey: strings.TrimSpace(string(data[providersv1alpha1.ObjectStoreSecretAccessKey])),
	})
	if err != nil {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable, "spec.backup.objectStore: %v", err)
	}
	return &objectstore.Catalog{Store: st, Key: key, Records: &b.storeRecords}, nil
}

// storeJobData is what the snapshot Job of t's control plane needs of the store, put into its own
// Secret: the credentials, the CA bundle, and the encryption keys kept beside the snapshots,
// uploaded with the snapshot (a restore from the store alone finds them there).
func (b *Backend) storeJobData(ctx context.Context, t task, cfg *providersv1alpha1.BackupObjectStore) (map[string][]byte, error) {
	data, err := b.storeCredentials(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if cfg.CABundle != "" {
		data[storeCAFile] = []byte(cfg.CABundle)
	}
	kept, err := b.readKept(ctx, t.h, t.s.Namespace, t.s.Cluster.UID)
	if err != nil {
		return nil, fmt.Errorf("reading the encryption keys to upload with the snapshot: %w", err)
	}
	if kept.found && len(kept.Keys) > 0 {
		if data[storeKeysFile], err = json.Marshal(kept.Kept); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// withObjectStore makes job (a snapshot or serve Job of the control plane in namespace ns, of a
// Cluster of namespace clusterNS) use the store cfg: its flags, and the store's files of the
// Job's Secret mounted at storeMount.
func withObjectStore(job *batchv1.Job, kind jobKind, ns, clusterNS string, cfg *providersv1alpha1.BackupObjectStore) {
	pod := &job.Spec.Template.Spec
	c := &pod.Containers[0]
	c.Args = append(c.Args, storeArgs(cfg, clusterNS)...)
	if kind.component == ComponentSnapshot {
		c.Args = append(c.Args, "--keys-file="+storeMount+"/"+storeKeysFile)
	}
	items := []corev1.KeyToPath{}
	for _, k := range append(slices.Clone(storeKeys), storeKeysFile, storeCAFile) {
		items = append(items, corev1.KeyToPath{Key: k, Path: k})
	}
	vol := kind.secretVolume("store", ns)
	vol.Secret.Items = items
	vol.Secret.Optional = ptr.To(true) // keys.json and the CA bundle may be missing; the tool checks the credentials
	for i := range pod.Volumes {       // the snapshot Job's certificate volume shows the certificate only
		if sv := pod.Volumes[i].Secret; kind.component == ComponentSnapshot && sv != nil && sv.SecretName == kind.name(ns) && pod.Volumes[i].Name != "store" {
			sv.Items = []corev1.KeyToPath{{Key: "tls.crt", Path: "tls.crt"}, {Key: "tls.key", Path: "tls.key"}, {Key: "ca.crt", Path: "ca.crt"}}
		}
	}
	pod.Volumes = append(pod.Volumes, vol)
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "store", MountPath: storeMount, ReadOnly: true})
}

// storeArgs are the flags of cmd/etcd-snapshot that name the store cfg, for a Cluster of
// namespace clusterNS.
func storeArgs(cfg *providersv1alpha1.BackupObjectStore, clusterNS string) []string {
	args := []string{"--store-endpoint=" + cfg.Endpoint, "--store-bucket=" + cfg.Bucket, "--store-credentials=" + storeMount, "--namespace=" + clusterNS}
	if cfg.Prefix != "" {
		args = append(args, "--store-prefix="+cfg.Prefix)
	}
	if cfg.Region != "" {
		args = append(args, "--store-region="+cfg.Region)
	}
	if cfg.Insecure {
		args = append(args, "--store-insecure")
	}
	if cfg.PathStyle {
		args = append(args, "--store-path-style")
	}
	if cfg.CABundle != "" {
		args = append(args, "--store-ca-file="+storeMount+"/"+storeCAFile)
	}
	return args
}

// storePort is the TCP port of the store's endpoint: the one it names, else 443 (80 with
// insecure).
func storePort(cfg *providersv1alpha1.BackupObjectStore) int32 {
	host := cfg.Endpoint
	if u, err := url.Parse(cfg.Endpoint); err == nil && strings.Contains(cfg.Endpoint, "://") {
		host = u.Host
	}
	if _, p, err := net.SplitHostPort(host); err == nil {
		if n, err := strconv.ParseInt(p, 10, 32); err == nil && n > 0 && n < 65536 {
			return int32(n)
		}
	}
	if cfg.Insecure {
		return 80
	}
	return 443
}

// StoreNetworkPolicy lets the snapshot and serve pods of s's Cluster (s is the backupSpec) out to
// the store's port, anywhere: a NetworkPolicy cannot name a host, and an address may be a
// Service's, translated before the policy applies (docs/backups.md).
func (s *Spec) StoreNetworkPolicy(ns string, cfg *providersv1alpha1.BackupObjectStore) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		TypeMeta:   typeMeta("networking.k8s.io/v1", "NetworkPolicy"),
		ObjectMeta: s.meta(storePolicyName(ns), ComponentSnapshot),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{
				MatchLabels: map[string]string{LabelManagedBy: ManagedBy, LabelClusterUID: string(s.Cluster.UID)},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: LabelComponent, Operator: metav1.LabelSelectorOpIn,
					Values: []string{ComponentSnapshot, ComponentServe}}},
			},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{tcpPort(storePort(cfg))}}},
		},
	}
}

func storePolicyName(ns string) string { return "object-store-" + ns }

// dropStorePolicy removes the store's NetworkPolicy of the control plane in namespace ns (its
// ProviderConfig has no store, or its Cluster is gone).
// The host's cache says whether there is one: no request when there is none (the usual case).
func dropStorePolicy(ctx context.Context, h *host, ns string) error {
	np := &networkingv1.NetworkPolicy{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: storePolicyName(ns)}, np); apierrors.IsNotFound(err) {
		return nil
	}
	err := h.client.Delete(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: storePolicyName(ns)}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting NetworkPolicy %s/%s: %w", BackupNamespace, storePolicyName(ns), err)
	}
	return nil
}

// Snapshot is Backend.Snapshot with the bound ProviderConfig's object store.
func (v *Bound) Snapshot(ctx context.Context, cl *clustersv1alpha1.Cluster, retention backend.Retention) (backend.Snapshot, error) {
	return v.Backend.snapshot(ctx, cl, retention, objectStoreOf(v.pc))
}

// Snapshots lists cl's snapshots, newest first: those of the claim's ConfigMap and, with an
// object store, those of its catalog (a claim lost, they are still there). A store that does not
// answer is logged, and the ConfigMap's are listed.
func (v *Bound) Snapshots(ctx context.Context, cl *clustersv1alpha1.Cluster) ([]backend.Snapshot, error) {
	local, err := v.Backend.Snapshots(ctx, cl)
	cfg := objectStoreOf(v.pc)
	if err != nil || cfg == nil {
		return local, err
	}
	return v.merged(ctx, cfg, cl, local), nil
}

// merged is local with the snapshots of cl the store cfg lists and local lacks.
func (b *Backend) merged(ctx context.Context, cfg *providersv1alpha1.BackupObjectStore, cl *clustersv1alpha1.Cluster, local []backend.Snapshot) []backend.Snapshot {
	cat, err := b.catalog(ctx, cfg)
	var remote []backend.Snapshot
	if err == nil {
		remote, err = cat.List(ctx, cl.Namespace, cl.UID)
	}
	if err != nil {
		b.opts.Logger.Error(err, "Listing the snapshots in the object store failed; listing those of the claim", "cluster", backend.RefOf(cl).String())
	}
	out := slices.Clone(local)
	for _, r := range remote {
		if !slices.ContainsFunc(out, func(s backend.Snapshot) bool { return s.Name == r.Name }) {
			out = append(out, r)
		}
	}
	snapshots.Sort(out)
	return out
}
