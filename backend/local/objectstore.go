package local

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
	"github.com/openmcp-local/cluster-provider/backend/objectstore"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// With spec.backup.objectStore set, the snapshots of a Bound's clusters go to an S3-compatible
// object store as well (backend/objectstore): each verified snapshot is encrypted and uploaded
// with the keys its Secrets are written with, the store's list is the catalog, and a restore
// whose snapshot is missing from the state folder (a lost volume) fetches it from the store,
// decrypts it and checks its SHA-256 into the state folder first, which then serves as a cache.

// catalog is the object store of v's ProviderConfig, with the credentials and the key of its
// Secret; nil when none is set. The client is made again only when the Secret's values change.
func (v *Bound) catalog(ctx context.Context) (*objectstore.Catalog, error) {
	cfg := v.set.objectStore
	if cfg == nil {
		return nil, nil
	}
	ref := fmt.Sprintf("Secret %s (spec.backup.objectStore.credentialsSecretRef, in the operator's namespace %s)", cfg.CredentialsSecretRef.Name, v.opts.SecretNamespace)
	if v.opts.ReadSecret == nil {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable, "the object store's %s cannot be read: this operator reads no Secret for the local backend", ref)
	}
	data, err := v.opts.ReadSecret(ctx, cfg.CredentialsSecretRef.Name)
	if err != nil {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable, "reading the object store's %s: %v; create it with keys %s, %s and %s",
			ref, err, providersv1alpha1.ObjectStoreAccessKeyID, providersv1alpha1.ObjectStoreSecretAccessKey, providersv1alpha1.ObjectStoreEncryptionKey)
	}
	h := sha256.New()
	for _, k := range []string{providersv1alpha1.ObjectStoreAccessKeyID, providersv1alpha1.ObjectStoreSecretAccessKey, providersv1alpha1.ObjectStoreEncryptionKey} {
		h.Write(data[k])
		h.Write([]byte{0})
	}
	sum := string(h.Sum(nil))
	v.catMu.Lock()
	defer v.catMu.Unlock()
	if v.cat != nil && v.catSum == sum {
		return v.cat, nil
	}
	key, err := objectstore.ParseKey(string(data[providersv1alpha1.ObjectStoreEncryptionKey]))
	if err != nil {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable, "key %s of the object store's %s: %v", providersv1alpha1.ObjectStoreEncryptionKey, ref, err)
	}
	store, err := objectstore.New(objectstore.Config{
		Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Prefix: cfg.Prefix, Region: cfg.Region,
		Insecure: cfg.Insecure, CABundle: []byte(cfg.CABundle), PathStyle: cfg.PathStyle,
		AccessKeyID:     string(data[providersv1alpha1.ObjectStoreAccessKeyID]),
		SecretAccessKey: string(data[providersv1alpha1.ObjectStoreSecretAccessKey]),
	})
	if err != nil {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable, "spec.backup.objectStore with the %s: %v", ref, err)
	}
	v.cat, v.catSum = &objectstore.Catalog{Store: store, Key: key, Records: &v.records}, sum
	return v.cat, nil
}

// Snapshot is Backend.Snapshot, and then, with an object store, the upload of the snapshots kept
// that the store lacks (this one, and those an unreachable store missed) and the pruning of the
// store. A snapshot taken but not uploaded is an error: it is kept in the state folder, which
// shares the cluster's failure domain.
func (v *Bound) Snapshot(ctx context.Context, cl *clustersv1alpha1.Cluster, retention backend.Retention) (backend.Snapshot, error) {
	s, err := v.Backend.Snapshot(ctx, cl, retention)
	if err != nil || v.set.objectStore == nil {
		return s, err
	}
	cat, err := v.catalog(ctx)
	if err == nil {
		err = v.sync(ctx, cat, cl, retention)
	}
	if err != nil {
		return s, backend.Errorf(backend.ReasonBackupUnavailable, "snapshot %s was taken and is kept in the state folder, but not in the object store: %v", s.Name, err)
	}
	return s, nil
}

// sync uploads the snapshots of cl in the state folder that the store lacks, newest first, and
// then removes from the store those the ProviderConfig's retention lets go (the same policy as the
// state folder's; the newest is never removed): objectstore.Catalog.Sync.
func (v *Bound) sync(ctx context.Context, cat *objectstore.Catalog, cl *clustersv1alpha1.Cluster, retention backend.Retention) error {
	local, err := v.snapshots(cl.UID)
	if err != nil {
		return err
	}
	source := func(s backend.Snapshot) (string, []byte, error) {
		keys, err := v.keptFor(s)
		if err != nil {
			return "", nil, fmt.Errorf("reading the encryption keys snapshot %s needs: %w", s.Name, err)
		}
		return v.store(Binaries{}).File(s.Cluster, s.Name), keys, nil
	}
	done, err := cat.Sync(ctx, cl.Namespace, cl.UID, local, source, retention, time.Now())
	for _, name := range done.Uploaded {
		v.log.Info("Uploaded a snapshot to the object store, encrypted", "cluster", cl.Namespace+"/"+cl.Name, "snapshot", name)
	}
	return err
}

// keptFor is the JSON of the encryption keys snapshot s needs (encryption.Kept), as kept beside
// the snapshots; nil when the cluster keeps none.
func (b *Backend) keptFor(s backend.Snapshot) ([]byte, error) {
	b.backupMu.Lock()
	defer b.backupMu.Unlock()
	kept, found, err := b.readKept(s.Cluster)
	if err != nil || !found {
		return nil, err
	}
	if needs, ok := kept.Needs[s.Name]; ok {
		kept = encryption.Kept{
			Keys:  slices.DeleteFunc(slices.Clone(kept.Keys), func(k encryption.Key) bool { return !slices.Contains(needs, k.Name) }),
			Needs: map[string][]string{s.Name: needs},
		}
	}
	return json.Marshal(kept)
}

// adoptFetchedKeys adds the keys fetched with a snapshot of the cluster uid to those kept beside
// its snapshots, where a restore reads them (snapshotKeys).
func (b *Backend) adoptFetchedKeys(uid types.UID, data []byte) error {
	var fetched encryption.Kept
	if err := json.Unmarshal(data, &fetched); err != nil {
		return fmt.Errorf("the encryption keys fetched with the snapshot do not read: %w", err)
	}
	b.backupMu.Lock()
	defer b.backupMu.Unlock()
	kept, _, err := b.readKept(uid)
	if err != nil {
		return err
	}
	kept.Merge(fetched)
	return b.writeKept(uid, kept)
}

// Snapshots lists cl's snapshots, newest first: with an object store, those its catalog lists
// and those kept in the state folder only (not uploaded yet). A store that does not answer is
// logged, and the state folder's are listed.
func (v *Bound) Snapshots(ctx context.Context, cl *clustersv1alpha1.Cluster) ([]backend.Snapshot, error) {
	local, err := v.Backend.Snapshots(ctx, cl)
	if err != nil || v.set.objectStore == nil {
		return local, err
	}
	cat, err := v.catalog(ctx)
	var remote []backend.Snapshot
	if err == nil {
		remote, err = cat.List(ctx, cl.Namespace, cl.UID)
	}
	if err != nil {
		v.log.Error(err, "Listing the snapshots in the object store failed; listing those of the state folder", "cluster", cl.Namespace+"/"+cl.Name)
	}
	for _, s := range local {
		if !slices.ContainsFunc(remote, func(r backend.Snapshot) bool { return r.Name == s.Name }) {
			remote = append(remote, s)
		}
	}
	snapshots.Sort(remote)
	return remote, nil
}

// CheckRestore is Backend.CheckRestore, on the snapshot fetched from the object store when the
// state folder lacks it.
func (v *Bound) CheckRestore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) (backend.Snapshot, error) {
	if err := v.fetch(ctx, cl, cl.UID, name); err != nil {
		return backend.Snapshot{}, err
	}
	return v.Backend.CheckRestore(ctx, cl, name)
}

// Restore is Backend.Restore, on the snapshot fetched from the object store when the state
// folder lacks it.
func (v *Bound) Restore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) error {
	if err := v.fetch(ctx, cl, cl.UID, name); err != nil {
		return err
	}
	return v.Backend.Restore(ctx, cl, name)
}

// fetch brings snapshot name of the Cluster with uid, as the Cluster cl may use it (its own, or
// one of its namespace: only cl's namespace is listed), from the object store into the state
// folder when it is not there: decrypted, its SHA-256 checked, its encryption keys added to
// those kept, its record written last. A snapshot the store lacks is left to the local check to
// refuse; one that does not decrypt with the Secret's key is refused.
func (v *Bound) fetch(ctx context.Context, cl *clustersv1alpha1.Cluster, uid types.UID, name string) error {
	st := v.store(Binaries{})
	if v.set.objectStore == nil || !backend.ValidSnapshotName(name) ||
		(exists(st.File(uid, name)) && exists(filepath.Join(st.ClusterDir(uid), name+recordSuffix))) {
		return nil
	}
	cat, err := v.catalog(ctx)
	if err != nil {
		return err
	}
	all, err := cat.List(ctx, cl.Namespace, uid)
	if err != nil && all == nil {
		return backend.Errorf(backend.ReasonBackupUnavailable, "listing the snapshots in the object store: %v", err)
	}
	s, err := snapshots.Find(all, uid, name, cl.Namespace, cl.UID)
	if err != nil {
		return nil // not in the store: the state folder's check says what there is
	}
	keys, err := cat.Download(ctx, s, st.File(uid, name))
	if errors.Is(err, objectstore.ErrWrongKey) {
		return refuse("snapshot %q in the object store does not decrypt with key %s of Secret %s: it was encrypted with another key; put the key it was taken with back into the Secret",
			name, providersv1alpha1.ObjectStoreEncryptionKey, v.set.objectStore.CredentialsSecretRef.Name)
	}
	if err != nil {
		return err
	}
	if keys != nil {
		if err := v.adoptFetchedKeys(uid, keys); err != nil {
			return fmt.Errorf("keeping the encryption keys of snapshot %s fetched from the object store: %w", name, err)
		}
	}
	record, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	v.log.Info("Fetched a snapshot from the object store", "cluster", cl.Namespace+"/"+cl.Name, "snapshot", s.Ref())
	return writeFileAtomic(filepath.Join(st.ClusterDir(uid), name+recordSuffix), record, 0o600)
}
