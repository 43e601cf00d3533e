package local

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCappedLog(t *testing.T) {
	for _, tc := range []struct {
		name      string
		existing  string // the file's content before it is opened
		writes    []string
		wantFile  string
		wantOld   string
		wantNoOld bool
	}{
		{name: "under the cap", writes: []string{"aaaa", "bbbb"}, wantFile: "aaaabbbb", wantNoOld: true},
		{name: "exactly the cap", writes: []string{"aaaaa", "bbbbb"}, wantFile: "aaaaabbbbb", wantNoOld: true},
		{name: "past the cap rotates", writes: []string{"aaaaa", "bbbbb", "c"}, wantFile: "c", wantOld: "aaaaabbbbb"},
		{name: "a second rotation replaces the old file", writes: []string{"aaaaaaaa", "bbbbbbbb", "cccccccc"}, wantFile: "cccccccc", wantOld: "bbbbbbbb"},
		{name: "a write larger than the cap goes whole into a fresh file", writes: []string{"aa", strings.Repeat("x", 25)}, wantFile: strings.Repeat("x", 25), wantOld: "aa"},
		{name: "appends to an existing file and counts it", existing: "old-old-", writes: []string{"new"}, wantFile: "new", wantOld: "old-old-"},
		{name: "appends below the cap", existing: "old", writes: []string{"new"}, wantFile: "oldnew", wantNoOld: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "p.log")
			if tc.existing != "" {
				require.NoError(t, os.WriteFile(path, []byte(tc.existing), 0o600))
			}
			l, err := openCappedLog(path, 10)
			require.NoError(t, err)
			for _, w := range tc.writes {
				n, err := l.Write([]byte(w))
				require.NoError(t, err)
				assert.Equal(t, len(w), n)
			}
			require.NoError(t, l.Close())
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, tc.wantFile, string(got))
			old, err := os.ReadFile(path + ".1")
			if tc.wantNoOld {
				assert.True(t, os.IsNotExist(err), "no rotated file")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantOld, string(old))
			fi, err := os.Stat(path)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
		})
	}
}

// TestCappedLogConcurrent: writers in parallel (a process's stdout and stderr) never interleave
// within a line, and the files stay within the cap.
func TestCappedLogConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.log")
	const max = 4096
	l, err := openCappedLog(path, max)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 500 {
				_, err := fmt.Fprintf(l, "writer %d line %04d %s\n", w, i, strings.Repeat("-", 40))
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	require.NoError(t, l.Close())
	for _, f := range []string{path, path + ".1"} {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.LessOrEqual(t, len(data), max, f)
		for _, line := range bytes.Split(bytes.TrimSuffix(data, []byte("\n")), []byte("\n")) {
			assert.Regexp(t, `^writer \d line \d{4} -{40}$`, string(line))
		}
	}
}

// TestStartProcessLogCapped: a process's output goes through the capped log.
func TestStartProcessLogCapped(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "logs", "p.log")
	// Twice the cap and a bit, in lines of 1 KiB.
	script := fmt.Sprintf("i=0; while [ $i -lt %d ]; do printf '%%01023d\\n' $i; i=$((i+1)); done", 2*maxLogBytes/1024+10)
	p, err := startProcess("/bin/sh", []string{"-c", script}, nil, dir, logPath)
	require.NoError(t, err)
	<-p.done
	require.NoError(t, p.err)
	cur, err := os.Stat(logPath)
	require.NoError(t, err)
	old, err := os.Stat(logPath + ".1")
	require.NoError(t, err)
	assert.LessOrEqual(t, cur.Size(), int64(maxLogBytes))
	assert.LessOrEqual(t, old.Size(), int64(maxLogBytes))
	data, err := os.ReadFile(logPath)
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(string(data), fmt.Sprintf("%01023d\n", 2*maxLogBytes/1024+9)), "the newest line is in the current file")
}
