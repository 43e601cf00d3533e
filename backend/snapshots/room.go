package snapshots

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend"
)

// FreeSpace is the free space, in bytes, of the filesystem that holds dir (statfs), as an
// unprivileged process may use it.
func FreeSpace(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("reading the free space of %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil //nolint:unconvert // the field types differ by platform
}

// MakeRoom makes room for the next snapshot of uid before it is saved: when the folder's
// filesystem has less free space than the newest snapshot's size × backend.RoomFactor, it removes
// the oldest snapshots r removes anyway, then, if that is not enough, the oldest r keeps, never
// the newest (backend.Retention.MakeRoom). It returns what it decided and the names it removed.
func (s Store) MakeRoom(uid types.UID, r backend.Retention, now time.Time) (backend.Room, []string, error) {
	all, err := s.List(uid)
	if err != nil || len(all) == 0 {
		return backend.Room{Enough: true}, nil, err
	}
	free := s.FreeSpace
	if free == nil {
		free = FreeSpace
	}
	avail, err := free(s.ClusterDir(uid))
	if err != nil {
		return backend.Room{Enough: true}, nil, err // unknown: save and see
	}
	room := r.MakeRoom(all, now, avail)
	removed, err := s.remove(uid, room.Remove)
	return room, removed, err
}

// Saved is what Save did: the snapshot taken, the snapshots removed by the policy after it, and
// those removed before it for room only (beyond the policy: say so).
type Saved struct {
	Snapshot        backend.Snapshot
	Removed         []string
	RemovedForSpace []string
}

// Save takes a snapshot of uid as Take does, after making room for it (MakeRoom), and then prunes
// the snapshots r removes: the one sequence of the local backend and of the hosted snapshot Job.
// A failure to make room or to prune is logged with logf and does not stop the snapshot; a
// snapshot that does not fit fails with what the destination lacks.
func (s Store) Save(ctx context.Context, r backend.Retention, uid types.UID, namespace, kubernetesVersion, workDir string, logf func(string, ...any), connection ...string) (Saved, error) {
	var out Saved
	room, removed, err := s.MakeRoom(uid, r, time.Now())
	if err != nil {
		logf("making room for the snapshot: %v", err)
	}
	for _, b := range room.BeyondPolicy {
		out.RemovedForSpace = append(out.RemovedForSpace, b.Name)
	}
	out.Removed = removed
	if out.Snapshot, err = s.Take(ctx, uid, namespace, kubernetesVersion, workDir, connection...); err != nil {
		if !room.Enough {
			err = fmt.Errorf("%w (the snapshots' filesystem had %d bytes free before snapshots were removed for room, the next snapshot needs about %d, and only the newest is left: give the destination more space)", err, room.Free, room.Need)
		}
		return out, err
	}
	pruned, err := s.Prune(uid, r, time.Now())
	if err != nil {
		logf("removing old snapshots (they stay until the next snapshot tries again): %v", err)
	}
	out.Removed = append(out.Removed, pruned...)
	return out, nil
}
