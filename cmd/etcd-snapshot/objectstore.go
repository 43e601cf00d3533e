package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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

// upload puts snapshot s, just taken into st, into the store, with the other snapshots of its
// Cluster on the claim that the store lacks (an earlier save could not upload them), newest first,
// and then removes from the store the snapshots the retention lets go (never the newest):
// objectstore.Catalog.Sync, as the local backend does. Each goes with the encryption keys in
// keysFile ("" or missing: none): every key kept beside the claim's snapshots when the Job started,
// among them those each of them needs (the backend records what a snapshot needs when its Job
// ends, before the next starts); unlike the local backend's, they are not narrowed to what each
// needs. It sets res's Uploaded, UploadedLate and RemovedFromStore.
func upload(ctx context.Context, cat *objectstore.Catalog, st snapshots.Store, s backend.Snapshot, keysFile string, r backend.Retention, res *Result) error {
	var keys []byte
	if keysFile != "" {
		data, err := os.ReadFile(keysFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("snapshot %s was taken and kept on the claim, but not uploaded to the object store: reading the encryption keys to upload with it: %w", s.Name, err)
		}
		keys = data
	}
	claim, err := st.List(s.Cluster)
	if err != nil {
		fmt.Fprintf(os.Stderr, "listing the snapshots on the claim, to upload those the object store lacks: %v\n", err)
	}
	if !slices.ContainsFunc(claim, func(x backend.Snapshot) bool { return x.Name == s.Name }) {
		claim = append(claim, s) // the folder did not list: the one just taken goes all the same
	}
	for i := range claim {
		claim[i].Namespace = s.Namespace // the claim's records have none: their Cluster's
	}
	source := func(x backend.Snapshot) (string, []byte, error) { return st.File(x.Cluster, x.Name), keys, nil }
	done, err := cat.Sync(ctx, s.Namespace, s.Cluster, claim, source, r, time.Now())
	for _, name := range done.Uploaded {
		if name == s.Name {
			res.Uploaded = true
		} else {
			res.UploadedLate = append(res.UploadedLate, name)
		}
	}
	res.RemovedFromStore = done.Removed
	switch {
	case err == nil:
		return nil
	case !res.Uploaded:
		return fmt.Errorf("snapshot %s was taken and kept on the claim, but not uploaded to the object store: %w", s.Name, err)
	}
	return fmt.Errorf("snapshot %s was uploaded to the object store, and then: %w", s.Name, err)
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
