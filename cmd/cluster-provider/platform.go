package main

import (
	"context"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/transport"
)

// apiServerRetry is how often a watch asks again for a platform API server that refuses
// connections.
const apiServerRetry = 500 * time.Millisecond

// waitForAPIServer wraps the transport of the manager's clients so that a watch request the
// platform's API server refuses (connection refused: it is stopped or restarting) is sent again
// every retry until it is accepted or the watch's context ends.
//
// Without it, the informers' reflectors treat each refusal as a failure and back off
// exponentially, with jitter, up to 30–60 s between tries: after an outage of half a minute the
// operator would not see new objects for up to a minute more. A refused connection carried no
// request, so sending it again is safe; other requests (reads and writes of reconcilers, the
// lease) still fail at once and are retried by their callers. log hears when the API server first
// refuses a watch and when a watch is accepted again.
func waitForAPIServer(log logr.Logger, retry time.Duration) transport.WrapperFunc {
	var waiting atomic.Bool
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet || !isWatch(req) {
				return rt.RoundTrip(req)
			}
			var resp *http.Response
			var err error
			// Ends when the request is sent (or fails otherwise), or with the watch's context: then
			// with the last refusal.
			_ = wait.PollUntilContextCancel(req.Context(), retry, true, func(context.Context) (bool, error) {
				resp, err = rt.RoundTrip(req)
				if err == nil || !utilnet.IsConnectionRefused(err) {
					if err == nil && waiting.CompareAndSwap(true, false) {
						log.Info("The platform's API server accepts watches again")
					}
					return true, nil
				}
				if waiting.CompareAndSwap(false, true) {
					log.Info("The platform's API server refuses connections; watches wait for it", "retry", retry, "error", err.Error())
				}
				return false, nil
			})
			return resp, err
		})
	}
}

// isWatch reports whether req is a watch (the informers' list-and-watch and watch-list requests).
func isWatch(req *http.Request) bool {
	switch req.URL.Query().Get("watch") {
	case "true", "1":
		return true
	}
	return false
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
