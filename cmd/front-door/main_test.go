package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/frontdoor"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// TestFrontDoorReports runs the door against a real API server: a connection waits for an
// upstream that does not listen yet, is passed on once it does, and the door reports it open,
// then closed, in its annotation of the Lease, which goes when the door stops.
func TestFrontDoorReports(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "door-"}}
	require.NoError(t, env.Client.Create(ctx, ns))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "front-door"}}
	require.NoError(t, env.Client.Create(ctx, lease))
	upstream := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))

	runCtx, cancel := context.WithCancel(ctx)
	listening, done := make(chan int, 1), make(chan error, 1)
	go func() {
		done <- run(runCtx, env.Config, door{listen: "127.0.0.1:0", health: "127.0.0.1:0", upstream: upstream, namespace: ns.Name, pod: "door-1",
			lease: "front-door", every: 100 * time.Millisecond, wake: time.Minute}, listening)
	}()
	port, health := <-listening, <-listening
	usage := func() (frontdoor.Usage, bool) {
		l := &coordinationv1.Lease{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(lease), l))
		u, ok := frontdoor.Usages(l.Annotations)["door-1"]
		return u, ok
	}
	require.Eventually(t, func() bool { _, ok := usage(); return ok }, 30*time.Second, 20*time.Millisecond, "the door reports at its start")

	// The kubelet's probes are not a client's use.
	for range 3 {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(health) + "/healthz")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}
	u, _ := usage()
	assert.True(t, u.LastOpened.IsZero(), "no client yet: %+v", u)

	// A client connects while the API server is away (hibernated): the door reports it at once
	// and holds it until the API server listens.
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { u, _ := usage(); return u.Open == 1 && !u.LastOpened.IsZero() }, 30*time.Second, 20*time.Millisecond, "open reported")
	ln, err := net.Listen("tcp", upstream)
	require.NoError(t, err)
	defer ln.Close()
	up, err := ln.Accept()
	require.NoError(t, err, "the held connection is passed on")
	_, err = c.Write([]byte("ping"))
	require.NoError(t, err)
	got := make([]byte, 4)
	_, err = io.ReadFull(up, got)
	require.NoError(t, err)
	assert.Equal(t, "ping", string(got))
	c.Close()
	up.Close()
	require.Eventually(t, func() bool { u, _ := usage(); return u.Open == 0 }, 30*time.Second, 20*time.Millisecond, "closed reported")

	cancel()
	require.NoError(t, <-done)
	_, ok := usage()
	assert.False(t, ok, "a door that stops takes its annotation away")
}
