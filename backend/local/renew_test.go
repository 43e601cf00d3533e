package local

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// servingNotAfter is the end of the certificate the API server at endpoint presents, verified
// with caPEM. t is the test, or the collector of an EventuallyWithT.
func servingNotAfter(t require.TestingT, endpoint string, caPEM []byte) time.Time {
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: roots, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12})
	require.NoError(t, err)
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].NotAfter
}

// TestCertificatesRenewed: with leaves valid 10 minutes and due 10 s after they are issued, a
// running local cluster renews them without a restart of the operator or of its API server: the
// API server presents a serving certificate that ends later, signed by the same CA, the
// controller manager runs again with its new certificate, the expiry gauge follows, and a client
// holding a token issued before reads every 100 ms without one failed request.
func TestCertificatesRenewed(t *testing.T) {
	h := startBackendOptions(t, Options{StateDir: t.TempDir(), MaxClusters: 1,
		Certificates: certs.Lifetime{Validity: 10 * time.Minute, RenewBefore: 10*time.Minute - 10*time.Second}})
	cl := newCluster("renew")
	s := h.await(cl, "complete", complete)
	// The leaves are renewed every 10 s from their issuance on, and a cold start on a busy machine
	// takes longer than that: the gauge and the certificate served may be of two issuances for a
	// moment (the files are written, the API server has not reloaded them yet). They agree once
	// the API server serves what the gauge says.
	var first time.Time
	var gauge float64
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		gauge = backend.CertificateExpiry(backend.RefOf(cl), servingCertFile)
		first = servingNotAfter(c, s.Endpoint, s.CABundle)
		assert.InDelta(c, float64(first.Unix()), gauge, 1)
	}, 30*time.Second, 50*time.Millisecond, "the gauge says when the serving certificate ends")
	admin, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	user := kubernetes.NewForConfigOrDie(issuedConfig(t, admin))
	apiPID := h.b.PIDs(cl.UID)[procAPIServer]
	poll := startPoller(func(ctx context.Context) error {
		_, err := user.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}, 100*time.Millisecond)

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, servingNotAfter(c, s.Endpoint, s.CABundle).After(first))
	}, 90*time.Second, 250*time.Millisecond, "the API server presents a renewed serving certificate")
	renewedAt := time.Now()
	h.await(cl, "complete again, the controller manager on its new certificate", complete)
	require.Eventually(t, func() bool {
		poll.mu.Lock()
		defer poll.mu.Unlock()
		return poll.lastOK.After(renewedAt)
	}, 30*time.Second, 100*time.Millisecond)
	ok, failed, gap := poll.end()
	t.Logf("renewal: %d answers, %d failed, longest gap %s", ok, failed, gap.Round(time.Millisecond))
	assert.Zero(t, failed, "no request failed during the renewal (first: %v)", poll.firstFailure)
	assert.Equal(t, apiPID, h.b.PIDs(cl.UID)[procAPIServer], "the API server was not restarted")
	// The renewal writes the files (which the API server reloads) before it sets the gauge.
	assert.Eventually(t, func() bool { return backend.CertificateExpiry(backend.RefOf(cl), servingCertFile) > gauge },
		10*time.Second, 50*time.Millisecond, "the gauge follows")
	after, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	assert.Equal(t, admin.CAData, after.CAData, "the same CA: every kubeconfig stays valid")
	_, err = kubernetes.NewForConfigOrDie(after).CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{})
	require.NoError(t, err, "the operator's renewed admin certificate works")
}
