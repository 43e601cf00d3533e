package objectstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// The suffixes of a snapshot's objects.
const (
	SealedSuffix = ".db.enc"
	KeysSuffix   = ".keys.enc"
	RecordSuffix = ".json"
)

// Catalog is the snapshots of the Clusters in a Store, sealed with Key.
type Catalog struct {
	Store *Store
	Key   Key
	// Records, when not nil, keeps the records read: they never change once written, so a
	// listing reads only the new ones.
	Records *Records
}

// Records caches snapshot records by key; safe for concurrent use.
type Records struct {
	mu   sync.Mutex
	byID map[string]backend.Snapshot
}

func (r *Records) get(key string) (backend.Snapshot, bool) {
	if r == nil {
		return backend.Snapshot{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.byID[key]
	return s, ok
}

func (r *Records) put(key string, s backend.Snapshot) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID == nil {
		r.byID = map[string]backend.Snapshot{}
	}
	r.byID[key] = s
}

// dir is the folder of the snapshots of the Cluster with uid in namespace.
func dir(namespace string, uid types.UID) string { return namespace + "/" + string(uid) + "/" }

// keyOf is the key of the object of snapshot s with suffix.
func keyOf(s backend.Snapshot, suffix string) string {
	return dir(s.Namespace, s.Cluster) + s.Name + suffix
}

// Upload seals the snapshot file (the plaintext whose SHA-256 s names) and, when keys is not
// nil, the keys its Secrets are encrypted with, and writes them to the store; the record last,
// so that a snapshot whose upload was cut short is not listed. s.Namespace must be set.
func (c Catalog) Upload(ctx context.Context, s backend.Snapshot, file string, keys []byte) error {
	if s.Namespace == "" || !backend.ValidSnapshotName(s.Name) {
		return fmt.Errorf("snapshot %q of %s has no namespace or no valid name: not uploaded", s.Name, s.Cluster)
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := c.put(ctx, keyOf(s, SealedSuffix), f); err != nil {
		return err
	}
	if keys != nil {
		if err := c.put(ctx, keyOf(s, KeysSuffix), bytes.NewReader(keys)); err != nil {
			return err
		}
	}
	record, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return c.Store.Put(ctx, keyOf(s, RecordSuffix), bytes.NewReader(record), int64(len(record)), "application/json")
}

// put seals r into key, streamed: what is sealed is written as it is read.
func (c Catalog) put(ctx context.Context, key string, r io.Reader) error {
	pr, pw := io.Pipe()
	go func() {
		w, err := Seal(pw, c.Key)
		if err == nil {
			_, err = io.Copy(w, r)
		}
		if err == nil {
			err = w.Close()
		}
		pw.CloseWithError(err)
	}()
	err := c.Store.Put(ctx, key, pr, -1, "application/octet-stream")
	pr.CloseWithError(errors.New("the upload ended")) // unblocks the sealing goroutine
	return err
}

// List lists the snapshots of the Cluster with uid in namespace, newest first: the records under
// <namespace>/<uid>/ whose sealed snapshot is there too. A record that does not read is skipped
// and named in the error, with the others listed; the list is nil only when the store did not
// list (an empty folder is an empty list).
func (c Catalog) List(ctx context.Context, namespace string, uid types.UID) ([]backend.Snapshot, error) {
	objs, err := c.Store.List(ctx, dir(namespace, uid))
	if err != nil {
		return nil, err
	}
	sealed := map[string]bool{}
	for _, o := range objs {
		if name, ok := strings.CutSuffix(path.Base(o.Key), SealedSuffix); ok {
			sealed[name] = true
		}
	}
	out := []backend.Snapshot{}
	var errs []error
	for _, o := range objs {
		name, ok := strings.CutSuffix(path.Base(o.Key), RecordSuffix)
		if !ok || !sealed[name] || !backend.ValidSnapshotName(name) {
			continue
		}
		s, err := c.record(ctx, o.Key)
		if err == nil && (s.Name != name || s.Cluster != uid || s.Namespace != namespace) {
			err = fmt.Errorf("%s records snapshot %s/%s of namespace %q: not where it is", o.Key, s.Cluster, s.Name, s.Namespace)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("skipping a snapshot record in the object store that does not read: %w", err))
			continue
		}
		out = append(out, s)
	}
	snapshots.Sort(out)
	return out, errors.Join(errs...)
}

func (c Catalog) record(ctx context.Context, key string) (backend.Snapshot, error) {
	s, ok := c.Records.get(key)
	if ok {
		return s, nil
	}
	r, err := c.Store.Get(ctx, key)
	if err != nil {
		return s, err
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, 1<<20))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", key, err)
	}
	c.Records.put(key, s)
	return s, nil
}

// Download fetches snapshot s, decrypts it into file (through file+".part", so that file exists
// only complete) and checks that its SHA-256 is the one recorded; it returns the keys its Secrets
// are encrypted with (nil when none were uploaded). A snapshot sealed with another key is
// ErrWrongKey; one that does not decrypt whole, or whose plaintext differs from the record, is
// refused (snapshots.Refuse); either way no file is left.
func (c Catalog) Download(ctx context.Context, s backend.Snapshot, file string) ([]byte, error) {
	keys, err := c.openAll(ctx, s, keyOf(s, KeysSuffix))
	if errors.Is(err, ErrNotFound) {
		keys, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	part := file + ".part"
	defer os.Remove(part) // left only by a failure
	if err := c.openInto(ctx, s, keyOf(s, SealedSuffix), part); err != nil {
		return nil, err
	}
	return keys, os.Rename(part, file)
}

// openAll reads and decrypts a small object of s.
// Keys are the encryption keys uploaded with snapshot s, decrypted; nil when none were.
func (c Catalog) Keys(ctx context.Context, s backend.Snapshot) ([]byte, error) {
	keys, err := c.openAll(ctx, s, keyOf(s, KeysSuffix))
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return keys, err
}

func (c Catalog) openAll(ctx context.Context, s backend.Snapshot, key string) ([]byte, error) {
	r, err := c.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	plain, err := Open(r, c.Key)
	if errors.Is(err, ErrWrongKey) {
		return nil, fmt.Errorf("%s of snapshot %q in the object store: %w", path.Base(key), s.Name, err)
	}
	if err != nil {
		return nil, snapshots.Refuse("%s of snapshot %q in the object store: %v", path.Base(key), s.Name, err)
	}
	data, err := io.ReadAll(plain)
	if err != nil {
		return nil, snapshots.Refuse("%s of snapshot %q in the object store does not decrypt: %v", path.Base(key), s.Name, err)
	}
	return data, nil
}

// openInto decrypts the sealed snapshot key into file, 0600, and checks its SHA-256.
func (c Catalog) openInto(ctx context.Context, s backend.Snapshot, key, file string) error {
	r, err := c.Store.Get(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	plain, err := Open(r, c.Key)
	if errors.Is(err, ErrWrongKey) {
		return fmt.Errorf("snapshot %q in the object store: %w", s.Name, err)
	}
	if err != nil {
		return snapshots.Refuse("snapshot %q in the object store: %v", s.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), plain)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	var pathErr *os.PathError
	switch sum := hex.EncodeToString(h.Sum(nil)); {
	case errors.As(err, &pathErr):
		return err
	case err != nil:
		return snapshots.Refuse("snapshot %q in the object store does not decrypt whole (%v): it was changed or cut short; restore another snapshot", s.Name, err)
	case sum != s.SHA256:
		return snapshots.Refuse("snapshot %q in the object store is damaged: the SHA-256 of what it decrypts to is %s, not %s as when it was taken; restore another snapshot", s.Name, sum, s.SHA256)
	}
	return nil
}

// Remove removes snapshot s from the store: the record first, so that it is never half-listed.
func (c Catalog) Remove(ctx context.Context, s backend.Snapshot) error {
	var errs []error
	for _, suffix := range []string{RecordSuffix, SealedSuffix, KeysSuffix} {
		if err := c.Store.Delete(ctx, keyOf(s, suffix)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
