package testenv

import (
	"context"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ListNamespacesOnce lists the namespaces with cfg over a connection of its own, closed after it,
// as one `kubectl get ns` does: a front door (a hibernated local cluster's) sees the client come
// and go. handshake is the TLS handshake timeout: 0 keeps client-go's (10 s, as kubectl); a wake
// can take longer on a loaded machine, and TLS passes through the front door, so a test that must
// not fail there waits longer. It returns how long the list took, connection included.
func ListNamespacesOnce(ctx context.Context, cfg *rest.Config, handshake time.Duration) (time.Duration, error) {
	c := rest.CopyConfig(cfg)
	c.Timeout = 3 * time.Minute
	if handshake > 0 {
		tlsConfig, err := rest.TLSConfigFor(cfg)
		if err != nil {
			return 0, err
		}
		rt := &http.Transport{TLSClientConfig: tlsConfig, TLSHandshakeTimeout: handshake, ForceAttemptHTTP2: true}
		defer rt.CloseIdleConnections()
		c.TLSClientConfig, c.Transport = rest.TLSClientConfig{}, rt
	} else {
		rt, err := rest.TransportFor(cfg)
		if err != nil {
			return 0, err
		}
		defer utilnet.CloseIdleConnectionsFor(rt)
		// rt authenticates already (client certificate, bearer token).
		c = &rest.Config{Host: cfg.Host, Transport: rt, Timeout: c.Timeout}
	}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return 0, err
	}
	began := time.Now()
	_, err = cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	return time.Since(began), err
}
