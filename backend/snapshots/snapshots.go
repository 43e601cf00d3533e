// Package snapshots keeps etcd snapshots in a folder: one folder per Cluster UID, each snapshot a
// <name>.db (what etcd streamed, with its SHA-256 trailer) and a <name>.json (backend.Snapshot,
// written last: a snapshot without it is incomplete and ignored). Folders are 0700 and files 0600:
// a snapshot holds every Secret of its cluster.
//
// The local backend keeps its snapshots in its state folder with it; the hosted backend's snapshot
// Jobs (cmd/etcd-snapshot, in the control-plane image) keep theirs on a claim with it. Both take
// a snapshot with etcdctl, check it with etcdutl (which reads the whole database), and refuse to
// restore a file whose checksum differs from the one recorded when it was taken.
package snapshots

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

	"github.com/openmcp-local/cluster-provider/backend"
)

const (
	// SnapshotSuffix and RecordSuffix end the names of a snapshot's two files.
	SnapshotSuffix = ".db"
	RecordSuffix   = ".json"
	// Timeout bounds taking and checking one snapshot.
	Timeout = 5 * time.Minute
	// NameLayout names snapshots by the UTC second they were taken.
	NameLayout = "20060102T150405Z"
)

// Store is a folder of snapshots, and the etcd tools that take and check them.
type Store struct {
	// Dir holds a folder per Cluster UID.
	Dir string
	// Etcdctl and Etcdutl are the paths of the tools.
	Etcdctl, Etcdutl string
	// FreeSpace reads the free space of a folder's filesystem; nil is FreeSpace (statfs).
	FreeSpace func(dir string) (int64, error)
}

// ClusterDir is the folder of the snapshots of the Cluster with uid.
func (s Store) ClusterDir(uid types.UID) string { return filepath.Join(s.Dir, string(uid)) }

// File is the file of snapshot name of the Cluster with uid.
func (s Store) File(uid types.UID, name string) string {
	return filepath.Join(s.ClusterDir(uid), name+SnapshotSuffix)
}

// Take takes a snapshot of the etcd that etcdctl, run in folder workDir, reaches with connection
// (its flags: endpoints, certificates), checks it, and records it as a snapshot of the Cluster
// with uid in namespace, of Kubernetes version kubernetesVersion.
func (s Store) Take(ctx context.Context, uid types.UID, namespace, kubernetesVersion, workDir string, connection ...string) (backend.Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	dir := s.ClusterDir(uid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return backend.Snapshot{}, fmt.Errorf("making the backup folder: %w", err)
	}
	now := time.Now().UTC()
	name := now.Format(NameLayout)
	for i := 2; exists(filepath.Join(dir, name+RecordSuffix)); i++ {
		name = fmt.Sprintf("%s-%d", now.Format(NameLayout), i)
	}
	part := filepath.Join(dir, name+SnapshotSuffix+".part")
	defer os.Remove(part) // left only by a failure
	args := append(slices.Clone(connection), "--command-timeout=5m", "snapshot", "save", part)
	if out, err := run(ctx, workDir, s.Etcdctl, args...); err != nil {
		return backend.Snapshot{}, fmt.Errorf("etcdctl snapshot save: %w: %s", err, LastLine(out))
	}
	if err := os.Chmod(part, 0o600); err != nil {
		return backend.Snapshot{}, err
	}
	sum, size, err := fileSHA256(part)
	if err != nil {
		return backend.Snapshot{}, err
	}
	st, err := s.status(ctx, part)
	if err != nil {
		return backend.Snapshot{}, fmt.Errorf("the snapshot just taken does not check (etcdutl snapshot status): %w", err)
	}
	snap := backend.Snapshot{Name: name, Cluster: uid, Namespace: namespace, Taken: now, Size: size, Revision: st.Revision, Keys: st.TotalKey, Version: kubernetesVersion, SHA256: sum}
	if err := os.Rename(part, filepath.Join(dir, name+SnapshotSuffix)); err != nil {
		return backend.Snapshot{}, err
	}
	data, err := json.MarshalIndent(snap, "", "  ")
	if err != nil {
		return backend.Snapshot{}, err
	}
	if err := writeFileAtomic(filepath.Join(dir, name+RecordSuffix), data); err != nil {
		return backend.Snapshot{}, fmt.Errorf("recording the snapshot: %w", err)
	}
	return snap, nil
}

// Prune removes the snapshots of uid that r removes at now (never the newest: backend.Retention)
// and returns the names removed.
func (s Store) Prune(uid types.UID, r backend.Retention, now time.Time) ([]string, error) {
	all, err := s.List(uid)
	if err != nil {
		return nil, err
	}
	return s.remove(uid, r.Prune(all, now))
}

// remove removes snaps of uid, the record first: a snapshot without one is ignored, never
// half-listed.
func (s Store) remove(uid types.UID, snaps []backend.Snapshot) ([]string, error) {
	dir := s.ClusterDir(uid)
	var errs []error
	var removed []string
	for _, snap := range snaps {
		for _, f := range []string{snap.Name + RecordSuffix, snap.Name + SnapshotSuffix} {
			if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		removed = append(removed, snap.Name)
	}
	return removed, errors.Join(errs...)
}

// List lists the snapshots of uid, newest first. A record that does not read is skipped and
// named in the error, with the others listed.
func (s Store) List(uid types.UID) ([]backend.Snapshot, error) {
	dir := s.ClusterDir(uid)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []backend.Snapshot
	var errs []error
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), RecordSuffix)
		if !ok || e.IsDir() {
			continue
		}
		snap, err := readRecord(dir, name)
		if err != nil {
			errs = append(errs, fmt.Errorf("skipping a snapshot record that does not read: %w", err))
			continue
		}
		out = append(out, snap)
	}
	Sort(out)
	return out, errors.Join(errs...)
}

// Sort sorts snapshots newest first.
func Sort(all []backend.Snapshot) {
	slices.SortFunc(all, func(a, b backend.Snapshot) int {
		if c := b.Taken.Compare(a.Taken); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
}

func readRecord(dir, name string) (backend.Snapshot, error) {
	var snap backend.Snapshot
	data, err := os.ReadFile(filepath.Join(dir, name+RecordSuffix))
	if err != nil {
		return snap, err
	}
	if err := json.Unmarshal(data, &snap); err != nil {
		return snap, fmt.Errorf("%s: %w", filepath.Join(dir, name+RecordSuffix), err)
	}
	return snap, nil
}

// Check finds snapshot name of the Cluster with uid and checks its file against its record and
// with etcdutl. An error is a refusal (Refuse) that says what is wrong.
func (s Store) Check(ctx context.Context, uid types.UID, name string) (backend.Snapshot, error) {
	if !backend.ValidSnapshotName(name) {
		return backend.Snapshot{}, Refuse("%q is not a snapshot name (like 20261125T213000Z); the names are in status.providerStatus.backups", name)
	}
	dir := s.ClusterDir(uid)
	snap, err := readRecord(dir, name)
	if errors.Is(err, os.ErrNotExist) {
		var names []string
		all, _ := s.List(uid)
		for _, a := range all {
			names = append(names, a.Name)
		}
		have := "it has none"
		if len(names) > 0 {
			have = "its snapshots: " + strings.Join(names, ", ")
		}
		return snap, Refuse("there is no snapshot %q of the Cluster with UID %s (%s)", name, uid, have)
	}
	if err != nil {
		return snap, Refuse("the record of snapshot %q does not read: %v", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	file := s.File(uid, name)
	sum, _, err := fileSHA256(file)
	switch {
	case err != nil:
		return snap, Refuse("the file of snapshot %q does not read: %v", name, err)
	case sum != snap.SHA256:
		return snap, Refuse("snapshot %q is damaged: the SHA-256 of %s is %s, not %s as when it was taken; restore another snapshot", name, file, sum, snap.SHA256)
	}
	if _, err := s.status(ctx, file); err != nil {
		return snap, Refuse("snapshot %q does not check (etcdutl snapshot status): %v; restore another snapshot", name, err)
	}
	return snap, nil
}

// Find returns snapshot name from all, the snapshots of the Cluster with uid, for the Cluster own
// of namespace that asks for it: a snapshot belongs to its Cluster's namespace, so one of another
// namespace is not found, as if it did not exist (a UID is no secret: owner references, Events and
// labels show it), and the refusal lists only the names the asker may use. A snapshot whose record
// has no namespace (taken before they were recorded) is found only by its own Cluster.
func Find(all []backend.Snapshot, uid types.UID, name, namespace string, own types.UID) (backend.Snapshot, error) {
	var names []string
	for _, s := range all {
		if s.Cluster != uid || (s.Namespace != namespace && (s.Namespace != "" || s.Cluster != own)) {
			continue
		}
		if s.Name == name {
			return s, nil
		}
		names = append(names, s.Name)
	}
	have := "it has none"
	if uid != own {
		have += " for a Cluster of namespace " + namespace
	}
	if len(names) > 0 {
		have = "its snapshots: " + strings.Join(names, ", ")
	}
	return backend.Snapshot{}, Refuse("there is no snapshot %q of the Cluster with UID %s (%s)", name, uid, have)
}

// VersionFits refuses a snapshot of a later Kubernetes minor than the cluster runs (its objects
// may be stored in versions the API server does not know) or of a minor more than one before.
func VersionFits(snap backend.Snapshot, running string) error {
	sv, err1 := version.ParseGeneric(snap.Version)
	rv, err2 := version.ParseGeneric(running)
	if err1 != nil || err2 != nil {
		return nil // no version to compare: etcd checks what it can
	}
	switch {
	case sv.Major() != rv.Major() || sv.Minor() > rv.Minor():
		return Refuse("snapshot %q was taken of Kubernetes %s, a later version than the cluster's %s: its API server may not read the objects in it", snap.Name, snap.Version, running)
	case sv.Minor()+1 < rv.Minor():
		return Refuse("snapshot %q was taken of Kubernetes %s, more than one minor before the cluster's %s, a change of version the cluster could not have made", snap.Name, snap.Version, running)
	}
	return nil
}

// Refuse is a restore refused: nothing changed.
func Refuse(format string, args ...any) error {
	return backend.Errorf(backend.ReasonRestoreRefused, "restore refused, nothing changed: "+format, args...)
}

// RevisionBump is how far a restore moves etcd's revision past the snapshot's, and the restored
// data is marked compacted up to there (etcdutl --bump-revision --mark-compacted, which etcd made
// for this: Kubernetes' etcd restore guidance). Without it the restored revision is the
// snapshot's, below what clients saw after the snapshot: a watch from a resourceVersion handed out
// before the restore would get the new history as if it continued the old one, and never learn of
// the objects written after the snapshot that are gone. Bumped and compacted, every such watch
// ends in 410 Gone (its revision is compacted) and its client lists anew. The bump must exceed the
// revisions the cluster made between the snapshot and the restore, which nobody may know any more
// (the data may be lost): a billion, as Kubernetes' guidance suggests, is more than a cluster
// writing a thousand changes a second makes in eleven days, and an int64 revision has room for
// nine billion such restores.
const RevisionBump = 1_000_000_000

// MinEtcdutl is the first etcdutl release with --bump-revision and --mark-compacted (3.5.10; every
// 3.6 and 3.7 has them).
const MinEtcdutl = "3.5.10"

// Restore writes snapshot file into a new etcd data folder dataDir (which must not exist) for
// member name of initialCluster, advertising peerURLs, in the etcd cluster of token (its
// --initial-cluster-token: a new one makes a new cluster ID, which no member of an older cluster
// can join; "" is etcd's default): etcdutl snapshot restore, through a ".part" folder, so that
// dataDir exists only complete. The revision is bumped by RevisionBump and marked compacted.
func (s Store) Restore(ctx context.Context, file, dataDir, name, initialCluster, peerURLs, token string) error {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	part := dataDir + ".part"
	if err := os.RemoveAll(part); err != nil { // what an interrupted restore left: derived from the snapshot
		return err
	}
	args := []string{"snapshot", "restore", file, "--data-dir=" + part, "--name=" + name, "--initial-cluster=" + initialCluster,
		"--initial-advertise-peer-urls=" + peerURLs, fmt.Sprintf("--bump-revision=%d", RevisionBump), "--mark-compacted"}
	if token != "" {
		args = append(args, "--initial-cluster-token="+token)
	}
	if out, err := run(ctx, "", s.Etcdutl, args...); err != nil {
		os.RemoveAll(part)
		if strings.Contains(out, "unknown flag") {
			return fmt.Errorf("etcdutl snapshot restore: %s: %s is older than etcdutl %s, which restores with --bump-revision and --mark-compacted (so that clients' watches end in 410 Gone): use the etcdutl of etcd %s or later",
				LastLine(out), s.Etcdutl, MinEtcdutl, MinEtcdutl)
		}
		return fmt.Errorf("etcdutl snapshot restore: %w: %s", err, LastLine(out))
	}
	return os.Rename(part, dataDir)
}

// stat is what `etcdutl snapshot status -w json` prints (the fields used).
type stat struct {
	Revision int64 `json:"revision"`
	TotalKey int64 `json:"totalKey"`
}

// status checks a snapshot file with etcdutl, which reads the whole database.
func (s Store) status(ctx context.Context, file string) (stat, error) {
	var st stat
	out, err := run(ctx, "", s.Etcdutl, "snapshot", "status", file, "--write-out=json")
	if err != nil {
		return st, fmt.Errorf("%w: %s", err, LastLine(out))
	}
	if err := json.Unmarshal(bytes.TrimSpace([]byte(out)), &st); err != nil {
		return st, fmt.Errorf("reading etcdutl's answer %q: %w", LastLine(out), err)
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

// LastLine is the last non-empty line of a tool's output: what it said when it failed.
func LastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// SHA256 is the checksum of a file, and its size.
func SHA256(path string) (string, int64, error) { return fileSHA256(path) }

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

// writeFileAtomic writes data to path through a temporary file renamed in place, 0600.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = f.Sync()
		f.Close()
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
