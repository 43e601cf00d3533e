package frontdoor

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"
)

// AnnotationPrefix starts the annotations of the control plane's Lease in which each door pod
// reports its use (AnnotationFor): a hosted door runs in a pod of its own, so it tells the
// operator through the host's API server, the only thing both reach.
const AnnotationPrefix = "frontdoor.clusters.openmcp.cloud/"

// AnnotationFor is the annotation of the Lease in which the door of pod reports its Usage.
func AnnotationFor(pod string) string { return AnnotationPrefix + pod }

// Usage is what one door reports of its use.
type Usage struct {
	// Open is the number of client connections it passes on now (a watch is one).
	Open int64 `json:"open"`
	// LastOpened is when a client connection last opened: after a hibernation, the request that
	// wakes the cluster.
	LastOpened time.Time `json:"lastOpened,omitzero"`
	// LastUsed is when a client connection last opened or closed: the idle clock starts there.
	LastUsed time.Time `json:"lastUsed,omitzero"`
}

// Usages reads the Usage of each door pod from the annotations of a Lease; an annotation that
// does not parse is left out (a door writes only what parses).
func Usages(annotations map[string]string) map[string]Usage {
	out := map[string]Usage{}
	for k, v := range annotations {
		pod, ok := strings.CutPrefix(k, AnnotationPrefix)
		if !ok || pod == "" {
			continue
		}
		var u Usage
		if json.Unmarshal([]byte(v), &u) == nil {
			out[pod] = u
		}
	}
	return out
}

// Reporter sends a door's Usage with report: the first change after a quiet Every at once (the
// request that wakes a hibernated cluster is seen at once), then at most one report per Every,
// with the latest Usage. A report that fails is sent again a second later.
type Reporter struct {
	Every  time.Duration
	report func(ctx context.Context, u *Usage) error

	mu     sync.Mutex
	usage  Usage
	dirty  bool
	signal chan struct{}
}

// NewReporter makes a Reporter that sends with report (nil Usage: the door is gone).
func NewReporter(every time.Duration, report func(ctx context.Context, u *Usage) error) *Reporter {
	return &Reporter{Every: every, report: report, signal: make(chan struct{}, 1)}
}

// Changed records that the door passes on open connections now (Door.OnChange).
func (r *Reporter) Changed(open int64) {
	now := time.Now()
	r.mu.Lock()
	if open > r.usage.Open {
		r.usage.LastOpened = now
	}
	r.usage.Open, r.usage.LastUsed, r.dirty = open, now, true
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// Run sends the reports until ctx ends (the first one at once: the door is there and has no
// client), then reports the door gone, within a few seconds.
func (r *Reporter) Run(ctx context.Context) {
	r.mu.Lock()
	r.dirty = true
	r.mu.Unlock()
	var last time.Time
	for {
		if wait := time.Until(last.Add(r.Every)); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			break
		}
		r.mu.Lock()
		u, dirty := r.usage, r.dirty
		r.dirty = false
		r.mu.Unlock()
		if dirty {
			last = time.Now()
			if err := r.report(ctx, &u); err != nil {
				r.mu.Lock()
				r.dirty = true
				r.mu.Unlock()
				last = last.Add(time.Second - r.Every) // again in a second
				continue
			}
		}
		select {
		case <-ctx.Done():
		case <-r.signal:
		}
		if ctx.Err() != nil {
			break
		}
	}
	gone, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = r.report(gone, nil)
}

// DialRetry connects to the API server at addr, trying again every retry while it refuses or
// cannot be reached (it is woken, restarted or rolled), until ctx ends. After each refused
// attempt, sooner, when not nil, may return a connection another way (an API server that
// serves before addr reaches it); nil when it has none yet.
func DialRetry(ctx context.Context, addr string, retry time.Duration, sooner func(context.Context) net.Conn) (net.Conn, error) {
	var d net.Dialer
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := d.DialContext(attempt, "tcp", addr)
		cancel()
		if err == nil {
			return c, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			return nil, err
		}
		if sooner != nil {
			if c := sooner(ctx); c != nil {
				return c, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(retry):
		}
	}
}

// retryable: the API server is not there yet (refused, unreachable, timed out, no such host
// while its Service's name is not known yet).
func retryable(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &dns) || errors.Is(err, syscall.ECONNRESET)
}
