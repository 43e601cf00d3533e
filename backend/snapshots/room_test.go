package snapshots

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend"
)

// put writes a recorded snapshot of uid taken at, of size bytes, into s.
func put(t *testing.T, s Store, uid types.UID, at time.Time, size int) backend.Snapshot {
	t.Helper()
	snap := backend.Snapshot{Name: at.UTC().Format(NameLayout), Cluster: uid, Taken: at, Size: int64(size), Revision: 1}
	require.NoError(t, os.MkdirAll(s.ClusterDir(uid), 0o700))
	require.NoError(t, os.WriteFile(s.File(uid, snap.Name), make([]byte, size), 0o600))
	data, err := json.Marshal(snap)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(s.ClusterDir(uid), snap.Name+RecordSuffix), data, 0o600))
	return snap
}

// TestMakeRoom: on a folder whose filesystem reports too little free space, the snapshots the
// policy removes go first, then the oldest it keeps, never the newest; with room, none go. Both
// files of a snapshot go. (The Job's save runs this same function: cmd/etcd-snapshot save; a small
// filesystem needs root to mount, so the free space is reported by FreeSpace here.)
func TestMakeRoom(t *testing.T) {
	const uid = types.UID("6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a")
	now := time.Now().UTC().Truncate(time.Second)
	var free int64
	s := Store{Dir: t.TempDir(), FreeSpace: func(string) (int64, error) { return free, nil }}
	var snaps []backend.Snapshot
	for i := 4; i >= 0; i-- { // oldest first: 4 h ago … now
		snaps = append(snaps, put(t, s, uid, now.Add(-time.Duration(i)*time.Hour), 1000))
	}
	r := backend.KeepNewest(3)
	listed := func() []string {
		all, err := s.List(uid)
		require.NoError(t, err)
		out := []string{}
		for _, a := range all {
			out = append(out, a.Name)
		}
		return out
	}

	free = 1200
	room, removed, err := s.MakeRoom(uid, r, now)
	require.NoError(t, err)
	assert.True(t, room.Enough)
	assert.Empty(t, removed, "room enough: none removed")

	free = 500 // the policy's removals: the oldest (4 h ago) alone makes room
	room, removed, err = s.MakeRoom(uid, r, now)
	require.NoError(t, err)
	assert.Equal(t, []string{snaps[0].Name}, removed)
	assert.Empty(t, room.BeyondPolicy)
	assert.True(t, room.Enough)
	assert.NoFileExists(t, s.File(uid, snaps[0].Name))

	free = 0 // the other one the policy removes, then the oldest it keeps
	room, removed, err = s.MakeRoom(uid, r, now)
	require.NoError(t, err)
	assert.Equal(t, []string{snaps[1].Name, snaps[2].Name}, removed)
	assert.Equal(t, snaps[2].Name, room.BeyondPolicy[0].Name)
	assert.True(t, room.Enough)
	assert.Equal(t, []string{snaps[4].Name, snaps[3].Name}, listed())

	free = -1 << 40 // never enough: all but the newest
	room, _, err = s.MakeRoom(uid, r, now)
	require.NoError(t, err)
	assert.False(t, room.Enough)
	assert.Equal(t, []string{snaps[4].Name}, listed(), "the newest stays")
}

func TestFreeSpace(t *testing.T) {
	free, err := FreeSpace(t.TempDir())
	require.NoError(t, err)
	assert.Positive(t, free)
	_, err = FreeSpace(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err)
}

func TestPruneRetention(t *testing.T) {
	const uid = types.UID("6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a")
	now := time.Date(2026, 11, 25, 13, 30, 0, 0, time.UTC)
	s := Store{Dir: t.TempDir()}
	var snaps []backend.Snapshot
	for i := 47; i >= 0; i-- { // hourly for two days, oldest first
		snaps = append(snaps, put(t, s, uid, now.Add(-time.Duration(i)*time.Hour), 10))
	}
	removed, err := s.Prune(uid, backend.Retention{Keep: 2, Daily: 2}, now)
	require.NoError(t, err)
	assert.Len(t, removed, 48-3, "the newest two and yesterday's newest stay")
	all, err := s.List(uid)
	require.NoError(t, err)
	require.Len(t, all, 3)
	assert.Equal(t, snaps[47].Name, all[0].Name)
	assert.Equal(t, snaps[46].Name, all[1].Name)
	assert.Equal(t, "20261124T233000Z", all[2].Name, "yesterday at 23:30")
}
