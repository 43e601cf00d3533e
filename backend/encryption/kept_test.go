package encryption

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keys makes n keys named k0, k1, …
func keys(t *testing.T, n int) []Key {
	t.Helper()
	out := make([]Key, n)
	for i := range out {
		k, err := NewKey(time.Date(2026, 11, 26, 10, 0, i, 0, time.UTC))
		require.NoError(t, err)
		k.Name = "k" + string(rune('0'+i))
		out[i] = k
	}
	return out
}

// TestInUseAndNeeds: the keys a cluster's Secrets may be written with now, and what a snapshot
// needs that ran while they changed.
func TestInUseAndNeeds(t *testing.T) {
	k := keys(t, 3)
	for name, c := range map[string]struct {
		s    State
		want []string
	}{
		"none":                         {State{}, nil},
		"a new key, not rewritten yet": {State{Keys: k[:1]}, []string{"k0"}},
		"rewritten":                    {State{Keys: k[:2], Migrated: "k0"}, []string{"k0"}},
		"rotated, not rewritten":       {State{Keys: k[:3], Migrated: "k1"}, []string{"k0", "k1", "k2"}},
		"staged over a rewritten key":  {State{Keys: k[:2], Migrated: "k1", Staged: true}, []string{"k1", "k0"}},
		"the first key staged":         {State{Keys: k[:1], Staged: true}, []string{"k0"}},
	} {
		t.Run(name, func(t *testing.T) { assert.Equal(t, c.want, c.s.InUse()) })
	}

	done := State{Keys: k[1:3], Migrated: "k1"}
	for name, c := range map[string]struct {
		after State
		want  []string
	}{
		"nothing changed": {done, []string{"k1"}},
		"rotated meanwhile (a key added that may have written)": {State{Keys: k[:3], Migrated: "k0"}, []string{"k1", "k0"}},
		"rotated and rewriting":                                 {State{Keys: k[:3], Migrated: "k1"}, []string{"k1", "k0", "k2"}},
	} {
		t.Run(name, func(t *testing.T) { assert.Equal(t, c.want, done.Mark().Needs(c.after)) })
	}
}

// TestSettle: what the copy beside the snapshots keeps.
func TestSettle(t *testing.T) {
	k := keys(t, 4)
	running := State{Keys: []Key{k[3], k[2], k[1], k[0]}, Migrated: "k3"} // k3 writes, every Secret rewritten
	for name, c := range map[string]struct {
		kept      Kept
		running   *State
		snapshots []string
		holdAll   bool
		want      []string
		removed   []string
		needs     map[string][]string
	}{
		"keys no snapshot needs go; a snapshot's and the running cluster's stay": {
			kept:    Kept{Keys: k[:4], Needs: map[string][]string{"s1": {"k1"}, "gone": {"k0"}}},
			running: &running, snapshots: []string{"s1"},
			want: []string{"k1", "k3"}, removed: []string{"k0", "k2"}, needs: map[string][]string{"s1": {"k1"}},
		},
		"a snapshot of an earlier release may need any: nothing goes, every running key is kept": {
			kept:    Kept{Keys: k[:1], Needs: map[string][]string{"s1": {"k0"}}},
			running: &running, snapshots: []string{"s1", "old"},
			want: []string{"k0", "k3", "k2", "k1"}, needs: map[string][]string{"s1": {"k0"}},
		},
		"data kept elsewhere may need any: nothing goes": {
			kept: Kept{Keys: k[:2]}, snapshots: nil, holdAll: true,
			want: []string{"k0", "k1"},
		},
		"a gone cluster's keys go with its last snapshot": {
			kept: Kept{Keys: k[:2], Needs: map[string][]string{"s1": {"k1"}}},
			want: []string{}, removed: []string{"k0", "k1"},
		},
		"a gone cluster keeps what its snapshots need": {
			kept:      Kept{Keys: k[:3], Needs: map[string][]string{"s1": {"k1"}, "s2": {"k1", "k2"}}},
			snapshots: []string{"s1", "s2"},
			want:      []string{"k1", "k2"}, removed: []string{"k0"}, needs: map[string][]string{"s1": {"k1"}, "s2": {"k1", "k2"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			kept := c.kept
			removed := kept.Settle(c.running, c.snapshots, c.holdAll)
			assert.Equal(t, c.want, kept.Names())
			assert.ElementsMatch(t, c.removed, removed)
			assert.Equal(t, c.needs, kept.Needs)
		})
	}

	// Recorded, a snapshot's keys are kept once the running cluster no longer uses them.
	kept := Kept{}
	kept.Record("s1", []string{"k2"}, running)
	rotated := State{Keys: running.Keys, Migrated: "k3"}
	kept.Settle(&rotated, []string{"s1"}, false)
	assert.Equal(t, []string{"k2", "k3"}, kept.Names())
	assert.Empty(t, kept.Settle(&rotated, []string{"s1"}, false), "settled: nothing more")
}

// TestWrap: a wrapped copy holds none of the keys' bytes, opens with its wrapping key for its own
// Cluster only, and says which key it needs.
func TestWrap(t *testing.T) {
	secret, err := GenerateWrappingKey()
	require.NoError(t, err)
	w, err := NewWrappingKey(secret)
	require.NoError(t, err)
	k := Kept{Keys: keys(t, 2), Needs: map[string][]string{"20261126T100000Z": {"k1"}}}
	data, err := w.Wrap(k, "uid-a")
	require.NoError(t, err)
	for _, x := range k.Keys {
		for _, form := range [][]byte{x.Secret, []byte(base64.StdEncoding.EncodeToString(x.Secret)), []byte(hex.EncodeToString(x.Secret))} {
			assert.False(t, bytes.Contains(data, form), "no key in the wrapped copy")
		}
	}
	got, err := w.Unwrap(data, "uid-a")
	require.NoError(t, err)
	assert.Equal(t, k, got)
	id, err := WrappedWith(data)
	require.NoError(t, err)
	assert.Equal(t, w.ID(), id)

	_, err = w.Unwrap(data, "uid-b")
	assert.ErrorContains(t, err, "the copy of another Cluster", "bound to its Cluster")
	other, err := GenerateWrappingKey()
	require.NoError(t, err)
	w2, err := NewWrappingKey(other)
	require.NoError(t, err)
	_, err = w2.Unwrap(data, "uid-a")
	assert.ErrorContains(t, err, "wrapped with key "+w.ID()+", but the wrapping key is "+w2.ID())
	_, err = w.Unwrap([]byte(`{"keys":[]}`), "uid-a")
	assert.ErrorContains(t, err, "does not read as wrapped keys")
	_, err = NewWrappingKey(secret[:16])
	assert.Error(t, err)
}

// TestWrappingKeyFile: made once (0600), read again the same, never replaced; one that does not
// read is refused and left as it is.
func TestWrappingKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "key-wrapping.key")
	w, err := LoadWrappingKeyFile(path, false)
	require.NoError(t, err)
	assert.Nil(t, w, "none, and none made")
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist)

	w, err = LoadWrappingKeyFile(path, true)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	again, err := LoadWrappingKeyFile(path, true)
	require.NoError(t, err)
	assert.Equal(t, w.ID(), again.ID(), "never made anew")
	leftovers, err := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
	require.NoError(t, err)
	assert.Empty(t, leftovers)

	require.NoError(t, os.Chmod(path, 0o644))
	_, err = LoadWrappingKeyFile(path, false)
	require.NoError(t, err)
	fi, err = os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "made the operator's only")

	require.NoError(t, os.WriteFile(path, []byte("garbled\n"), 0o600))
	_, err = LoadWrappingKeyFile(path, true)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "never replaced")
	assert.Contains(t, err.Error(), "put it back from a backup")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "garbled\n", string(data), "left as it is")
}
