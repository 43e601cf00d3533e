package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// Encryption at rest (backend/encryption): each cluster's keys and the EncryptionConfiguration its
// API server reads are files of its folder, 0600 (encryption.StateFile, encryption.ConfigFile). A
// cluster made by a release before encryption gets its first key when it is adopted; its API
// server then starts with it (identity reads the Secrets written before), and the health checks
// rewrite every Secret with the key once the API server is Ready. A rotation (the Cluster's
// annotation backend.AnnotationRotateEncryptionKey) puts a new key first, restarts the API
// server, and rewrites every Secret with it; the old keys stay to read older snapshots.
//
// A snapshot keeps a copy of the keys it needs beside it (keys/kept-keys.json in its cluster's
// backups folder, encryption.Kept), stored only wrapped with the key in <state-dir>/key-wrapping.key
// (made once, 0600, never replaced; beside backups/, never in it); a restore unwraps and adopts
// them. The copy records which keys each snapshot needs (those in use when it started and ended,
// and any added meanwhile) and holds those and the keys the running cluster uses; the others are
// removed at each snapshot, at the Cluster's deletion and, for deleted Clusters, at start, and
// with the last snapshot of a deleted Cluster the copy goes. Nothing is removed while a snapshot
// of an earlier release (no record of what it needs), a snapshot record that does not read, or
// data a restore moved aside (replaced/) is there. A copy an earlier release kept in plain text
// (keys/encryption.json, encryption-config.yaml) is read as it is, and removed once the copy is
// next written wrapped.

// ensureEncryption loads the encryption keys of the cluster in folder dir, making its first if it
// has none, and writes its API server's EncryptionConfiguration from them.
func ensureEncryption(dir string) (encryption.State, error) {
	s, found, err := encryption.Load(dir)
	if err != nil {
		return s, err // garbled: new keys would make its Secrets unreadable
	}
	if !found {
		if s, err = encryption.New(time.Now()); err != nil {
			return s, err
		}
	}
	return s, encryption.Save(dir, s)
}

// setRotation records the rotation the Cluster asks for (its annotation's value).
func (in *instance) setRotation(request string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.rotate = request
}

// keepEncrypted, on the health checks' tick, makes the rotation asked for (a new key first: the
// API server restarts with it) and rewrites every Secret with the key that writes once the API
// server serves with it.
func (in *instance) keepEncrypted(ctx context.Context) {
	in.mu.Lock()
	ready, s, request := in.api.Ready, in.enc, in.rotate
	in.mu.Unlock()
	if !ready {
		return
	}
	rotated, err := s.Rotate(request, time.Now())
	if err == nil && rotated {
		if err = encryption.Save(in.dir, s); err == nil {
			in.mu.Lock()
			in.enc, in.encErr = s, ""
			in.mu.Unlock()
			in.logger().Info("Rotating the encryption key: the API server restarts with the new one", "key", s.Writer())
			in.restart(procAPIServer)
			return
		}
	}
	if err == nil && !s.Done() {
		var n int
		start := time.Now()
		if n, err = encryption.Rewrite(ctx, in.adminConfig()); err == nil {
			s.Migrated = s.Writer()
			if err = encryption.Save(in.dir, s); err == nil {
				in.logger().Info("Rewrote every Secret with the encryption key", "key", s.Writer(), "secrets", n, "took", time.Since(start).Round(time.Millisecond).String())
				in.mu.Lock()
				in.enc, in.encErr = s, ""
				in.mu.Unlock()
				in.b.notify(in)
				return
			}
		}
	}
	if err != nil {
		in.mu.Lock()
		changed := in.encErr != err.Error()
		in.encErr = err.Error()
		in.mu.Unlock()
		if changed {
			in.logger().Error(err, "Encryption at rest: the next health check tries again")
			in.b.notify(in)
		}
	}
}

// encryptionStatusLocked is what status.providerStatus says of in's encryption; in.mu is held.
func (in *instance) encryptionStatusLocked() *encryption.Status { return in.enc.Status(in.encErr) }

// keysDir is where the keys of cluster uid are kept beside its snapshots (a folder of its
// backups folder: the snapshot store lists files only).
func (b *Backend) keysDir(uid types.UID) string { return filepath.Join(b.backupDir(uid), "keys") }

// wrappingKeyFile is the key that wraps the keys kept beside the snapshots: a file of
// --state-dir, beside backups/ and never in it, so that whoever copies the backups folder gets no
// key to read the snapshots' Secrets with.
const wrappingKeyFile = "key-wrapping.key"

func (b *Backend) wrappingKeyPath() string { return filepath.Join(b.opts.StateDir, wrappingKeyFile) }

// checkWrappingKeyApart refuses a backups folder that holds the wrapping key (a symbolic link
// that makes backups/ --state-dir itself, or a folder above it): copied with the snapshots, it
// would read their keys.
func (b *Backend) checkWrappingKeyApart() error {
	backups, err := filepath.EvalSymlinks(filepath.Join(b.opts.StateDir, backupsDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	dir, err := filepath.EvalSymlinks(b.opts.StateDir)
	if err != nil {
		return err
	}
	if rel, err := filepath.Rel(backups, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("local backend: the backups folder %s holds %s, the key that wraps the encryption keys kept beside the snapshots (it resolves to %s): "+
			"whoever copies the snapshots would get the key to their Secrets; make %s a folder of its own", filepath.Join(b.opts.StateDir, backupsDir), b.wrappingKeyPath(), backups, filepath.Join(b.opts.StateDir, backupsDir))
	}
	return nil
}

// wrappingKey loads the wrapping key (nil: there is none). With create it makes one when there
// is none, unless a copy beside the snapshots is wrapped already (with the key that is missing: a
// new one could never unwrap it). b.backupMu is held.
func (b *Backend) wrappingKey(create bool) (*encryption.WrappingKey, error) {
	path := b.wrappingKeyPath()
	if create && !exists(path) {
		wrapped, _ := filepath.Glob(filepath.Join(b.opts.StateDir, backupsDir, "*", "keys", encryption.KeptFile))
		if len(wrapped) > 0 {
			id, _ := encryption.WrappedWith(readOrNil(wrapped[0]))
			return nil, backend.Errorf(backend.ReasonStateDamaged, "%s, the key that wraps the encryption keys kept beside the snapshots, is missing, but %d copies are wrapped with it (key %s, e.g. %s): "+
				"no new one is made, which could never unwrap them; put the file back from a backup of --state-dir", path, len(wrapped), id, wrapped[0])
		}
	}
	w, err := encryption.LoadWrappingKeyFile(path, create)
	if err != nil {
		return nil, backend.Errorf(backend.ReasonStateDamaged, "%v", err)
	}
	return w, nil
}

func readOrNil(path string) []byte {
	data, _ := os.ReadFile(path)
	return data
}

// readKept reads the copy of the keys of the cluster uid kept beside its snapshots: the wrapped
// one, and what an earlier release kept there in plain text (both, if both are there: a release
// before this one may have run since). found is false when there is neither. b.backupMu is held.
func (b *Backend) readKept(uid types.UID) (k encryption.Kept, found bool, err error) {
	dir := b.keysDir(uid)
	data, err := os.ReadFile(filepath.Join(dir, encryption.KeptFile))
	switch {
	case err == nil:
		w, err := b.wrappingKey(false)
		if err != nil {
			return k, false, err
		}
		if w == nil {
			id, _ := encryption.WrappedWith(data)
			return k, false, backend.Errorf(backend.ReasonStateDamaged, "the encryption keys kept beside the snapshots in %s are wrapped with key %s, and %s, the key that wraps them, is missing: put it back from a backup of --state-dir",
				dir, id, b.wrappingKeyPath())
		}
		if k, err = w.Unwrap(data, string(uid)); err != nil {
			return k, false, backend.Errorf(backend.ReasonStateDamaged, "the encryption keys kept beside the snapshots in %s do not unwrap: %v; they are left as they are", filepath.Join(dir, encryption.KeptFile), err)
		}
		found = true
	case !errors.Is(err, os.ErrNotExist):
		return k, false, err
	}
	plain, ok, err := encryption.Load(dir)
	if err != nil {
		return k, false, err
	}
	if ok {
		k.Merge(encryption.FromState(plain))
	}
	return k, found || ok, nil
}

// writeKept writes k, the keys of the cluster uid kept beside its snapshots, wrapped, and then
// removes what an earlier release kept there in plain text; with no key left, it removes the
// copy. b.backupMu is held.
func (b *Backend) writeKept(uid types.UID, k encryption.Kept) error {
	dir := b.keysDir(uid)
	plain := []string{filepath.Join(dir, encryption.StateFile), filepath.Join(dir, encryption.ConfigFile)}
	if len(k.Keys) == 0 {
		for _, f := range append(plain, filepath.Join(dir, encryption.KeptFile)) {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		_ = os.Remove(dir)              // empty now, unless someone put something else there
		_ = os.Remove(b.backupDir(uid)) // the same
		return nil
	}
	w, err := b.wrappingKey(true)
	if err != nil {
		return err
	}
	data, err := w.Wrap(k, string(uid))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, encryption.KeptFile), data, 0o600); err != nil {
		return err
	}
	for _, f := range plain { // read into the wrapped copy: gone from beside the snapshots
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// keysHeld reports whether data beside the snapshots of the cluster uid may need any of its keys:
// data a restore moved aside (replaced/), or a snapshot file whose record is gone.
func (b *Backend) keysHeld(uid types.UID) bool {
	dir := b.backupDir(uid)
	if aside, _ := os.ReadDir(filepath.Join(dir, replacedDir)); len(aside) > 0 {
		return true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), snapshotSuffix); ok && !exists(filepath.Join(dir, name+recordSuffix)) {
			return true
		}
	}
	return false
}

// settleKeys brings the copy of the keys of the cluster uid kept beside its snapshots up to date
// (encryption.Kept.Settle) with its keys running (nil: the cluster is gone) and its snapshots
// there, and, with snapshot, records the keys that snapshot needs; it writes the copy wrapped, or
// removes it when no key is left. A record that does not read, or data keysHeld, keeps every key.
// last are the keys of a cluster being deleted (else nil): kept whole while anything there may
// need any key. It returns the names of the keys removed. b.backupMu is held.
func (b *Backend) settleKeys(uid types.UID, running *encryption.State, snapshot string, needs []string, last *encryption.State) ([]string, error) {
	kept, found, err := b.readKept(uid)
	if err != nil {
		return nil, err
	}
	if snapshot != "" && running != nil {
		kept.Record(snapshot, needs, *running)
	}
	all, lerr := b.store(Binaries{}).List(uid)
	names := make([]string, len(all))
	for i, s := range all {
		names[i] = s.Name
	}
	hold := lerr != nil || b.keysHeld(uid)
	if last != nil && (hold || kept.Unrecorded(names)) {
		kept.Merge(encryption.FromState(*last))
	}
	removed := kept.Settle(running, names, hold)
	if !found && len(kept.Keys) == 0 {
		return nil, nil
	}
	return removed, b.writeKept(uid, kept)
}

// snapshotKeys reads the keys a restore of snapshot s needs, kept beside the snapshots of its
// cluster (none: a snapshot of a cluster without encryption, plain text). It is read before the
// snapshot's data: a snapshot removed meanwhile takes its keys only after its files, so a restore
// that reads the data had its keys.
func (b *Backend) snapshotKeys(s backend.Snapshot) (encryption.Kept, error) {
	b.backupMu.Lock()
	defer b.backupMu.Unlock()
	k, _, err := b.readKept(s.Cluster)
	return k, err
}

// adoptSnapshotKeys adds the keys source (snapshotKeys) to the keys of the cluster in folder dir,
// and marks every Secret to rewrite: the restored Secrets are written with the snapshot's keys,
// or in plain text.
func adoptSnapshotKeys(dir string, source encryption.Kept) error {
	target, err := ensureEncryption(dir)
	if err != nil {
		return err
	}
	target.Adopt(source.Keys)
	return encryption.Save(dir, target)
}

// settleGoneKeys settles, at start, the keys kept beside the snapshots of every cluster whose
// Cluster is gone (byUID lacks it): those no remaining snapshot needs go, and the copy with the
// last of them. A copy that cannot be settled stays as it is.
func (b *Backend) settleGoneKeys(byUID map[types.UID]*clustersv1alpha1.Cluster) {
	b.backupMu.Lock()
	defer b.backupMu.Unlock()
	entries, _ := os.ReadDir(filepath.Join(b.opts.StateDir, backupsDir))
	for _, e := range entries {
		uid := types.UID(e.Name())
		if !e.IsDir() || uuid.Validate(e.Name()) != nil || byUID[uid] != nil || !exists(b.keysDir(uid)) {
			continue
		}
		removed, err := b.settleKeys(uid, nil, "", nil, nil)
		if err != nil {
			b.log.Error(err, "Settling the encryption keys kept beside the snapshots of a deleted Cluster failed; they stay as they are", "uid", uid)
		} else if len(removed) > 0 {
			b.log.Info("Removed encryption keys no snapshot of a deleted Cluster needs", "uid", uid, "keys", removed)
		}
	}
}

// settleDeletedKeys settles the keys kept beside the snapshots of the cluster uid, whose Cluster
// is deleted, before its folder (with every key it had) goes: those no snapshot needs go, and the
// copy with the last of them. Data a restore moved aside beside the snapshots (keysHeld), or a
// snapshot whose needs are not recorded, may need any key the cluster had: then every one is
// kept, and with data moved aside the folder stays until they are (an error). Otherwise a
// failure is only logged: what each snapshot needs was kept when it was taken.
func (b *Backend) settleDeletedKeys(uid types.UID) error {
	b.backupMu.Lock()
	defer b.backupMu.Unlock()
	held := b.keysHeld(uid)
	last, found, err := encryption.Load(b.dir(uid))
	if err == nil && found {
		_, err = b.settleKeys(uid, nil, "", nil, &last)
	} else if err == nil {
		_, err = b.settleKeys(uid, nil, "", nil, nil)
	}
	switch {
	case err != nil && held:
		return fmt.Errorf("keeping the cluster's encryption keys beside the data moved aside in %s before its folder goes (the folder stays): %w",
			filepath.Join(b.backupDir(uid), replacedDir), err)
	case err != nil:
		b.log.Error(err, "Settling the encryption keys beside the snapshots of a deleted Cluster failed; they stay as they are", "uid", uid)
	}
	return nil
}
