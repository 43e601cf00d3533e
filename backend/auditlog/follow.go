package auditlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// Follow copies the file at path to out and follows it, as `tail -F` does, until ctx is done; then
// it returns nil. It checks the file every poll:
//
//   - until the file exists, it waits for it;
//   - it copies the file from its beginning, then what is appended to it;
//   - when the file is rotated (renamed away and a new file created at path), it copies what is
//     left of the old file and continues with the new one from its beginning; while no new file
//     exists yet it keeps reading the old one;
//   - when the file is truncated (smaller than what was read of it), it starts again from its
//     beginning.
//
// Only whole lines are written to out: a last line without its newline is held until the newline
// arrives. A line cut off by a rotation or a truncation, which cannot be completed, is written with
// a newline added rather than lost. A file rotated in and away again between two checks is missed,
// and so is a truncation after which the file grew back to what had been read before the next
// check. It returns an error when the file cannot be opened or read, or when out fails.
func Follow(ctx context.Context, path string, out io.Writer, poll time.Duration) error {
	if poll <= 0 {
		return fmt.Errorf("the poll interval must be positive, not %s", poll)
	}
	fl := &follower{path: path, out: out, buf: make([]byte, 64<<10)}
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

// check copies what was appended to the file since the last check, and moves on to the file at path
// when it was rotated or truncated.
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
	case !os.SameFile(open, now): // rotated
		if err := fl.copy(); err != nil { // what was written before the new file was created
			return err
		}
		if err := fl.flush(); err != nil {
			return err
		}
		fl.close()
		return fl.check() // the new file, from its beginning
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
