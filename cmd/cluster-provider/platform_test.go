package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// TestWaitForAPIServer: while nothing listens on the API server's address, a watch request waits
// and is sent as soon as a server listens there again; any other request fails at once, as do
// watches whose context ends.
func TestWaitForAPIServer(t *testing.T) {
	// A free address that refuses connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	rt := waitForAPIServer(logr.Discard(), 10*time.Millisecond)(http.DefaultTransport)
	c := &http.Client{Transport: rt}

	_, err = c.Get("http://" + addr + "/api/v1/pods")
	require.Error(t, err, "a list is not held back")
	assert.True(t, utilnet.IsConnectionRefused(err), "%v", err)

	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(short, http.MethodGet, "http://"+addr+"/api/v1/pods?watch=true", nil)
	require.NoError(t, err)
	_, err = c.Do(req)
	require.Error(t, err, "a watch gives up with its context")

	type result struct {
		code int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := c.Get("http://" + addr + "/api/v1/pods?watch=1&resourceVersion=5")
		if err != nil {
			done <- result{err: err}
			return
		}
		_ = resp.Body.Close()
		done <- result{code: resp.StatusCode}
	}()
	select {
	case r := <-done:
		t.Fatalf("the watch did not wait for the API server: %+v", r)
	case <-time.After(100 * time.Millisecond): // ten refusals at least
	}

	l, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	srv.Listener = l
	srv.Start()
	defer srv.Close()
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, http.StatusTeapot, r.code, "the watch reached the API server once it listened")
}
