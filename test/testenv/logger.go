package testenv

import (
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

// Logger returns a logger that writes to tb's log until tb's cleanups run and drops what comes
// after. A manager's event broadcaster records each Event on a goroutine of its own that nothing
// waits for: when it fails after the manager stopped (the API server refuses it, or is gone), it
// logs, and a testing.T that has completed panics on Log ("Log in goroutine after ... has
// completed"). Create the logger before the manager so that its cleanup runs after the manager's.
func Logger(tb testing.TB) logr.Logger {
	l := &closingLog{tb: tb}
	tb.Cleanup(l.close)
	return testr.NewWithInterface(l, testr.Options{})
}

// closingLog is tb's Log until close; the mutex makes close wait for a Log under way.
type closingLog struct {
	mu     sync.Mutex
	tb     testing.TB
	closed bool
}

func (l *closingLog) Helper() { l.tb.Helper() }

func (l *closingLog) Log(args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.tb.Log(args...)
	}
}

func (l *closingLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
}
