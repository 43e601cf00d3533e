package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// apiServers finds a woken API server before its Service does. The Service reaches a pod once the
// kubelet's readiness probe passed (every 2 s, after the startup probe), the endpoints were
// updated and kube-proxy programmed them: seconds after the API server is ready. The door reads
// the Service's EndpointSlices, which list its pods as soon as they have an address, ready or
// not, asks each pod's /readyz itself, and dials the first that answers 200.
type apiServers struct {
	cs               *kubernetes.Clientset
	namespace, svc   string
	every            time.Duration // the EndpointSlices are read at most once per this long
	check            *http.Client
	mu               sync.Mutex
	read             time.Time
	addrs            []string
	refusedAnnounced bool
}

func newAPIServers(cs *kubernetes.Clientset, namespace, svc string) *apiServers {
	return &apiServers{cs: cs, namespace: namespace, svc: svc, every: 200 * time.Millisecond,
		check: &http.Client{Timeout: time.Second, Transport: &http.Transport{
			DisableKeepAlives: true,
			// A health check only, as the kubelet's probe asks it: no credential goes out, and the
			// client's own TLS, passed on untouched, verifies the API server.
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // see above
		}}}
}

// addresses are the pods' host:port of the Service's EndpointSlices (read again when older than
// every); none when they cannot be read (said once: the door still reaches the Service).
func (a *apiServers) addresses(ctx context.Context) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if time.Since(a.read) < a.every {
		return a.addrs
	}
	a.read = time.Now()
	list, err := a.cs.DiscoveryV1().EndpointSlices(a.namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + a.svc})
	if err != nil {
		if ctx.Err() != nil {
			return nil // the connection gave up: nothing to say about the EndpointSlices
		}
		if !a.refusedAnnounced {
			fmt.Fprintf(os.Stderr, "front-door: reading the EndpointSlices of Service %s/%s: %v; woken API servers are reached through the Service only\n", a.namespace, a.svc, err)
			a.refusedAnnounced = true
		}
		a.addrs = nil
		return nil
	}
	a.addrs = slicesAddresses(list.Items)
	return a.addrs
}

// slicesAddresses are the host:port of every endpoint of the slices that is not terminating,
// those ready first.
func slicesAddresses(slices []discoveryv1.EndpointSlice) []string {
	var ready, rest []string
	for _, s := range slices {
		if len(s.Ports) == 0 || s.Ports[0].Port == nil {
			continue
		}
		port := strconv.Itoa(int(*s.Ports[0].Port))
		for _, e := range s.Endpoints {
			if e.Conditions.Terminating != nil && *e.Conditions.Terminating {
				continue
			}
			for _, ip := range e.Addresses {
				if e.Conditions.Ready != nil && *e.Conditions.Ready {
					ready = append(ready, net.JoinHostPort(ip, port))
				} else {
					rest = append(rest, net.JoinHostPort(ip, port))
				}
			}
		}
	}
	return append(ready, rest...)
}

// dial returns a connection to the first API server pod whose /readyz answers 200, or nil.
func (a *apiServers) dial(ctx context.Context) net.Conn {
	var d net.Dialer
	for _, addr := range a.addresses(ctx) {
		if !a.ready(ctx, addr) {
			continue
		}
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := d.DialContext(attempt, "tcp", addr)
		cancel()
		if err == nil {
			return c
		}
	}
	return nil
}

func (a *apiServers) ready(ctx context.Context, addr string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := a.check.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
