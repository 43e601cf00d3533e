package encryption

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
)

// TestStateSteps walks a cluster's keys through their life: made (to rewrite), rewritten,
// rotated (a new key first, the old one kept to read), rewritten, a snapshot's keys adopted.
func TestStateSteps(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	s, err := New(t0)
	require.NoError(t, err)
	require.Len(t, s.Keys, 1)
	assert.Equal(t, "key-20261126T100000Z", s.Writer())
	assert.Len(t, s.Keys[0].Secret, 32)
	assert.False(t, s.Done(), "a new cluster's Secrets are rewritten once")
	s.Migrated = s.Writer()
	assert.True(t, s.Done())

	for _, c := range []struct {
		request string
		rotates bool
	}{
		{"", false},
		{"2026-11-26", true},
		{"2026-11-26", false}, // acted on
		{"again", true},
	} {
		before := s
		rotated, err := s.Rotate(c.request, t0.Add(time.Duration(len(s.Keys))*time.Minute))
		require.NoError(t, err)
		assert.Equal(t, c.rotates, rotated, c.request)
		if !c.rotates {
			assert.Equal(t, before, s)
			continue
		}
		assert.Len(t, s.Keys, len(before.Keys)+1, "the old keys stay, to read")
		assert.Equal(t, before.Keys, s.Keys[1:])
		assert.NotEqual(t, before.Writer(), s.Writer())
		assert.False(t, s.Done(), "rotated: to rewrite")
		assert.Equal(t, c.request, s.Rotation)
		s.Migrated = s.Writer()
	}

	other, err := New(t0.Add(time.Hour))
	require.NoError(t, err)
	writer := s.Writer()
	assert.True(t, s.Adopt(other.Keys))
	assert.Equal(t, writer, s.Writer(), "an adopted key only reads")
	assert.Equal(t, other.Keys[0], s.Keys[len(s.Keys)-1])
	assert.False(t, s.Done(), "adopted: to rewrite")
}

// TestConfigLoads: kube-apiserver's own loader reads the config of a State with several keys: the
// first writes Secrets, each reads, and plain text (identity) reads what was written before.
func TestConfigLoads(t *testing.T) {
	s, err := New(time.Now())
	require.NoError(t, err)
	_, err = s.Rotate("r", time.Now().Add(time.Second))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, Save(dir, s))
	for _, f := range []string{StateFile, ConfigFile} {
		info, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "%s: the operator's only", f)
	}
	cfg, err := encryptionconfig.LoadEncryptionConfig(t.Context(), filepath.Join(dir, ConfigFile), false, "test")
	require.NoError(t, err)
	assert.Contains(t, cfg.Transformers, schema.GroupResource{Resource: "secrets"})
	assert.Len(t, cfg.Transformers, 1, "Secrets only")
	loaded, found, err := Load(dir)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, s.Keys[0].Secret, loaded.Keys[0].Secret)
	assert.Equal(t, s.Writer(), loaded.Writer())

	_, found, err = Load(t.TempDir())
	require.NoError(t, err)
	assert.False(t, found)
	require.NoError(t, os.WriteFile(filepath.Join(dir, StateFile), []byte("garbled"), 0o600))
	_, _, err = Load(dir)
	require.Error(t, err, "a garbled state is no state to replace")
	assert.Contains(t, err.Error(), "left as it is")

	bad := State{Keys: []Key{{Name: "k", Secret: []byte("short")}}}
	_, err = bad.Config()
	require.Error(t, err)
}
