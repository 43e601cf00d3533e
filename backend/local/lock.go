package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// lockFile in --state-dir is locked (flock, exclusive) by the process that runs its clusters, for
// as long as it runs them. Leader election decides which replica reconciles; this lock makes sure,
// whatever the lease says (a paused process, clocks far apart), that two processes never run the
// clusters of one folder: etcd's data would be written by two etcds. The kernel releases it when
// the process ends, however it ends. It holds the holder's PID and host, for the message of a
// process that waits.
const lockFile = ".lock"

// lockRetry is how often a waiting backend tries the lock again.
const lockRetry = 250 * time.Millisecond

// lockStateDir takes the lock of dir, trying again every lockRetry while another process holds
// it; waiting hears who does, once per holder. It returns the open lock file (closing it releases
// the lock), or nil when ctx ends first.
func lockStateDir(ctx context.Context, dir string, waiting func(holder string)) (*os.File, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the lock of --state-dir: %w", err)
	}
	last := ""
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		if holder := readHolder(path); holder != last {
			last = holder
			waiting(holder)
		}
		t := time.NewTimer(lockRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			_ = f.Close()
			return nil, nil
		case <-t.C:
		}
	}
	host, _ := os.Hostname()
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%d %s\n", os.Getpid(), host)), 0)
	}
	return f, nil
}

// readHolder describes the process named in the lock file at path.
func readHolder(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return "unknown"
	}
	if _, err := strconv.Atoi(fields[0]); err != nil {
		return "unknown"
	}
	return "PID " + fields[0] + " on " + fields[1]
}
