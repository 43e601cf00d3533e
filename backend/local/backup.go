package local

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
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
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
	snapshotSuffix = ".db"
	recordSuffix   = ".json"
	// etcdRestoring is where a restore writes the snapshot's data before it becomes etcdDataDir.
	etcdRestoring = etcdDataDir + ".restoring"
	// snapshotTimeout bounds taking and checking one snapshot.
	snapshotTimeout = 5 * time.Minute
	// snapshotNameLayout names snapshots by the UTC second they were taken.
	snapshotNameLayout = "20060102T150405Z"
)

var _ backend.Backups = &Backend{}

// backupDir is the folder of the snapshots of the cluster with uid.
func (b *Backend) backupDir(uid types.UID) string {
	return filepath.Join(b.opts.StateDir, backupsDir, string(uid))
}

// Snapshot takes a snapshot of cl's etcd (etcdctl snapshot save, over its unix socket), checks it
// (etcdutl snapshot status), records it, and removes all but the newest keep of cl's snapshots.
func (b *Backend) Snapshot(ctx context.Context, cl *clustersv1alpha1.Cluster, keep int) (backend.Snapshot, error) {
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
	b.backupMu.Lock()
	defer b.backupMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()

	dir := b.backupDir(cl.UID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return backend.Snapshot{}, fmt.Errorf("making the backup folder: %w", err)
	}
	now := time.Now().UTC()
	name := now.Format(snapshotNameLayout)
	for i := 2; exists(filepath.Join(dir, name+recordSuffix)); i++ {
		name = fmt.Sprintf("%s-%d", now.Format(snapshotNameLayout), i)
	}
	part := filepath.Join(dir, name+snapshotSuffix+".part")
	defer os.Remove(part) // left only by a failure
	if out, err := run(ctx, in.dir, in.bins.Etcdctl(), "--endpoints=unix://"+etcdSocket, "--command-timeout=5m", "snapshot", "save", part); err != nil {
		return backend.Snapshot{}, fmt.Errorf("etcdctl snapshot save: %w: %s", err, lastLine(out))
	}
	if err := os.Chmod(part, 0o600); err != nil {
		return backend.Snapshot{}, err
	}
	sum, size, err := fileSHA256(part)
	if err != nil {
		return backend.Snapshot{}, err
	}
	st, err := snapshotStatus(ctx, in.bins, part)
	if err != nil {
		return backend.Snapshot{}, fmt.Errorf("the snapshot just taken does not check (etcdutl snapshot status): %w", err)
	}
	in.mu.Lock()
	running := in.meta.Version
	in.mu.Unlock()
	s := backend.Snapshot{Name: name, Cluster: cl.UID, Taken: now, Size: size, Revision: st.Revision, Keys: st.TotalKey, Version: running, SHA256: sum}
	if err := os.Rename(part, filepath.Join(dir, name+snapshotSuffix)); err != nil {
		return backend.Snapshot{}, err
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return backend.Snapshot{}, err
	}
	if err := writeFileAtomic(filepath.Join(dir, name+recordSuffix), data, 0o600); err != nil {
		return backend.Snapshot{}, fmt.Errorf("recording the snapshot: %w", err)
	}
	in.log.Info("Took a snapshot of etcd", "snapshot", name, "bytes", size, "revision", st.Revision, "keys", st.TotalKey)
	if err := b.prune(cl.UID, keep); err != nil {
		in.log.Error(err, "Removing old snapshots failed; they stay until the next snapshot tries again")
	}
	return s, nil
}

// prune removes all but the newest keep snapshots of the cluster with uid.
func (b *Backend) prune(uid types.UID, keep int) error {
	all, err := b.snapshots(uid)
	if err != nil || keep <= 0 || len(all) <= keep {
		return err
	}
	dir := b.backupDir(uid)
	var errs []error
	for _, s := range all[keep:] {
		// The record first: a snapshot without one is ignored, never half-listed.
		for _, f := range []string{s.Name + recordSuffix, s.Name + snapshotSuffix} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Snapshots lists cl's snapshots, newest first.
func (b *Backend) Snapshots(_ context.Context, cl *clustersv1alpha1.Cluster) ([]backend.Snapshot, error) {
	return b.snapshots(cl.UID)
}

func (b *Backend) snapshots(uid types.UID) ([]backend.Snapshot, error) {
	dir := b.backupDir(uid)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []backend.Snapshot
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), recordSuffix)
		if !ok || e.IsDir() {
			continue
		}
		s, err := readSnapshot(dir, name)
		if err != nil {
			b.log.Error(err, "Skipping a snapshot record that does not read", "file", filepath.Join(dir, e.Name()))
			continue
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b backend.Snapshot) int {
		if c := b.Taken.Compare(a.Taken); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return out, nil
}

func readSnapshot(dir, name string) (backend.Snapshot, error) {
	var s backend.Snapshot
	data, err := os.ReadFile(filepath.Join(dir, name+recordSuffix))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, name+recordSuffix), err)
	}
	return s, nil
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
	s, err := b.checkSnapshot(ctx, in.bins, cl.UID, name)
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

// checkSnapshot finds snapshot name among the snapshots of the cluster with uid and checks its
// file against its record and with etcdutl.
func (b *Backend) checkSnapshot(ctx context.Context, bins Binaries, uid types.UID, name string) (backend.Snapshot, error) {
	if !backend.ValidSnapshotName(name) {
		return backend.Snapshot{}, refuse("%q is not a snapshot name (like 20261125T213000Z); the names are in status.providerStatus.backups", name)
	}
	if err := bins.backupTools(); err != nil {
		return backend.Snapshot{}, err
	}
	dir := b.backupDir(uid)
	s, err := readSnapshot(dir, name)
	if errors.Is(err, os.ErrNotExist) {
		var names []string
		all, _ := b.snapshots(uid)
		for _, s := range all {
			names = append(names, s.Name)
		}
		have := "it has none"
		if len(names) > 0 {
			have = "its snapshots: " + strings.Join(names, ", ")
		}
		return s, refuse("there is no snapshot %q of the Cluster with UID %s (%s)", name, uid, have)
	}
	if err != nil {
		return s, refuse("the record of snapshot %q does not read: %v", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	file := filepath.Join(dir, name+snapshotSuffix)
	sum, _, err := fileSHA256(file)
	switch {
	case err != nil:
		return s, refuse("the file of snapshot %q does not read: %v", name, err)
	case sum != s.SHA256:
		return s, refuse("snapshot %q is damaged: the SHA-256 of %s is %s, not %s as when it was taken; restore another snapshot", name, file, sum, s.SHA256)
	}
	if _, err := snapshotStatus(ctx, bins, file); err != nil {
		return s, refuse("snapshot %q does not check (etcdutl snapshot status): %v; restore another snapshot", name, err)
	}
	return s, nil
}

// versionFits refuses a snapshot of a later Kubernetes minor than the cluster runs (its objects
// may be stored in versions the API server does not know) or of a minor more than one before.
func versionFits(s backend.Snapshot, running string) error {
	sv, err1 := version.ParseGeneric(s.Version)
	rv, err2 := version.ParseGeneric(running)
	if err1 != nil || err2 != nil {
		return nil // no version to compare: etcd checks what it can
	}
	switch {
	case sv.Major() != rv.Major() || sv.Minor() > rv.Minor():
		return refuse("snapshot %q was taken of Kubernetes %s, a later version than the cluster's %s: its API server may not read the objects in it", s.Name, s.Version, running)
	case sv.Minor()+1 < rv.Minor():
		return refuse("snapshot %q was taken of Kubernetes %s, more than one minor before the cluster's %s, a change of version the cluster could not have made", s.Name, s.Version, running)
	}
	return nil
}

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
		if s, err = b.checkSnapshot(ctx, bins, uid, name); err != nil {
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
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	if err := writeMeta(dir, *m); err != nil {
		return "", err
	}
	staging := filepath.Join(dir, etcdRestoring)
	for _, d := range []string{staging, staging + ".part"} {
		if err := os.RemoveAll(d); err != nil { // what an interrupted restore left: derived from the snapshot
			return "", err
		}
	}
	file := filepath.Join(b.backupDir(s.Cluster), s.Name+snapshotSuffix)
	ctx, cancel := context.WithTimeout(context.Background(), snapshotTimeout)
	defer cancel()
	peer := "unix://" + etcdPeerSocket
	if out, err := run(ctx, dir, bins.Etcdutl(), "snapshot", "restore", file, "--data-dir="+etcdRestoring+".part",
		"--name=default", "--initial-cluster=default="+peer, "--initial-advertise-peer-urls="+peer); err != nil {
		os.RemoveAll(staging + ".part")
		return "", fmt.Errorf("etcdutl snapshot restore: %w: %s", err, lastLine(out))
	}
	if err := os.Rename(staging+".part", staging); err != nil {
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
	s.ControllerManager = &backend.Part{Reason: backend.ReasonRestoring, Message: msg}
	return s
}

// refuse is a restore refused: nothing changed.
func refuse(format string, args ...any) error {
	return backend.Errorf(backend.ReasonRestoreRefused, "restore refused, nothing changed: "+format, args...)
}

// snapshotStat is what `etcdutl snapshot status -w json` prints (the fields used).
type snapshotStat struct {
	Revision int64 `json:"revision"`
	TotalKey int64 `json:"totalKey"`
}

// snapshotStatus checks a snapshot file with etcdutl, which reads the whole database.
func snapshotStatus(ctx context.Context, bins Binaries, file string) (snapshotStat, error) {
	var st snapshotStat
	out, err := run(ctx, "", bins.Etcdutl(), "snapshot", "status", file, "--write-out=json")
	if err != nil {
		return st, fmt.Errorf("%w: %s", err, lastLine(out))
	}
	if err := json.Unmarshal(bytes.TrimSpace([]byte(out)), &st); err != nil {
		return st, fmt.Errorf("reading etcdutl's answer %q: %w", lastLine(out), err)
	}
	if st.Revision <= 0 {
		return st, fmt.Errorf("etcdutl reports revision %d", st.Revision)
	}
	return st, nil
}

// run runs bin with args in dir and returns its combined output.
func run(ctx context.Context, dir, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func fileSHA256(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
