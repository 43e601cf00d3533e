package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLockStateDir: a second taker of the lock waits, hears who holds it, and gets it once the
// holder closes it; a taker whose context ends gives up without the lock.
func TestLockStateDir(t *testing.T) {
	dir := t.TempDir()
	first, err := lockStateDir(t.Context(), dir, func(string) { t.Error("the free lock was waited for") })
	require.NoError(t, err)
	require.NotNil(t, first)
	host, _ := os.Hostname()
	holder := "PID " + strconv.Itoa(os.Getpid()) + " on " + host

	ctx, cancel := context.WithTimeout(t.Context(), 3*lockRetry)
	defer cancel()
	got, err := lockStateDir(ctx, dir, func(string) {})
	require.NoError(t, err)
	assert.Nil(t, got, "no lock once the context ended")

	heard := make(chan string, 10)
	type result struct {
		f   *os.File
		err error
	}
	done := make(chan result, 1)
	go func() {
		f, err := lockStateDir(t.Context(), dir, func(h string) { heard <- h })
		done <- result{f, err}
	}()
	select {
	case h := <-heard:
		assert.Equal(t, holder, h)
	case r := <-done:
		t.Fatalf("the lock was taken twice: %+v", r)
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting taker never said who holds the lock")
	}
	require.NoError(t, first.Close())
	r := <-done
	require.NoError(t, r.err)
	require.NotNil(t, r.f)
	defer r.f.Close()
	assert.Equal(t, holder, readHolder(filepath.Join(dir, lockFile)), "the new holder wrote its PID")
}
