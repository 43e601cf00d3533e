package auditlog

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	poll    = 10 * time.Millisecond
	timeout = 5 * time.Second
)

// lineWriter is a thread-safe io.Writer that records what Follow writes and signals every write.
type lineWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	writes  []string      // every Write, to check that each ends a line
	changed chan struct{} // closed and replaced at every Write
}

func newLineWriter() *lineWriter { return &lineWriter{changed: make(chan struct{})} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	w.writes = append(w.writes, string(p))
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

// await waits until exactly want was written, and checks that every write ended a line.
func (w *lineWriter) await(t *testing.T, want string) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		w.mu.Lock()
		got, changed, writes := w.buf.String(), w.changed, append([]string(nil), w.writes...)
		w.mu.Unlock()
		for _, s := range writes {
			require.Truef(t, len(s) > 0 && s[len(s)-1] == '\n', "a write that does not end a line: %q", s)
		}
		if got == want {
			return
		}
		require.Truef(t, len(got) < len(want) && want[:len(got)] == got, "written %q, want %q", got, want)
		select {
		case <-changed:
		case <-deadline.C:
			require.Failf(t, "timed out", "written %q after %s, want %q", got, timeout, want)
		}
	}
}

// follow runs Follow on path into a lineWriter until the test ends, and checks it returned nil.
func follow(t *testing.T, path string) *lineWriter {
	t.Helper()
	w := newLineWriter()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Follow(ctx, path, w, poll) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(timeout):
			t.Errorf("Follow did not return %s after its context was cancelled", timeout)
		}
	})
	return w
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// followStep is a step of a TestFollow case: a change to the followed file.
type followStep struct {
	do   func(t *testing.T, path string)
	want string // all that was written to out after it
}

// followCase is a case of TestFollow.
type followCase struct {
	name   string
	before *string // the file's content before Follow starts; nil: no file
	want   string  // what is written of it
	steps  []followStep
}

func appendLines(s string) func(*testing.T, string) {
	return func(t *testing.T, path string) { appendFile(t, path, s) }
}

// followWriteCases are the cases of TestFollow where the file is only written to.
func followWriteCases() []followCase {
	return []followCase{{
		name:   "lines written before it starts",
		before: ptr("one\ntwo\nthree\n"),
		want:   "one\ntwo\nthree\n",
	}, {
		name:   "an empty file",
		before: ptr(""),
		want:   "",
		steps:  []followStep{{appendLines("one\n"), "one\n"}},
	}, {
		name:   "appended lines",
		before: ptr("one\n"),
		want:   "one\n",
		steps: []followStep{
			{appendLines("two\nthree\n"), "one\ntwo\nthree\n"},
			{appendLines("four\n"), "one\ntwo\nthree\nfour\n"},
		},
	}, {
		name:   "a partial line held until its newline",
		before: ptr("one\ntw"),
		want:   "one\n",
		steps: []followStep{
			{appendLines("o and a"), "one\n"},
			{appendLines(" half\nthr"), "one\ntwo and a half\n"},
			{appendLines("ee\n"), "one\ntwo and a half\nthree\n"},
		},
	}}
}

// followReplaceCases are the cases of TestFollow where the file is rotated, truncated or created.
func followReplaceCases() []followCase {
	return []followCase{{
		name:   "a rotation: renamed away, written to, a new file created",
		before: ptr("one\n"),
		want:   "one\n",
		steps: []followStep{
			{func(t *testing.T, path string) {
				rotated := filepath.Join(filepath.Dir(path), "audit-2026-01-02T03-04-05.000.log")
				require.NoError(t, os.Rename(path, rotated))
				appendFile(t, rotated, "two\n") // written by the API server before it reopened
				appendFile(t, path, "three\n")
			}, "one\ntwo\nthree\n"},
			{appendLines("four\n"), "one\ntwo\nthree\nfour\n"}, // nothing of either file twice
		},
	}, {
		name:   "a rotation while the new file is not there yet",
		before: ptr("one\n"),
		want:   "one\n",
		steps: []followStep{
			{func(t *testing.T, path string) {
				rotated := filepath.Join(filepath.Dir(path), "audit-2026-01-02T03-04-05.000.log")
				require.NoError(t, os.Rename(path, rotated))
				appendFile(t, rotated, "two\n")
			}, "one\ntwo\n"},
			{appendLines("three\n"), "one\ntwo\nthree\n"},
			{appendLines("four\n"), "one\ntwo\nthree\nfour\n"},
		},
	}, {
		name:   "a partial line cut off by a rotation",
		before: ptr("one\ntw"),
		want:   "one\n",
		steps: []followStep{
			{func(t *testing.T, path string) {
				require.NoError(t, os.Rename(path, path+".1"))
				appendFile(t, path, "three\n")
			}, "one\ntw\nthree\n"},
		},
	}, {
		name:   "a truncation starts again from the beginning",
		before: ptr("one\ntwo\nthree\n"),
		want:   "one\ntwo\nthree\n",
		steps: []followStep{
			{func(t *testing.T, path string) {
				require.NoError(t, os.WriteFile(path, []byte("four\n"), 0o600)) // truncates
			}, "one\ntwo\nthree\nfour\n"},
			{appendLines("five\n"), "one\ntwo\nthree\nfour\nfive\n"},
		},
	}, {
		name: "the file created after it started",
		want: "",
		steps: []followStep{
			{appendLines("one\ntwo\n"), "one\ntwo\n"},
			{appendLines("three\n"), "one\ntwo\nthree\n"},
		},
	}}
}

func TestFollow(t *testing.T) {
	for _, tt := range append(followWriteCases(), followReplaceCases()...) {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			if tt.before != nil {
				require.NoError(t, os.WriteFile(path, []byte(*tt.before), 0o600))
			}
			w := follow(t, path)
			w.await(t, tt.want)
			for _, s := range tt.steps {
				s.do(t, path)
				w.await(t, s.want)
			}
		})
	}
}

func TestFollowReturnsNilWhenCancelled(t *testing.T) {
	for _, exists := range []bool{true, false} {
		t.Run(map[bool]string{true: "following a file", false: "waiting for the file"}[exists], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "audit.log")
			if exists {
				require.NoError(t, os.WriteFile(path, []byte("one\n"), 0o600))
			}
			ctx, cancel := context.WithCancel(context.Background())
			w := newLineWriter()
			done := make(chan error, 1)
			go func() { done <- Follow(ctx, path, w, poll) }()
			if exists {
				w.await(t, "one\n") // it is following
			}
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(timeout):
				t.Fatalf("Follow did not return %s after its context was cancelled", timeout)
			}
		})
	}
}

func TestFollowRefusesANonPositivePoll(t *testing.T) {
	err := Follow(context.Background(), filepath.Join(t.TempDir(), "audit.log"), newLineWriter(), 0)
	require.ErrorContains(t, err, "poll interval must be positive")
}

func ptr(s string) *string { return &s }

// rotator does to a log file what kube-apiserver's log rotation (lumberjack) does: it writes to
// the file, renames it to its name with "-" and the time of the rotation before its extension and
// creates a new one. Its clock starts at the test's start and moves on a second at every rotation;
// every write sets the file's modification time to it, so that the times of writes and rotations
// are in the order a real clock would give them.
type rotator struct {
	t     *testing.T
	path  string
	clock time.Time
}

func newRotator(t *testing.T, path string) *rotator {
	return &rotator{t: t, path: path, clock: time.Now().UTC().Truncate(time.Millisecond)}
}

// backupName is the name of the file rotated at at.
func (r *rotator) backupName(at time.Time) string {
	ext := filepath.Ext(r.path)
	return strings.TrimSuffix(r.path, ext) + "-" + at.UTC().Format("2006-01-02T15-04-05.000") + ext
}

func (r *rotator) write(s string) {
	appendFile(r.t, r.path, s)
	require.NoError(r.t, os.Chtimes(r.path, r.clock, r.clock))
}

// rotate renames the file away and returns its new name; create says whether a new file is created.
func (r *rotator) rotate(create bool) string {
	r.clock = r.clock.Add(time.Second)
	name := r.backupName(r.clock)
	require.NoError(r.t, os.Rename(r.path, name))
	if create {
		r.write("")
	}
	return name
}

// rotationRound is a round of a TestFollowAcrossRotations case: what is done to the folder
// before the next check.
type rotationRound struct {
	do   func(r *rotator)
	want string // all that was written to out after the check that follows
}

// rotationCase is a case of TestFollowAcrossRotations.
type rotationCase struct {
	name   string
	before func(r *rotator) // the folder before the first check
	rounds []rotationRound
}

// rotatorWrite is a round or a before that writes s to the file followed.
func rotatorWrite(s string) func(*rotator) { return func(r *rotator) { r.write(s) } }

// rotatedBetweenChecksCases are the cases of TestFollowAcrossRotations where the file followed is
// rotated more than once between two checks.
func rotatedBetweenChecksCases() []rotationCase {
	return []rotationCase{{
		name:   "rotated twice between two checks",
		before: rotatorWrite("one\n"),
		rounds: []rotationRound{{func(r *rotator) {
			r.write("two\n")
			r.rotate(true)
			r.write("three\n")
			r.rotate(true)
			r.write("four\n")
		}, "one\ntwo\nthree\nfour\n"}, {
			rotatorWrite("five\n"), "one\ntwo\nthree\nfour\nfive\n", // nothing twice
		}},
	}, {
		name:   "rotated three times, lines cut off",
		before: rotatorWrite("one\n"),
		rounds: []rotationRound{{func(r *rotator) {
			r.write("two\nha")
			r.rotate(true)
			r.write("three\n")
			r.rotate(true)
			r.write("fo")
			r.rotate(true)
			r.write("five\nsi")
		}, "one\ntwo\nha\nthree\nfo\nfive\n"}, {
			rotatorWrite("x\n"), "one\ntwo\nha\nthree\nfo\nfive\nsix\n",
		}},
	}, {
		name: "rotated files from before it started, and other files, are not copied",
		before: func(r *rotator) {
			r.write("old\n")
			r.rotate(true)
			r.write("one\n")
			for _, name := range []string{"audit.log.1", "audit-backup.log", "other-2026-01-02T03-04-05.000.log"} {
				appendFile(r.t, filepath.Join(filepath.Dir(r.path), name), "other\n")
			}
		},
		rounds: []rotationRound{{func(r *rotator) {
			r.rotate(true)
			r.write("two\n")
			r.rotate(true)
			r.write("three\n")
		}, "one\ntwo\nthree\n"}},
	}}
}

// filesGoneCases are the cases of TestFollowAcrossRotations where a file is missing, removed or
// renamed to another name.
func filesGoneCases() []rotationCase {
	return []rotationCase{{
		name:   "rotated twice, the second new file not there yet",
		before: rotatorWrite("one\n"),
		rounds: []rotationRound{{func(r *rotator) {
			r.write("two\n")
			r.rotate(true)
			r.write("three\n")
			r.rotate(false)
		}, "one\ntwo\n"}, {
			rotatorWrite("four\n"), "one\ntwo\nthree\nfour\n",
		}},
	}, {
		name: "the file followed removed (more rotations than backups kept)",
		before: func(r *rotator) {
			r.write("old\n")
			r.rotate(true)
			r.write("one\n")
		},
		rounds: []rotationRound{{func(r *rotator) {
			r.write("two\n")
			followed := r.rotate(true)
			r.write("three\n")
			r.rotate(true)
			require.NoError(r.t, os.Remove(followed)) // what it read to its end: it holds it open
			r.write("four\n")
		}, "one\ntwo\nthree\nfour\n"}},
	}, {
		name: "renamed to another name: older rotated files are not copied",
		before: func(r *rotator) {
			r.write("old\n")
			r.rotate(true)
			r.write("one\n")
		},
		rounds: []rotationRound{{func(r *rotator) {
			r.write("two\n")
			require.NoError(r.t, os.Rename(r.path, r.path+".1"))
			r.write("three\n")
		}, "one\ntwo\nthree\n"}},
	}}
}

// TestFollowAcrossRotations: files rotated in and away again between two checks are copied, each
// line exactly once and in order, and no other file of the folder is.
func TestFollowAcrossRotations(t *testing.T) {
	for _, tt := range append(rotatedBetweenChecksCases(), filesGoneCases()...) {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			r := newRotator(t, filepath.Join(dir, "audit.log"))
			tt.before(r)
			w := newLineWriter()
			fl := newFollower(r.path, w)
			defer fl.close()
			require.NoError(t, fl.check())
			for _, rd := range tt.rounds {
				rd.do(r)
				require.NoError(t, fl.check())
				require.Equal(t, rd.want, w.buf.String())
				for _, s := range w.writes {
					require.Truef(t, strings.HasSuffix(s, "\n"), "a write that does not end a line: %q", s)
				}
			}
		})
	}
}

// TestRotatedAfterStopsAtTheNewFile: a new file rotated away again after the follower opened it,
// and the ones rotated after it, are left for a later check, which reads them after the new file.
func TestRotatedAfterStopsAtTheNewFile(t *testing.T) {
	r := newRotator(t, filepath.Join(t.TempDir(), "audit.log"))
	r.write("one\n")
	fl := newFollower(r.path, newLineWriter())
	defer fl.close()
	require.NoError(t, fl.check())
	r.rotate(true)
	r.write("two\n")
	between := r.rotate(true)
	next, err := os.Open(r.path)
	require.NoError(t, err)
	defer func() { require.NoError(t, next.Close()) }()
	r.rotate(true) // the new file, rotated away after it was opened
	r.rotate(true)
	names, err := fl.rotatedAfter(next)
	require.NoError(t, err)
	require.Equal(t, []string{between}, names)
}
