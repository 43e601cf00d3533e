package local

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// inPhase: the cluster's CertificatesValid part has reason and, if phase is set, names it.
func inPhase(reason, phase string) func(backend.State) bool {
	return func(s backend.State) bool {
		p := s.Part(backend.PartCertificates)
		return p != nil && p.Reason == reason && strings.Contains(p.Message, phase)
	}
}

// awaitWithin is h.await with its own deadline: a phase of the rotation comes at a time of its
// own, which may be later than a cluster's start.
func awaitWithin(h *harness, cl *clustersv1alpha1.Cluster, within time.Duration, what string, cond func(backend.State) bool) backend.State {
	h.t.Helper()
	var s backend.State
	require.EventuallyWithT(h.t, func(c *assert.CollectT) {
		var err error
		s, err = h.b.Ensure(h.t.Context(), cl, backend.Want{Version: "1.37.1"})
		require.NoError(c, err)
		assert.True(c, cond(s), "%s; last state: %s: %s; parts %+v", what, s.Reason, s.Message, s.Parts)
	}, within, 200*time.Millisecond)
	return s
}

// servingVerifies reports whether the API server at endpoint presents a certificate that caPEM
// alone verifies.
func servingVerifies(t require.TestingT, endpoint string, caPEM []byte) bool {
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(caPEM))
	conn, err := tls.Dial("tcp", u.Host, &tls.Config{RootCAs: roots, ServerName: u.Hostname(), MinVersion: tls.VersionTLS12})
	if err != nil {
		return false
	}
	return conn.Close() == nil
}

// failures records when each failed request of a poller failed.
type failures struct {
	mu sync.Mutex
	at []time.Time
}

func (f *failures) add(err error) error {
	if err != nil {
		f.mu.Lock()
		f.at = append(f.at, time.Now())
		f.mu.Unlock()
	}
	return err
}

// TestCARotated: a local cluster whose CA is valid 3 minutes rotates it while it runs, without a
// restart of the operator or of its API server. Phase 1 (Trusting): the trust bundle holds the
// old CA and a new one, the API server still presents a certificate of the old one, so a client
// holding the old kubeconfig still works. Phase 2 (Signing): the API server presents a
// certificate of the new CA. Then the old CA is dropped: the bundle is the new CA alone, every
// leaf in the pki folder is signed by it, the controller manager runs again and publishes the
// new bundle. A client that re-reads its CA bundle (as an AccessRequest's Secret is written anew
// with it) polling every 100 ms never fails; one that kept the old CA fails from phase 2 on, not
// before. The CA expiry gauge and the CertificatesValid condition follow each phase.
func TestCARotated(t *testing.T) {
	r := startRotationRun(t)
	bundle, newCA := r.trusting(t)
	signingAt := r.signing(t, bundle, newCA)
	r.rotated(t, newCA)
	r.clientsAfter(t, newCA, signingAt)
}

// rotationRun is what the phases of TestCARotated share: the backend and its cluster, the
// cluster's first CA, a token's client config, the API server's PID, and two polling clients,
// one that follows the bundle and one that kept the old CA, with when each request failed.
type rotationRun struct {
	h                          *harness
	cl                         *clustersv1alpha1.Cluster
	ref                        backend.Ref
	oldCA                      []byte
	token                      *rest.Config
	apiPID                     int
	follower, kept             *poller
	followerFailed, keptFailed *failures
}

// startRotationRun starts a cluster whose CA is valid 3 minutes and, once it is complete, the
// two polling clients.
func startRotationRun(t *testing.T) *rotationRun {
	t.Helper()
	// Rotation from 100 s after the CA was made, phases of 20 s; the new CA's own rotation starts
	// 100 s after it was made: a minute after this one ends.
	life := certs.Lifetime{CAValidity: 3 * time.Minute, CARenewBefore: 80 * time.Second}
	h := startBackendOptions(t, Options{StateDir: t.TempDir(), MaxClusters: 1, Certificates: life,
		Logger: testr.New(t)})
	cl := newCluster("rotate")
	ref := backend.RefOf(cl)
	s := h.await(cl, "complete", complete)
	oldCA := s.CABundle
	require.Len(t, pemCerts(t, oldCA), 1)
	assert.Equal(t, backend.ReasonCAValid, s.Part(backend.PartCertificates).Reason)
	assert.InDelta(t, float64(pemCerts(t, oldCA)[0].NotAfter.Unix()), backend.CAExpiry(ref, backend.CACurrent), 1, "the gauge says when the CA ends")

	admin, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	token := issuedConfig(t, admin)
	r := &rotationRun{h: h, cl: cl, ref: ref, oldCA: oldCA, token: token, apiPID: h.b.PIDs(cl.UID)[procAPIServer],
		followerFailed: &failures{}, keptFailed: &failures{}}
	read := func(ctx context.Context, caPEM []byte) error {
		cfg := rest.CopyConfig(token)
		cfg.CAData = caPEM
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		_, err = cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		return err
	}
	r.follower = startPoller(func(ctx context.Context) error {
		cfg, err := h.b.AdminConfig(ctx, cl) // the bundle of the moment
		if err != nil {
			return r.followerFailed.add(err)
		}
		return r.followerFailed.add(read(ctx, cfg.CAData))
	}, 100*time.Millisecond)
	r.kept = startPoller(func(ctx context.Context) error { return r.keptFailed.add(read(ctx, oldCA)) }, 100*time.Millisecond)
	return r
}

// trusting awaits phase 1: the bundle holds the old CA and the new one, the old CA still signs
// the serving certificate. It returns the bundle and the new CA.
func (r *rotationRun) trusting(t *testing.T) (bundle, newCA []byte) {
	t.Helper()
	h, cl, oldCA := r.h, r.cl, r.oldCA
	// Due 100 s after the CA was made; then every phase within its 20 s and a busy machine's slack.
	s := awaitWithin(h, cl, 3*time.Minute, "phase 1: Trusting", inPhase(backend.ReasonCARotating, "(Trusting)"))
	bundle = s.CABundle
	require.Len(t, pemCerts(t, bundle), 2, "the old CA and the new one")
	assert.Equal(t, oldCA, bundle[:len(oldCA)], "the old CA first")
	newCA = bundle[len(oldCA):]
	assert.True(t, servingVerifies(t, s.Endpoint, oldCA), "the old CA still signs the serving certificate")
	assert.InDelta(t, float64(pemCerts(t, newCA)[0].NotAfter.Unix()), backend.CAExpiry(r.ref, backend.CANext), 1, "the gauge of the next CA")
	return bundle, newCA
}

// signing awaits phase 2: the new CA signs the serving certificate, the bundle unchanged. It
// returns when phase 2 began.
func (r *rotationRun) signing(t *testing.T, bundle, newCA []byte) time.Time {
	t.Helper()
	h, cl, oldCA := r.h, r.cl, r.oldCA
	s := awaitWithin(h, cl, time.Minute, "phase 2: Signing", inPhase(backend.ReasonCARotating, "(Signing)"))
	pkiPath := filepath.Join(h.b.Dir(cl.UID), pkiDir)
	rec, err := (&pki{dir: pkiPath}).readRotation()
	require.NoError(t, err)
	require.Equal(t, certs.PhaseSigning, rec.Phase)
	signingAt := rec.Since // the serving certificate of the new CA is written after
	assert.Equal(t, bundle, s.CABundle, "the same bundle")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, servingVerifies(c, s.Endpoint, newCA), "the new CA signs the serving certificate")
	}, 30*time.Second, 100*time.Millisecond)
	assert.False(t, servingVerifies(t, s.Endpoint, oldCA), "the old CA alone no longer verifies the API server")
	assert.InDelta(t, float64(pemCerts(t, oldCA)[0].NotAfter.Unix()), backend.CAExpiry(r.ref, backend.CAPrevious), 1, "the gauge of the previous CA")
	return signingAt
}

// rotated awaits the end of the rotation: the bundle is the new CA alone, every leaf in the pki
// folder is signed by it, and the gauges say so.
func (r *rotationRun) rotated(t *testing.T, newCA []byte) {
	t.Helper()
	h, cl, ref := r.h, r.cl, r.ref
	pkiPath := filepath.Join(h.b.Dir(cl.UID), pkiDir)
	s := awaitWithin(h, cl, time.Minute, "rotated", inPhase(backend.ReasonCARotated, ""))
	assert.Equal(t, newCA, s.CABundle, "the new CA alone")
	assert.Equal(t, newCA, mustRead(t, filepath.Join(pkiPath, caBundleFile)))
	assert.NoFileExists(t, filepath.Join(pkiPath, caOldCertFile))
	for _, f := range []string{servingCertFile, adminCertFile, kcmClientCertFile, kcmServingCertFile} {
		assert.True(t, verifies(t, pkiPath, f, newCA, x509.ExtKeyUsageAny), "%s is signed by the new CA", f)
	}
	assert.Zero(t, backend.CAExpiry(ref, backend.CAPrevious), "no previous CA any more")
	assert.Zero(t, backend.CAExpiry(ref, backend.CANext))
	assert.InDelta(t, float64(pemCerts(t, newCA)[0].NotAfter.Unix()), backend.CAExpiry(ref, backend.CACurrent), 1)
}

// clientsAfter: the controller manager runs again and publishes the new bundle; the client that
// follows the bundle never failed, the one that kept the old CA failed from phase 2 (signingAt)
// on, not before; the API server was not restarted.
func (r *rotationRun) clientsAfter(t *testing.T, newCA []byte, signingAt time.Time) {
	t.Helper()
	h, cl, follower, kept := r.h, r.cl, r.follower, r.kept
	h.await(cl, "complete, the controller manager on the new CA", complete)
	cfg := rest.CopyConfig(r.token)
	cfg.CAData = newCA
	cs := kubernetes.NewForConfigOrDie(cfg)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cm, err := cs.CoreV1().ConfigMaps("default").Get(t.Context(), "kube-root-ca.crt", metav1.GetOptions{})
		if assert.NoError(c, err) {
			assert.Equal(c, string(newCA), cm.Data["ca.crt"], "the controller manager publishes the new bundle")
		}
	}, 30*time.Second, 250*time.Millisecond)
	rotatedAt := time.Now()
	require.Eventually(t, func() bool {
		follower.mu.Lock()
		defer follower.mu.Unlock()
		return follower.lastOK.After(rotatedAt)
	}, 30*time.Second, 100*time.Millisecond)

	ok, failed, gap := follower.end()
	t.Logf("a client that follows the bundle: %d answers, %d failed, longest gap %s", ok, failed, gap.Round(time.Millisecond))
	assert.Zero(t, failed, "no request failed (first: %v)", follower.firstFailure)
	keptOK, keptFailedN, _ := kept.end()
	t.Logf("a client that kept the old CA: %d answers, %d failed (first: %v)", keptOK, keptFailedN, kept.firstFailure)
	keptFailed := r.keptFailed
	keptFailed.mu.Lock()
	defer keptFailed.mu.Unlock()
	require.NotEmpty(t, keptFailed.at, "a client that kept the old CA alone fails once the new one signs")
	assert.False(t, keptFailed.at[0].Before(signingAt), "it did not fail in phase 1: first failure %s, phase 2 from %s",
		keptFailed.at[0].Format(time.RFC3339Nano), signingAt.Format(time.RFC3339Nano))
	assert.Contains(t, kept.firstFailure.Error(), "certificate signed by unknown authority", "what such a client sees")
	assert.Equal(t, r.apiPID, h.b.PIDs(cl.UID)[procAPIServer], "the API server was not restarted")
}

// pemCerts parses the certificates of a PEM bundle.
func pemCerts(t *testing.T, bundle []byte) []*x509.Certificate {
	t.Helper()
	c, err := certutil.ParseCertsPEM(bundle)
	require.NoError(t, err)
	return c
}
