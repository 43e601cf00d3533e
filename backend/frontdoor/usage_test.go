package frontdoor

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReporter: the first report goes at once, a burst of changes within Every is one report
// with the latest Usage, a failed report is sent again, and the door is reported gone at its end.
func TestReporter(t *testing.T) {
	var mu sync.Mutex
	var got []*Usage
	var at []time.Time
	fail := 1 // the second report fails once
	r := NewReporter(300*time.Millisecond, func(_ context.Context, u *Usage) error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 1 && fail > 0 {
			fail--
			return assert.AnError
		}
		got, at = append(got, u), append(at, time.Now())
		return nil
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	require.Eventually(t, func() bool { return count() == 1 }, 5*time.Second, 5*time.Millisecond, "the first report at once")
	before := time.Now()
	r.Changed(1)
	r.Changed(2)
	r.Changed(1)
	r.Changed(0)
	require.Eventually(t, func() bool { return count() == 2 }, 5*time.Second, 5*time.Millisecond, "the burst reported (after the failed try)")
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 3)
	assert.Equal(t, int64(0), got[0].Open)
	assert.Equal(t, int64(0), got[1].Open, "the latest Usage of the burst")
	assert.False(t, got[1].LastOpened.Before(before), "a connection opened in the burst")
	assert.False(t, got[1].LastUsed.Before(got[1].LastOpened))
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), 300*time.Millisecond, "at most one report per Every")
	assert.Nil(t, got[2], "the door reported gone")
}

func TestUsages(t *testing.T) {
	now := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	u := Usages(map[string]string{
		AnnotationFor("door-a"): `{"open":2,"lastOpened":"2026-11-28T07:00:00Z","lastUsed":"2026-11-28T07:00:00Z"}`,
		AnnotationFor("door-b"): `not json`,
		AnnotationPrefix:        `{"open":1}`,
		"other":                 `{"open":1}`,
	})
	assert.Equal(t, map[string]Usage{"door-a": {Open: 2, LastOpened: now, LastUsed: now}}, u)
}

// TestDialRetry: a dial to a port nothing listens on yet is tried again until the API server
// listens; a context that ends stops it.
func TestDialRetry(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	dialed := make(chan error, 1)
	go func() {
		c, err := DialRetry(context.Background(), addr, 20*time.Millisecond, nil)
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	select {
	case err := <-dialed:
		t.Fatalf("connected before anything listened: %v", err)
	case <-time.After(100 * time.Millisecond): // several refused tries
	}
	l, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	defer l.Close()
	select {
	case err := <-dialed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("no connection once the server listened")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	l.Close()
	_, err = DialRetry(ctx, addr, 20*time.Millisecond, nil)
	assert.Error(t, err, "nothing listens and the context ended")
}

// FuzzUsages: whatever a Lease's annotations hold, Usages does not panic, reads only the
// annotations of AnnotationPrefix with a pod name, and reads back what a door wrote.
func FuzzUsages(f *testing.F) {
	f.Add("door-a", `{"open":1,"lastOpened":"2026-11-28T07:00:00Z"}`, int64(3))
	f.Add("", `{}`, int64(0))
	f.Add("x", `{"open":"no"}`, int64(-1))
	f.Fuzz(func(t *testing.T, pod, value string, open int64) {
		got := Usages(map[string]string{AnnotationFor(pod): value, "other/" + pod: value})
		for p := range got {
			if p != pod || p == "" {
				t.Fatalf("read pod %q from the annotation of %q", p, pod)
			}
		}
		if pod == "" {
			return
		}
		u := Usage{Open: open, LastOpened: time.Unix(open, 0).UTC(), LastUsed: time.Unix(open/2, 0).UTC()}
		b, err := json.Marshal(u)
		if err != nil {
			t.Skip("no JSON for a time beyond year 9999: no door writes one")
		}
		back := Usages(map[string]string{AnnotationFor(pod): string(b)})
		if !back[pod].LastOpened.Equal(u.LastOpened) || back[pod].Open != u.Open || !back[pod].LastUsed.Equal(u.LastUsed) {
			t.Fatalf("wrote %+v, read %+v", u, back[pod])
		}
	})
}
