package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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

// TestFrontDoorDialsAReadyPod: while the API server's Service does not reach it yet (its pod is
// not ready for the kubelet), the door finds the pod in the Service's EndpointSlices, asks its
// /readyz itself and passes the held connection to it once it answers 200, not before.
func TestFrontDoorDialsAReadyPod(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "door-"}}
	require.NoError(t, env.Client.Create(ctx, ns))
	require.NoError(t, env.Client.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "front-door"}}))

	var ready atomic.Bool
	var asked atomic.Int32
	// The pod: on an address of this machine that an EndpointSlice may name (not loopback).
	podIP := hostIP(t)
	ln, err := net.Listen("tcp", net.JoinHostPort(podIP, "0"))
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			asked.Add(1)
			if !ready.Load() {
				http.Error(w, "[-]poststarthook/rbac/bootstrap-roles failed", http.StatusInternalServerError)
				return
			}
		}
		_, _ = w.Write([]byte("served " + r.URL.Path))
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.StartTLS()
	defer srv.Close()
	podPort := int32(srv.Listener.Addr().(*net.TCPAddr).Port)
	require.NoError(t, env.Client.Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns.Name, Name: "apiserver-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: "apiserver"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{podIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: &podPort}},
	}))

	listening, done := make(chan int, 2), make(chan error, 1)
	t.Cleanup(func() { <-done }) // after t.Context ends: the door stops
	go func() {
		done <- run(ctx, env.Config, door{listen: "127.0.0.1:0", health: "127.0.0.1:0", upstream: net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t))),
			endpoints: "apiserver", namespace: ns.Name, pod: "door-1", lease: "front-door", every: time.Second, wake: time.Minute}, listening)
	}()
	port := <-listening
	<-listening

	// The client's TLS goes through untouched: it verifies the pod's own certificate (made for
	// 127.0.0.1, the door's address).
	got := make(chan string, 1)
	go func() {
		resp, err := srv.Client().Get("https://127.0.0.1:" + strconv.Itoa(port) + "/hello")
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- string(b)
	}()
	require.Eventually(t, func() bool { return asked.Load() >= 3 }, 30*time.Second, 10*time.Millisecond, "the door asks the pod's /readyz")
	select {
	case g := <-got:
		t.Fatalf("the connection was passed on before the pod was ready: %s", g)
	default:
	}
	ready.Store(true)
	select {
	case g := <-got:
		assert.Equal(t, "served /hello", g)
	case <-time.After(30 * time.Second):
		t.Fatal("the connection was not passed on to the ready pod")
	}
}

func TestSlicesAddresses(t *testing.T) {
	port := func(p int32) []discoveryv1.EndpointPort { return []discoveryv1.EndpointPort{{Port: &p}} }
	ep := func(ip string, ready, terminating bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready, Terminating: &terminating}}
	}
	for _, tc := range []struct {
		name   string
		slices []discoveryv1.EndpointSlice
		want   []string
	}{
		{"none", nil, nil},
		{"no port yet", []discoveryv1.EndpointSlice{{Endpoints: []discoveryv1.Endpoint{ep("10.0.0.1", true, false)}}}, nil},
		{"ready first", []discoveryv1.EndpointSlice{{Ports: port(6443), Endpoints: []discoveryv1.Endpoint{ep("10.0.0.1", false, false), ep("10.0.0.2", true, false)}}},
			[]string{"10.0.0.2:6443", "10.0.0.1:6443"}},
		{"terminating left out", []discoveryv1.EndpointSlice{{Ports: port(6443), Endpoints: []discoveryv1.Endpoint{ep("10.0.0.1", false, true), ep("10.0.0.3", false, false)}}},
			[]string{"10.0.0.3:6443"}},
		{"IPv6", []discoveryv1.EndpointSlice{{Ports: port(6443), Endpoints: []discoveryv1.Endpoint{ep("fd00::1", true, false)}}}, []string{"[fd00::1]:6443"}},
		{"two slices", []discoveryv1.EndpointSlice{{Ports: port(6443), Endpoints: []discoveryv1.Endpoint{ep("10.0.0.1", false, false)}}, {Ports: port(6443), Endpoints: []discoveryv1.Endpoint{ep("10.0.0.2", true, false)}}},
			[]string{"10.0.0.2:6443", "10.0.0.1:6443"}},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, slicesAddresses(tc.slices)) })
	}
}

// hostIP is an IPv4 address of this machine other than loopback.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatalf("this machine has no IPv4 address but loopback: %v", addrs)
	return ""
}
