package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/objectstore"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// storeFlags are the flags of save and serve that name the ProviderConfig's object store
// (spec.backup.objectStore): with --store-endpoint, save uploads the snapshot it took, encrypted,
// and serve fetches a snapshot the folder lacks from it. The credentials are files in
// --store-credentials (the Secret the backend copies and mounts: accessKeyID, secretAccessKey,
// encryptionKey); they are never written out.
type storeFlags struct {
	endpoint, bucket, prefix, region, caFile, credentials, namespace string
	insecure, pathStyle                                              bool
}

func (f *storeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.endpoint, "store-endpoint", "", "the object store's host[:port] or URL; empty: no object store")
	fs.StringVar(&f.bucket, "store-bucket", "", "the object store's bucket")
	fs.StringVar(&f.prefix, "store-prefix", "", "the prefix of every key in the bucket")
	fs.StringVar(&f.region, "store-region", "", "the bucket's region")
	fs.StringVar(&f.caFile, "store-ca-file", "", "a PEM file of the CAs trusted for the store's certificate")
	fs.StringVar(&f.credentials, "store-credentials", "/store", "the folder with files accessKeyID, secretAccessKey and encryptionKey")
	fs.StringVar(&f.namespace, "namespace", "", "the Cluster's namespace (the store's layout: <prefix>/<namespace>/<uid>/)")
	fs.BoolVar(&f.insecure, "store-insecure", false, "speak plain http to the store (tests only)")
	fs.BoolVar(&f.pathStyle, "store-path-style", false, "put the bucket in the path of requests")
}

// catalog is the object store the flags name; nil without --store-endpoint.
func (f *storeFlags) catalog() (*objectstore.Catalog, error) {
	if f.endpoint == "" {
		return nil, nil
	}
	if f.namespace == "" {
		return nil, errors.New("--namespace is required with --store-endpoint")
	}
	read := func(name string) (string, error) {
		data, err := os.ReadFile(filepath.Join(f.credentials, name))
		if err != nil {
			return "", fmt.Errorf("the object store's credentials: %w", err)
		}
		return strings.TrimSpace(string(data)), nil
	}
	var vals [3]string
	for i, k := range []string{providersv1alpha1.ObjectStoreAccessKeyID, providersv1alpha1.ObjectStoreSecretAccessKey, providersv1alpha1.ObjectStoreEncryptionKey} {
		v, err := read(k)
		if err != nil {
			return nil, err
		}
		vals[i] = v
	}
	key, err := objectstore.ParseKey(vals[2])
	if err != nil {
		return nil, fmt.Errorf("key %s of the object store's credentials: %w", providersv1alpha1.ObjectStoreEncryptionKey, err)
	}
	var ca []byte
	if f.caFile != "" {
		if ca, err = os.ReadFile(f.caFile); err != nil {
			return nil, err
		}
	}
	st, err := objectstore.New(objectstore.Config{
		Endpoint: f.endpoint, Bucket: f.bucket, Prefix: f.prefix, Region: f.region,
		Insecure: f.insecure, CABundle: ca, PathStyle: f.pathStyle,
		AccessKeyID: vals[0], SecretAccessKey: vals[1],
	})
	if err != nil {
		return nil, err
	}
	return &objectstore.Catalog{Store: st, Key: key}, nil
}

// upload puts snapshot s (file), with the encryption keys in keysFile ("" or missing: none),
// into the store, and then removes from the store the snapshots of its Cluster the retention lets
// go (never the newest). It returns whether s was uploaded and the names removed from the store.
func upload(ctx context.Context, cat *objectstore.Catalog, s backend.Snapshot, file, keysFile string, r backend.Retention) (bool, []string, error) {
	var keys []byte
	if keysFile != "" {
		data, err := os.ReadFile(keysFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, nil, fmt.Errorf("reading the encryption keys to upload with the snapshot: %w", err)
		}
		keys = data
	}
	if err := cat.Upload(ctx, s, file, keys); err != nil {
		return false, nil, fmt.Errorf("snapshot %s was taken and kept on the claim, but not uploaded to the object store: %w", s.Name, err)
	}
	remote, err := cat.List(ctx, s.Namespace, s.Cluster)
	if err != nil && remote == nil {
		return true, nil, fmt.Errorf("listing the object store after the upload of %s: %w", s.Name, err)
	}
	var removed []string
	var errs []error
	for _, old := range r.Prune(remote, time.Now()) {
		if err := cat.Remove(ctx, old); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, old.Name)
	}
	return true, removed, errors.Join(errs...)
}

// fetchFromStore brings snapshot name of the Cluster uid from the store into st, decrypted and
// its SHA-256 checked, with its record written last, when st lacks it. A snapshot the store lacks
// is left to st.Check to refuse.
func fetchFromStore(ctx context.Context, cat *objectstore.Catalog, st snapshots.Store, namespace string, uid types.UID, name string) error {
	record := filepath.Join(st.ClusterDir(uid), name+snapshots.RecordSuffix)
	if cat == nil || !backend.ValidSnapshotName(name) || (exists(record) && exists(st.File(uid, name))) {
		return nil
	}
	all, err := cat.List(ctx, namespace, uid)
	if err != nil && all == nil {
		return fmt.Errorf("listing the snapshots in the object store: %w", err)
	}
	s, err := snapshots.Find(all, uid, name, namespace, uid)
	if err != nil {
		return nil
	}
	if _, err := cat.Download(ctx, s, st.File(uid, name)); err != nil {
		if errors.Is(err, objectstore.ErrWrongKey) {
			return snapshots.Refuse("snapshot %q in the object store does not decrypt with key %s of the credentials Secret: put the key it was taken with back into the Secret", name, providersv1alpha1.ObjectStoreEncryptionKey)
		}
		return err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	fmt.Printf("fetched snapshot %s of %s from the object store\n", s.Name, s.Cluster)
	return os.WriteFile(record, data, 0o600)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
