package objectstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// Source says where the plaintext of snapshot s, kept beside its cluster, is and which encryption
// keys go with it (nil: none).
type Source func(s backend.Snapshot) (file string, keys []byte, err error)

// Synced is what Sync did: the names of the snapshots it uploaded, newest first, and of those it
// removed from the store.
type Synced struct {
	Uploaded, Removed []string
}

// Sync brings the store's snapshots of the Cluster with uid in namespace up to date with local,
// those kept beside the cluster (a state folder, a claim: a snapshot there has a record only once
// it was checked): it uploads, newest first, those of local the store lacks, from what source
// names, and then removes from the store those the retention r lets go at now (never the newest:
// backend.Retention), over the store's and the uploaded ones together. A snapshot r would remove
// at once is not uploaded; one of local of another Cluster or namespace (a record from before
// namespaces were recorded) stays local. An upload that fails ends Sync with what it uploaded
// until then and nothing removed: the next Sync tries again.
func (c Catalog) Sync(ctx context.Context, namespace string, uid types.UID, local []backend.Snapshot, source Source, r backend.Retention, now time.Time) (Synced, error) {
	var done Synced
	remote, err := c.List(ctx, namespace, uid)
	if err != nil && remote == nil {
		return done, err
	}
	stored := func(s backend.Snapshot) bool { return named(remote, s.Name) }
	missing := slices.DeleteFunc(slices.Clone(local), func(s backend.Snapshot) bool {
		return s.Namespace != namespace || s.Cluster != uid || stored(s)
	})
	snapshots.Sort(missing)
	gone := r.Prune(append(slices.Clone(remote), missing...), now)
	for _, s := range missing {
		if named(gone, s.Name) {
			continue
		}
		if err := c.uploadFrom(ctx, s, source); err != nil {
			return done, fmt.Errorf("uploading snapshot %s (it is kept where it was taken; the next sync tries again): %w", s.Name, err)
		}
		done.Uploaded = append(done.Uploaded, s.Name)
	}
	var errs []error
	for _, s := range gone {
		if !stored(s) {
			continue // never uploaded
		}
		if err := c.Remove(ctx, s); err != nil {
			errs = append(errs, err)
			continue
		}
		done.Removed = append(done.Removed, s.Name)
	}
	if len(errs) > 0 {
		return done, fmt.Errorf("removing from the object store the snapshots the retention lets go (the next sync tries again): %w", errors.Join(errs...))
	}
	return done, nil
}

// uploadFrom uploads snapshot s from what source names.
func (c Catalog) uploadFrom(ctx context.Context, s backend.Snapshot, source Source) error {
	file, keys, err := source(s)
	if err != nil {
		return err
	}
	return c.Upload(ctx, s, file, keys)
}

// named reports whether all holds a snapshot called name.
func named(all []backend.Snapshot, name string) bool {
	return slices.ContainsFunc(all, func(s backend.Snapshot) bool { return s.Name == name })
}
