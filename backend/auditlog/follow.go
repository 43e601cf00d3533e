package auditlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Follow copies the file at path to out and follows it, as `tail -F` does, until ctx is done; then
// it returns nil. It checks the file every poll:
//
//   - until the file exists, it waits for it;
//   - it copies the file from its beginning, then what is appended to it;
//   - when the file is rotated (renamed away and a new file created at path), it copies what is
//     left of the old file, then every file rotated after it that it has not read (the file
//     was rotated in and away again between two checks), oldest first and each from its
//     beginning, and continues with the new one from its beginning; while no new file exists
//     yet it keeps reading the old one;
//   - when the file is truncated (smaller than what was read of it), it starts again from its
//     beginning.
//
// The rotated files are found as kube-apiserver's log rotation (lumberjack) names them: in path's
// folder, path's name with "-" and the time of the rotation before its extension
// (audit.log → audit-2026-11-27T08-00-00.000.log, the time in UTC), ordered by that time. The file
// it was following is recognised among them by its identity (os.SameFile), not its name; when it
// is not among them (the API server removed it already, or it was renamed to another name), the
// ones rotated after the millisecond of its last write (its modification time) are the newer ones. A file the API server removed (more than --audit-log-maxbackup rotations between two
// checks) before it was read is lost; so is a compressed one (--audit-log-compress), which is not
// read.
//
// Only whole lines are written to out: a last line without its newline is held until the newline
// arrives. A line cut off by a rotation or a truncation, which cannot be completed, is written with
// a newline added rather than lost. A truncation after which the file grew back to what had been
// read before the next check is missed. It returns an error when the file cannot be opened or
// read, or when out fails.
func Follow(ctx context.Context, path string, out io.Writer, poll time.Duration) error {
	if poll <= 0 {
		return fmt.Errorf("the poll interval must be positive, not %s", poll)
	}
	fl := newFollower(path, out)
	defer fl.close()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if err := fl.check(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// follower is the state of a Follow.
type follower struct {
	path    string
	out     io.Writer
	f       *os.File // the file followed; nil until the file at path exists
	off     int64    // how much of f was read
	partial []byte   // what was read of f after its last newline
	buf     []byte
}

func newFollower(path string, out io.Writer) *follower {
	return &follower{path: path, out: out, buf: make([]byte, 64<<10)}
}

// check copies what was appended to the file since the last check, and moves on to the file at path
// when it was rotated (through the files rotated after it) or truncated.
func (fl *follower) check() error {
	if fl.f == nil {
		f, err := os.Open(fl.path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // not yet
		}
		if err != nil {
			return err
		}
		fl.f, fl.off, fl.partial = f, 0, nil
	}
	if err := fl.copy(); err != nil {
		return err
	}
	open, err := fl.f.Stat()
	if err != nil {
		return err
	}
	now, err := os.Stat(fl.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // renamed away and no new file yet: what is still written to the old one counts
	case err != nil:
		return err
	case !os.SameFile(open, now):
		return fl.followRotation()
	case open.Size() < fl.off: // truncated
		if err := fl.flush(); err != nil {
			return err
		}
		if _, err := fl.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		fl.off = 0
		return fl.copy()
	}
	return nil
}

// followRotation copies what is left of the file followed, then the files rotated after it, and
// moves on to the file at path.
func (fl *follower) followRotation() error {
	if err := fl.copy(); err != nil { // what was written before the new file was created
		return err
	}
	// The new file is opened before the rotated ones are listed: a file rotated after it is then
	// listed after it, and read at a later check.
	next, err := os.Open(fl.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // rotated away again, and no new file yet
	}
	if err != nil {
		return err
	}
	if err := fl.copyRotatedBefore(next); err != nil {
		_ = next.Close()
		return err
	}
	if err := fl.moveTo(next); err != nil {
		return err
	}
	return fl.check() // the new file, from its beginning
}

// copyRotatedBefore copies, oldest first and each from its beginning, the files rotated after the
// file followed and before next, the file now at path.
func (fl *follower) copyRotatedBefore(next *os.File) error {
	names, err := fl.rotatedAfter(next)
	if err != nil {
		return err
	}
	for _, name := range names {
		f, err := os.Open(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed by the API server (--audit-log-maxbackup) before it was read
		}
		if err != nil {
			return err
		}
		if err := fl.moveTo(f); err != nil {
			return err
		}
		if err := fl.copy(); err != nil {
			return err
		}
	}
	return nil
}

// moveTo ends the file followed, writing a line it cut off, and follows f from its beginning.
func (fl *follower) moveTo(f *os.File) error {
	err := fl.flush()
	fl.close()
	fl.f, fl.off, fl.partial = f, 0, fl.partial[:0]
	return err
}

// backup is a file rotated away from the follower's path, and the time of its rotation.
type backup struct {
	name string
	at   time.Time
	info os.FileInfo
}

// rotatedAfter lists, oldest first, the files rotated from path after the file followed and before
// next, the file now at path.
func (fl *follower) rotatedAfter(next *os.File) ([]string, error) {
	followed, err := fl.f.Stat()
	if err != nil {
		return nil, err
	}
	nextInfo, err := next.Stat()
	if err != nil {
		return nil, err
	}
	all, err := backups(fl.path)
	if err != nil {
		return nil, err
	}
	end := len(all)
	for i, r := range all {
		if os.SameFile(r.info, nextInfo) { // rotated away already: read at a later check
			end = i
			break
		}
	}
	start := -1
	for i, r := range all[:end] {
		if os.SameFile(r.info, followed) {
			start = i + 1
			break
		}
	}
	if start < 0 { // removed, or renamed to another name: the ones rotated after its last write
		last := followed.ModTime().UTC().Truncate(time.Millisecond)
		start = sort.Search(end, func(i int) bool { return all[i].at.After(last) })
	}
	var names []string
	for _, r := range all[start:end] {
		names = append(names, r.name)
	}
	return names, nil
}

// backupTimeFormat is the time in the name of a rotated file (gopkg.in/natefinch/lumberjack.v2,
// in UTC: kube-apiserver does not set its LocalTime).
const backupTimeFormat = "2006-01-02T15-04-05.000"

// backups lists the files rotated away from path, oldest first: in its folder, its name
// with "-" and the time of the rotation before its extension.
func backups(path string) ([]backup, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ext := filepath.Ext(base)
	prefix := strings.TrimSuffix(base, ext) + "-"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []backup
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ext) ||
			len(name) < len(prefix)+len(ext) {
			continue
		}
		at, err := time.Parse(backupTimeFormat, name[len(prefix):len(name)-len(ext)])
		if err != nil {
			continue // not a rotated file
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since
		}
		if err != nil {
			return nil, err
		}
		out = append(out, backup{name: filepath.Join(dir, name), at: at, info: info})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out, nil
}

// copy reads f to its end and writes its whole lines to out, holding a last partial line back.
func (fl *follower) copy() error {
	for {
		n, err := fl.f.Read(fl.buf)
		if n > 0 {
			fl.off += int64(n)
			fl.partial = append(fl.partial, fl.buf[:n]...)
			if i := bytes.LastIndexByte(fl.partial, '\n'); i >= 0 {
				if _, werr := fl.out.Write(fl.partial[:i+1]); werr != nil {
					return werr
				}
				fl.partial = append(fl.partial[:0], fl.partial[i+1:]...)
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// flush writes a partial line that will not be completed (its file was rotated or truncated), with
// a newline added.
func (fl *follower) flush() error {
	if len(fl.partial) == 0 {
		return nil
	}
	_, err := fl.out.Write(append(fl.partial, '\n'))
	fl.partial = fl.partial[:0]
	return err
}

// close closes the file followed, if any.
func (fl *follower) close() {
	if fl.f != nil {
		_ = fl.f.Close()
		fl.f = nil
	}
}
