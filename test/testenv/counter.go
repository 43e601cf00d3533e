package testenv

import (
	"maps"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// RequestCounter counts the requests of one client by verb (VerbOf) at its transport: set Wrap as
// the client's rest.Config.WrapTransport. It closes Finished once it has seen Want successful
// requests of DoneVerb, and remembers when the first and the last of those were answered.
type RequestCounter struct {
	mu       sync.Mutex
	counts   map[string]int64
	ok       map[string]int64
	doneVerb string
	want     int64
	finished chan struct{}
	once     sync.Once
	first    time.Time
	last     time.Time
}

// NewRequestCounter returns a counter that finishes after want successful doneVerb requests.
func NewRequestCounter(doneVerb string, want int) *RequestCounter {
	return &RequestCounter{counts: map[string]int64{}, ok: map[string]int64{}, doneVerb: doneVerb, want: int64(want), finished: make(chan struct{})}
}

// Wrap counts the requests that pass through rt.
func (c *RequestCounter) Wrap(rt http.RoundTripper) http.RoundTripper {
	return RoundTripperFunc(func(req *http.Request) (*http.Response, error) {
		verb := VerbOf(req)
		resp, err := rt.RoundTrip(req)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.counts[verb]++
		if err == nil && resp.StatusCode < 300 {
			c.ok[verb]++
			if verb == c.doneVerb {
				if c.ok[verb] == 1 {
					c.first = time.Now()
				}
				c.last = time.Now()
			}
		}
		if c.ok[c.doneVerb] >= c.want {
			c.once.Do(func() { close(c.finished) })
		}
		return resp, err
	})
}

// Finished is closed once the counter has seen the wanted number of successful requests.
func (c *RequestCounter) Finished() <-chan struct{} { return c.finished }

// Steady is the time from the first successful done-verb request's answer to the last's.
func (c *RequestCounter) Steady() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last.Sub(c.first)
}

// Snapshot returns the counts so far, successful or not, by verb.
func (c *RequestCounter) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.counts)
}

// VerbOf names a request as the API server would: GET (one object), LIST, WATCH, POST, PATCH,
// statusPATCH, DELETE, or other (discovery, ...). Event writes count like any other object's.
func VerbOf(req *http.Request) string {
	path := req.URL.Path
	var rest string
	switch {
	case strings.HasPrefix(path, "/api/v1/"):
		rest = strings.TrimPrefix(path, "/api/v1/")
	case strings.HasPrefix(path, "/apis/"):
		if parts := strings.SplitN(strings.TrimPrefix(path, "/apis/"), "/", 3); len(parts) == 3 {
			rest = parts[2]
		}
	}
	segments := strings.Split(rest, "/")
	if len(segments) >= 3 && segments[0] == "namespaces" {
		segments = segments[2:]
	}
	isObject := rest != "" && len(segments) >= 2
	switch {
	case rest == "":
		return "other"
	case req.Method == http.MethodGet && req.URL.Query().Get("watch") != "" && req.URL.Query().Get("watch") != "false":
		return "WATCH"
	case req.Method == http.MethodGet && isObject:
		return "GET"
	case req.Method == http.MethodGet:
		return "LIST"
	case req.Method == http.MethodPatch && len(segments) == 3 && segments[2] == "status":
		return "statusPATCH"
	case req.Method == http.MethodPatch:
		return "PATCH"
	case req.Method == http.MethodPost:
		return "POST"
	case req.Method == http.MethodDelete:
		return "DELETE"
	default:
		return "other"
	}
}

// Parallel runs f(0..n-1) on workers goroutines and returns when all calls have returned.
func Parallel(workers, n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}
