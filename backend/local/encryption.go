package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// Encryption at rest (backend/encryption): each cluster's keys and the EncryptionConfiguration its
// API server reads are files of its folder, 0600 (encryption.StateFile, encryption.ConfigFile). A
// cluster made by a release before encryption gets its first key when it is adopted; its API
// server then starts with it (identity reads the Secrets written before), and the health checks
// rewrite every Secret with the key once the API server is Ready. A rotation (the Cluster's
// annotation backend.AnnotationRotateEncryptionKey) puts a new key first, restarts the API
// server, and rewrites every Secret with it; the old keys stay to read older snapshots. A snapshot
// keeps a copy of the keys beside it (keys/ in its cluster's backups folder); a restore adopts them.

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
			in.log.Info("Rotating the encryption key: the API server restarts with the new one", "key", s.Writer())
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
				in.log.Info("Rewrote every Secret with the encryption key", "key", s.Writer(), "secrets", n, "took", time.Since(start).Round(time.Millisecond).String())
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
			in.log.Error(err, "Encryption at rest: the next health check tries again")
			in.b.notify(in)
		}
	}
}

// encryptionStatusLocked is what status.providerStatus says of in's encryption; in.mu is held.
func (in *instance) encryptionStatusLocked() *encryption.Status { return in.enc.Status(in.encErr) }

// keysDir is where the keys of cluster uid are kept beside its snapshots (a folder of its
// backups folder: the snapshot store lists files only).
func (b *Backend) keysDir(uid types.UID) string { return filepath.Join(b.backupDir(uid), "keys") }

// keepKeysWithSnapshot copies the keys of the cluster in dir beside its snapshots (keysDir): a
// snapshot's Secrets are written with them.
func (b *Backend) keepKeysWithSnapshot(in *instance) error {
	in.mu.Lock()
	s, uid := in.enc, in.meta.UID
	in.mu.Unlock()
	if err := os.MkdirAll(b.keysDir(uid), 0o700); err != nil {
		return err
	}
	if err := encryption.Save(b.keysDir(uid), s); err != nil {
		return fmt.Errorf("keeping the encryption keys beside the snapshots: %w", err)
	}
	return nil
}

// adoptSnapshotKeys adds to the keys of the cluster in folder dir those of the snapshot s's
// cluster (kept beside its snapshots), and marks every Secret to rewrite: the restored Secrets are
// written with the snapshot's keys, or in plain text.
func (b *Backend) adoptSnapshotKeys(dir string, s backend.Snapshot) error {
	target, err := ensureEncryption(dir)
	if err != nil {
		return err
	}
	source, found, err := encryption.Load(b.keysDir(s.Cluster))
	if err != nil {
		return err
	}
	if !found {
		source = encryption.State{} // a snapshot of a cluster without encryption: plain text
	}
	target.Adopt(source.Keys)
	return encryption.Save(dir, target)
}
