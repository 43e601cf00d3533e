package encryption

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
)

// TestStateSteps walks a cluster's keys through their life: made (to rewrite), rewritten,
// rotated (a new key first, the old one kept to read), rewritten, a snapshot's keys adopted.
func TestStateSteps(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	s, err := New(t0)
	require.NoError(t, err)
	require.Len(t, s.Keys, 1)
	assert.Regexp(t, `^key-20261126T100000Z-[0-9a-f]{8}$`, s.Writer())
	other, err := New(t0)
	require.NoError(t, err)
	assert.NotEqual(t, s.Writer(), other.Writer(), "two clusters' keys of one second")
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

	other, err = New(t0.Add(time.Hour))
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

// TestStagedRotation: where two API servers run at once (a blue/green rollout), each step of a
// cluster's keys is one that the API servers of the step before and after can both read: what
// either writes, the other reads (kube-apiserver's own loader and transformers). A first key
// staged leaves Secrets in plain text; unstaged, it writes; a rotation stages the new key the
// same way.
func TestStagedRotation(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	first, err := New(t0)
	require.NoError(t, err)
	first.Staged = true
	assert.Empty(t, first.Writer(), "staged: plain text writes")
	assert.Equal(t, first.Keys[0].Name, first.Status("").Staged)

	live := first
	live.Staged = false
	live.Migrated = live.Writer()
	rotated := live
	ok, err := rotated.Rotate("r1", t0.Add(time.Hour))
	require.NoError(t, err)
	require.True(t, ok)
	rotated.Staged = true
	assert.Equal(t, live.Writer(), rotated.Writer(), "the staged key only reads")
	after := rotated
	after.Staged = false

	steps := []struct {
		name   string
		state  *State // nil: an API server without encryption
		prefix string // how what it writes begins in etcd
	}{
		{"no encryption", nil, ""},
		{"first key staged", &first, ""},
		{"first key writes", &live, Prefix + live.Keys[0].Name + ":"},
		{"new key staged", &rotated, Prefix + live.Keys[0].Name + ":"},
		{"new key writes", &after, Prefix + after.Keys[0].Name + ":"},
	}
	transformer := func(s *State) value.Transformer {
		if s == nil {
			return identity.NewEncryptCheckTransformer()
		}
		cfg, err := s.Config()
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), ConfigFile)
		require.NoError(t, os.WriteFile(path, cfg, 0o600))
		loaded, err := encryptionconfig.LoadEncryptionConfig(t.Context(), path, false, "test")
		require.NoError(t, err)
		return loaded.Transformers[schema.GroupResource{Resource: "secrets"}]
	}
	dataCtx := value.DefaultContext("/registry/secrets/default/s")
	for i := range steps {
		tr := transformer(steps[i].state)
		stored, err := tr.TransformToStorage(t.Context(), []byte("plain secret"), dataCtx)
		require.NoError(t, err)
		if steps[i].prefix == "" {
			assert.Equal(t, "plain secret", string(stored), steps[i].name)
		} else {
			assert.True(t, strings.HasPrefix(string(stored), steps[i].prefix), "%s: %.40q", steps[i].name, stored)
			assert.NotContains(t, string(stored), "plain secret")
		}
		for _, j := range []int{i - 1, i + 1} {
			if j < 0 || j >= len(steps) {
				continue
			}
			out, _, err := transformer(steps[j].state).TransformFromStorage(t.Context(), stored, dataCtx)
			require.NoError(t, err, "an API server at %q reads what one at %q writes", steps[j].name, steps[i].name)
			assert.Equal(t, "plain secret", string(out))
		}
	}
}
