package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// Backups of a cluster live in <state-dir>/backups/<Cluster UID>/, beside the cluster folders and
// never inside one: deleting a Cluster removes its folder and keeps its snapshots. Each snapshot
// is <name>.db (what etcd streamed, with its SHA-256 trailer) and <name>.json (backend.Snapshot,
// written last: a snapshot without it is incomplete and ignored). Folders are 0700 and files 0600:
// a snapshot holds every Secret of its cluster. The etcd data a restore replaces is moved to
// replaced/<time>/ there.
const (
	backupsDir     = "backups"
	replacedDir    = "replaced"
	snapshotSuffix = snapshots.SnapshotSuffix
	recordSuffix   = snapshots.RecordSuffix
	// etcdRestoring is where a restore writes the snapshot's data before it becomes etcdDataDir.
	etcdRestoring = etcdDataDir + ".restoring"
	// snapshotTimeout bounds taking and checking one snapshot.
	snapshotTimeout = snapshots.Timeout
	// snapshotNameLayout names snapshots by the UTC second they were taken.
	snapshotNameLayout = snapshots.NameLayout
)

var _ backend.Backups = &Backend{}

// backupDir is the folder of the snapshots of the cluster with uid.
func (b *Backend) backupDir(uid types.UID) string {
	return filepath.Join(b.opts.StateDir, backupsDir, string(uid))
}

// Snapshot takes a snapshot of cl's etcd (etcdctl snapshot save, over its unix socket), checks it
// (etcdutl snapshot status), records it, and removes the snapshots of cl that retention removes;
// on a full filesystem it makes room first (snapshots.Store.Save).
func (b *Backend) Snapshot(ctx context.Context, cl *clustersv1alpha1.Cluster, retention backend.Retention) (backend.Snapshot, error) {
	b.mu.Lock()
	in := b.instances[cl.UID]
	busy := b.upgrades[cl.UID] != nil || b.restores[cl.UID] != nil
	b.mu.Unlock()
	if in == nil || busy {
		return backend.Snapshot{}, backend.Errorf(backend.ReasonBackupUnavailable, "the cluster does not run (or it is upgraded or restored): no snapshot now; the next reconcile tries again")
	}
	if err := in.bins.backupTools(); err != nil {
		return backend.Snapshot{}, err
	}
	// A hibernated cluster's etcd is stopped: it is woken (its data may have changed since its
	// newest snapshot; the Cluster reconciler asks for none while nothing changed), and not
	// hibernated while the snapshot is taken.
	in.holds.Add(1)
	defer in.holds.Add(-1)
	if err := b.wakeFor(ctx, in); err != nil {
		return backend.Snapshot{}, backend.Errorf(backend.ReasonBackupUnavailable, "waking the hibernated cluster for the snapshot: %v", err)
	}
	b.backupMu.Lock()
	defer b.backupMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()

	in.mu.Lock()
	running, before := in.meta.Version, in.enc
	in.mu.Unlock()
	// The keys the snapshot's Secrets are written with are beside it before it is.
	if _, err := b.settleKeys(cl.UID, &before, "", nil, nil); err != nil {
		return backend.Snapshot{}, fmt.Errorf("keeping the encryption keys beside the snapshots (no snapshot taken): %w", err)
	}
	logf := func(format string, args ...any) { in.logger().Info(fmt.Sprintf(format, args...)) }
	saved, err := b.store(in.bins).Save(ctx, retention, cl.UID, cl.Namespace, running, in.dir, logf, "--endpoints=unix://"+etcdSocket)
	if err != nil {
		return backend.Snapshot{}, err
	}
	s := saved.Snapshot
	s.RemovedForSpace = saved.RemovedForSpace
	in.logger().Info("Took a snapshot of etcd", "snapshot", s.Name, "bytes", s.Size, "revision", s.Revision, "keys", s.Keys, "removed", saved.Removed)
	in.mu.Lock()
	after := in.enc // a rotation may have come meanwhile
	in.mu.Unlock()
	removed, err := b.settleKeys(cl.UID, &after, s.Name, before.Mark().Needs(after), nil)
	switch {
	case err != nil:
		in.logger().Error(err, "Recording the encryption keys the snapshot needs failed: until it is recorded, no kept key is removed", "snapshot", s.Name)
	case len(removed) > 0:
		in.logger().Info("Removed encryption keys no snapshot needs from beside the snapshots", "keys", removed)
	}
	return s, nil
}

// store is the snapshots of the local clusters, taken and checked with bins' tools.
func (b *Backend) store(bins Binaries) snapshots.Store {
	return snapshots.Store{Dir: filepath.Join(b.opts.StateDir, backupsDir), Etcdctl: bins.Etcdctl(), Etcdutl: bins.Etcdutl()}
}

// Snapshots lists cl's snapshots, newest first.
func (b *Backend) Snapshots(_ context.Context, cl *clustersv1alpha1.Cluster) ([]backend.Snapshot, error) {
	return b.snapshots(cl.UID)
}

func (b *Backend) snapshots(uid types.UID) ([]backend.Snapshot, error) {
	all, err := b.store(Binaries{}).List(uid)
	if err != nil && all != nil {
		b.log.Error(err, "Some snapshot records do not read", "folder", b.backupDir(uid))
		err = nil
	}
	return all, err
}

// CheckRestore checks snapshot name of cl: it exists, it is cl's, its file is the one taken, and
// etcdutl reads it. Nothing changes.
func (b *Backend) CheckRestore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) (backend.Snapshot, error) {
	b.mu.Lock()
	in := b.instances[cl.UID]
	b.mu.Unlock()
	if in == nil {
		return backend.Snapshot{}, backend.Errorf(backend.ReasonBackupUnavailable, "the cluster does not run here yet: a restore waits until it does")
	}
	s, err := b.checkSnapshot(ctx, in.bins, cl.UID, name, cl)
	if err != nil {
		return s, err
	}
	if s.Cluster != cl.UID {
		return s, refuse("snapshot %q is of the Cluster with UID %s, not of this one (%s): a snapshot is restored in place only into its own Cluster; to start a new Cluster from it, create one with annotation %s: %s",
			name, s.Cluster, cl.UID, backend.AnnotationRestoreFrom, s.Ref())
	}
	in.mu.Lock()
	running := in.meta.Version
	in.mu.Unlock()
	return s, versionFits(s, running)
}

// checkSnapshot finds snapshot name among the snapshots of the cluster with uid, for Cluster cl
// (one of another namespace than cl's is not found: snapshots.Find), and checks its file against
// its record and with etcdutl.
func (b *Backend) checkSnapshot(ctx context.Context, bins Binaries, uid types.UID, name string, cl *clustersv1alpha1.Cluster) (backend.Snapshot, error) {
	if !backend.ValidSnapshotName(name) {
		return backend.Snapshot{}, refuse("%q is not a snapshot name (like 20261125T213000Z); the names are in status.providerStatus.backups", name)
	}
	if err := bins.backupTools(); err != nil {
		return backend.Snapshot{}, err
	}
	all, err := b.snapshots(uid)
	if err != nil {
		return backend.Snapshot{}, err
	}
	if _, err := snapshots.Find(all, uid, name, cl.Namespace, cl.UID); err != nil {
		return backend.Snapshot{}, err
	}
	return b.store(bins).Check(ctx, uid, name)
}

// versionFits is snapshots.VersionFits.
func versionFits(s backend.Snapshot, running string) error { return snapshots.VersionFits(s, running) }

// Restore checks snapshot name of cl and starts the restore: the cluster's processes stop, the
// snapshot is restored into a new etcd data folder, the old one is moved aside, and the cluster
// starts again in its folder, on its ports, with its CA and certificates.
func (b *Backend) Restore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) error {
	s, err := b.CheckRestore(ctx, cl, name)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	in := b.instances[cl.UID]
	switch {
	case in == nil || b.deleting[cl.UID]:
		return backend.Errorf(backend.ReasonBackupUnavailable, "the cluster does not run here: no restore now")
	case b.restores[cl.UID] != nil:
		return nil // under way
	case b.upgrades[cl.UID] != nil:
		return backend.Errorf(backend.ReasonBackupUnavailable, "the cluster is being upgraded: the restore waits until it runs its new version")
	}
	in.mu.Lock()
	m := in.meta
	in.mu.Unlock()
	r := &restore{snapshot: s, old: in, version: m.Version}
	b.restores[cl.UID] = r
	go b.restore(r, in.dir, in.bins, m)
	return nil
}

// restoreNewLocked starts making the cluster of cl, not made yet, from a snapshot: the one its
// annotation AnnotationRestoreFrom names, or m.Restoring when a restore of it was interrupted.
// A snapshot that does not check is refused and nothing is made.
func (b *Backend) restoreNewLocked(ctx context.Context, cl *clustersv1alpha1.Cluster, dir string, m meta) (backend.State, error) {
	bins, ok := b.binaries(m.Version)
	if !ok {
		return backend.State{}, backend.Errorf(backend.ReasonVersionNotSupported,
			"the cluster runs Kubernetes %s, but no --local-binaries folder serves it (served: %v); add a folder with that version", m.Version, b.Versions())
	}
	var s backend.Snapshot
	if m.Restoring != nil {
		s = *m.Restoring
	} else {
		uid, name, err := backend.ParseSnapshotRef(cl.Annotations[backend.AnnotationRestoreFrom])
		if err != nil {
			return backend.State{}, refuse("%v", err)
		}
		if s, err = b.checkSnapshot(ctx, bins, uid, name, cl); err != nil {
			return backend.State{}, err
		}
		if err := versionFits(s, m.Version); err != nil {
			return backend.State{}, err
		}
	}
	r := &restore{snapshot: s, version: m.Version}
	b.restores[cl.UID] = r
	go b.restore(r, dir, bins, m)
	return b.restoreStateLocked(cl.UID, nil, r), nil
}

// restore is a cluster whose etcd data is being replaced by a snapshot's.
type restore struct {
	snapshot backend.Snapshot
	// old is the instance that ran before (nil for a cluster made from the snapshot), until it
	// stopped and the new one was started.
	old *instance
	// version is the Kubernetes version the cluster runs.
	version string
	// started is set once the cluster was started on the snapshot's data.
	started bool
}

// restore restores r's snapshot into the folder dir of cluster m (stopping r.old first, if it
// runs) and starts the cluster there, on its ports, with its CA and certificates. A Delete or a
// stop of the backend meanwhile wins. A failure in place leaves the data as it was and starts the
// cluster on it; a failure for a new cluster removes its folder, and Ensure reports the error.
func (b *Backend) restore(r *restore, dir string, bins Binaries, m meta) {
	log := b.log.WithValues("cluster", m.Namespace+"/"+m.Name, "uid", m.UID)
	log.Info("Restoring etcd from a snapshot", "snapshot", r.snapshot.Name, "of", r.snapshot.Cluster)
	if r.old != nil {
		r.old.stop(false)
		r.old.mu.Lock()
		m = r.old.meta
		r.old.mu.Unlock()
		m.Hibernated = nil // a restore of a hibernated cluster wakes it on the snapshot's data
	}
	now := time.Now().UTC().Truncate(time.Second)
	m.Restoring = &r.snapshot
	aside, err := b.restoreData(dir, bins, &m, now)
	b.mu.Lock()
	defer b.mu.Unlock()
	defer b.notifyRef(m)
	if b.restores[m.UID] != r || !b.started || b.instances[m.UID] != r.old {
		if b.restores[m.UID] == r {
			delete(b.restores, m.UID)
		} else if b.started {
			// Deleted meanwhile (Delete forgot the restore): what the restore wrote after Delete
			// removed the folder goes too; the Cluster is gone, and UIDs are never reused.
			os.RemoveAll(dir)
		}
		return // deleted, or the backend stopped: the next start finishes what the folder holds
	}
	if r.old != nil {
		delete(b.instances, m.UID)
		b.ports.release(m.Ports) // and kept again at once: the endpoint stays
	}
	switch {
	case err != nil && r.old == nil:
		delete(b.restores, m.UID)
		log.Error(err, "Making the cluster from a snapshot failed; the next reconcile tries again", "snapshot", r.snapshot.Ref())
		if !exists(filepath.Join(dir, etcdDataDir)) {
			os.RemoveAll(dir) // nothing of the user's in it yet
		}
		b.restoreErrs[m.UID] = fmt.Errorf("making the cluster from snapshot %s failed: %w", r.snapshot.Ref(), err)
		b.freedLocked() // its place, until its next Ensure
		return
	case err != nil:
		log.Error(err, "Restoring the snapshot failed; the cluster starts again with its data as it was", "snapshot", r.snapshot.Name)
		m.Restoring = nil
		m.Restored = &backend.Restored{Snapshot: r.snapshot, At: now, Failed: fmt.Sprintf(
			"restoring snapshot %s failed, and the cluster runs with its data as it was: %v", r.snapshot.Name, err)}
	default:
		m.Restored = &backend.Restored{Snapshot: r.snapshot, At: now, MovedAside: aside}
		log.Info("Restored etcd from a snapshot; starting the cluster", "snapshot", r.snapshot.Name, "movedAside", aside)
	}
	r.old, r.started = nil, true
	if _, err := b.runLocked(dir, m); err != nil {
		delete(b.restores, m.UID) // the next Ensure starts the cluster from its record
		log.Error(err, "Starting the cluster after a restore failed; the next reconcile tries again")
		b.freedLocked()
	}
}

// restoreData writes the snapshot m.Restoring into dir's etcd data folder: etcdutl restores it
// into etcdRestoring (through a ".part" folder, so that etcdRestoring exists only complete), the
// current data folder is moved to the backups' replaced/<now>/, and etcdRestoring takes its
// place. m.Restoring is recorded first, so that a start after a crash finishes a restore whose
// data folder was already moved (finishRestore). It returns where the old data went ("" if there
// was none).
func (b *Backend) restoreData(dir string, bins Binaries, m *meta, now time.Time) (string, error) {
	s := m.Restoring
	// Read before the snapshot's data (snapshotKeys): without them, nothing changes.
	keys, err := b.snapshotKeys(*s)
	if err != nil {
		return "", fmt.Errorf("reading the snapshot's encryption keys (nothing changed): %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := writeMeta(dir, *m); err != nil {
		return "", err
	}
	// Adopted before the data is restored: a start after a crash (finishRestore) never runs the
	// restored data without its keys. Should the restore fail, the cluster only reads with more.
	if err := adoptSnapshotKeys(dir, keys); err != nil {
		return "", fmt.Errorf("adding the snapshot's encryption keys: %w", err)
	}
	staging := filepath.Join(dir, etcdRestoring)
	for _, d := range []string{staging, staging + ".part"} {
		if err := os.RemoveAll(d); err != nil { // what an interrupted restore left: derived from the snapshot
			return "", err
		}
	}
	peer := "unix://" + etcdPeerSocket
	if err := b.store(bins).Restore(context.Background(), b.store(bins).File(s.Cluster, s.Name), staging, "default", "default="+peer, peer, ""); err != nil {
		return "", err
	}
	aside := ""
	if exists(filepath.Join(dir, etcdDataDir)) {
		aside = filepath.Join(b.backupDir(m.UID), replacedDir, now.Format(snapshotNameLayout))
		if err := os.MkdirAll(filepath.Dir(aside), 0o700); err != nil {
			return "", err
		}
		if err := os.Rename(filepath.Join(dir, etcdDataDir), aside); err != nil {
			return "", fmt.Errorf("moving the data the snapshot replaces aside: %w", err)
		}
	}
	if err := os.Rename(staging, filepath.Join(dir, etcdDataDir)); err != nil {
		return aside, fmt.Errorf("putting the restored data in place: %w", err)
	}
	m.Restoring, m.DataLost, m.LostPart = nil, nil, ""
	return aside, nil
}

// finishRestore completes, before a cluster starts, a restore that an operator's end
// interrupted. With the data folder already moved aside, the restored one (complete, or it would
// not be named etcdRestoring) takes its place. With the data folder in place, the restore had not
// replaced it: what it left is removed (it is derived from the snapshot) and the data stays as it
// was. pending reports a restore into a new cluster that must be done again: no data folder yet.
func finishRestore(dir string, m *meta) (pending bool) {
	staging := filepath.Join(dir, etcdRestoring)
	os.RemoveAll(staging + ".part")
	data := exists(filepath.Join(dir, etcdDataDir))
	switch {
	case m.Restoring == nil:
		os.RemoveAll(staging)
	case !data && exists(staging) && os.Rename(staging, filepath.Join(dir, etcdDataDir)) == nil:
		m.Restored = &backend.Restored{Snapshot: *m.Restoring, At: time.Now().UTC().Truncate(time.Second)}
		m.Restoring, m.DataLost, m.LostPart = nil, nil, ""
	case !data:
		return true
	default:
		os.RemoveAll(staging)
		m.Restoring = nil
	}
	return false
}

// restoreStateLocked is the state of a cluster whose restore runs: not Ready until the cluster
// serves again on the snapshot's data.
func (b *Backend) restoreStateLocked(uid types.UID, in *instance, r *restore) backend.State {
	from := r.old
	if from == nil {
		from = in
	}
	var s backend.State
	if from != nil {
		s = from.state()
	}
	if r.started && s.Ready {
		delete(b.restores, uid)
		return s
	}
	msg := fmt.Sprintf("Restoring etcd from snapshot %s (taken %s): the cluster starts on the snapshot's data.", r.snapshot.Ref(), r.snapshot.Taken.Format(time.RFC3339))
	if s.Runs == "" {
		s.Runs = r.version
	}
	s.Ready, s.Reason, s.Message, s.RetryAfter = false, backend.ReasonRestoring, msg, time.Second
	s.SetPart(backend.Part{Type: backend.PartControllerManager, Reason: backend.ReasonRestoring, Message: msg})
	return s
}

// refuse is a restore refused: nothing changed.
func refuse(format string, args ...any) error { return snapshots.Refuse(format, args...) }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
