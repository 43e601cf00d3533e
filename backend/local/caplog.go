package local

import (
	"os"
	"sync"
)

// maxLogBytes caps each process's log file. Processes log at warning level (etcd) or --v=0, so a
// healthy cluster writes a few KiB a day; a cluster in trouble (a crash loop, a client that makes
// the API server warn on every request) can write megabytes an hour, for months.
const maxLogBytes = 8 << 20

// cappedLog is a process's log that never grows past max bytes: when a write would pass it, the
// file is renamed to <path>.1 (replacing the one before) and a new file begun, so one process's
// log takes at most twice max on disk, and the newest lines are always in <path>.
type cappedLog struct {
	path string
	max  int64

	mu   sync.Mutex
	f    *os.File
	size int64
}

// openCappedLog opens (appends to) the log at path.
func openCappedLog(path string, max int64) (*cappedLog, error) {
	l := &cappedLog{path: path, max: max}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *cappedLog) open() error {
	f, err := os.OpenFile(l.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return err
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// Write writes p whole into the current file, first rotating when p would take the file past
// max (a single write larger than max still goes whole into a fresh file).
func (l *cappedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.size > 0 && l.size+int64(len(p)) > l.max {
		if err := l.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := l.f.Write(p)
	l.size += int64(n)
	return n, err
}

func (l *cappedLog) rotate() error {
	if err := l.f.Close(); err != nil {
		return err
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return err
	}
	return l.open()
}

// Close closes the current file.
func (l *cappedLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}
