package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
)

// TestHostedCARotationOnKind rotates a hosted control plane's CAs on the kind platform (issue 42):
// the operator of deploy/hosted runs with CAs valid 8 minutes, rotated from 4 minutes before their
// end (phases of a minute at least, each also waiting for the workloads to roll; the new CA's own
// rotation starts 4 minutes after the first began, time enough to see the first one end). The cluster CA and etcd's go through Trusting (the API server
// and etcd roll onto the bundles), Signing (every leaf issued anew by the new CAs) and back to one
// CA, while a client that re-reads its AccessRequest's kubeconfig polls every 250 ms and sees no
// failed request; a kubeconfig copied before the rotation fails from phase Signing on with an
// unknown authority, as docs/day2.md says; the data, etcd's health and the operator's access are
// intact at the end. The operator's flags are put back at the end.
func TestHostedCARotationOnKind(t *testing.T) {
	c, _, pc := hostedTarget(t)
	ctx := context.Background()
	withOperatorArgs(t, c, "--ca-validity=8m", "--ca-renew-before=4m")

	cl := readyHostedCluster(t, c, pc, "hosted-carotation-", "rotated")
	_, err := hostedAdmin(t, c, cl).CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	copied := tokenClient(t, c, cl) // its kubeconfig read once: the old CA alone
	rereads := reloadingClient(t, c, client.ObjectKey{Namespace: cl.Namespace, Name: cl.Name})
	polled := startPollers([]kubernetes.Interface{rereads}, 250*time.Millisecond)
	start := time.Now()

	hns := hosted.NamespaceFor(cl.UID)
	oldCA := awaitCAPhase(t, c, hns, certs.PhaseTrusting, 6*time.Minute)
	trusting := time.Since(start)
	awaitCertificatesReason(t, c, cl, backend.ReasonCARotating, "phase 1 of 3")
	newCA := awaitCAPhase(t, c, hns, certs.PhaseSigning, 6*time.Minute)
	signing := time.Since(start)
	require.False(t, bytes.Equal(oldCA, newCA), "another CA signs")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, servedBy(cl.Status.APIServer, newCA), "the API server presents a certificate of the new CA")
	}, 5*time.Minute, poll, "the API servers rolled onto the new CA's certificate")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := copied.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		if assert.Error(ct, err) {
			assert.Contains(ct, err.Error(), "x509", "a kubeconfig copied before the rotation does not trust the new CA")
		}
	}, time.Minute, poll, "a kubeconfig copied before the rotation fails from phase Signing on")
	awaitCAPhase(t, c, hns, certs.PhaseNone, 6*time.Minute)
	done := time.Since(start)
	cond := awaitCertificatesReason(t, c, cl, backend.ReasonCARotated, "rotated at")
	during := summarize(polled.stop())
	t.Logf("FIGURE hosted CA rotation: Trusting %.0f s, Signing %.0f s, done %.0f s after polling began; %s; a client re-reading its kubeconfig every 250 ms: %s",
		trusting.Seconds(), signing.Seconds(), done.Seconds(), cond.Message, during)
	for _, e := range during.errors {
		t.Errorf("during the CA rotation: %v", e)
	}
	awaitEtcdCondition(t, c, cl, metav1.ConditionTrue, backend.ReasonRunning, 3*time.Minute)
	// The drop of the old CAs rolls etcd and the API servers once more (a single etcd restarts:
	// requests wait some seconds, longer than the admin client's 5 s at times, seen on kind).
	admin := hostedAdmin(t, c, cl)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		assert.NoError(ct, err)
	}, 2*time.Minute, poll, "the data is there, through the operator's admin certificate of the new CA")
}

// awaitCAPhase waits until the cluster CA of the control plane in namespace hns is in phase and
// returns its signing CA's certificate.
func awaitCAPhase(t *testing.T, c client.Client, hns string, phase certs.RotationPhase, within time.Duration) []byte {
	t.Helper()
	var signingCA []byte
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		s := &corev1.Secret{}
		require.NoError(ct, c.Get(context.Background(), client.ObjectKey{Namespace: hns, Name: hosted.SecretCA}, s))
		var r certs.Rotation
		if rec := s.Data["rotation.json"]; len(rec) > 0 {
			require.NoError(ct, json.Unmarshal(rec, &r))
		}
		assert.Equal(ct, phase, r.Phase)
		if phase == certs.PhaseNone {
			assert.Positive(ct, r.Rotations, "rotated")
		}
		signingCA = s.Data["signing.crt"]
	}, within, poll, "the cluster CA of %s in phase %q", hns, phase)
	return signingCA
}

// awaitCertificatesReason waits for cl's CertificatesValid condition with reason and message part.
func awaitCertificatesReason(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster, reason, says string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(cl), cl))
		for _, cond := range cl.Status.Conditions {
			if cond.Type == backend.PartCertificates {
				got = cond
			}
		}
		assert.Equal(ct, reason, got.Reason)
		assert.Contains(ct, got.Message, says)
	}, 2*time.Minute, poll, "CertificatesValid %s", reason)
	return got
}

// servedBy says whether the API server at endpoint presents a certificate that caPEM verifies.
func servedBy(endpoint string, caPEM []byte) error {
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	cas, err := certutil.ParseCertsPEM(caPEM)
	if err != nil {
		return err
	}
	for _, ca := range cas {
		roots.AddCert(ca)
	}
	conn, err := tls.DialWithDialer(&netDialer, "tcp", u.Host, &tls.Config{RootCAs: roots, ServerName: u.Hostname()})
	if err != nil {
		return err
	}
	return conn.Close()
}

// reloadingClient is a client of the kubeconfig in the Secret of AccessRequest key, which it reads
// again every second, as a client that follows its Secret does: each request goes with the
// kubeconfig of the moment.
func reloadingClient(t *testing.T, c client.Client, key client.ObjectKey) kubernetes.Interface {
	t.Helper()
	ar := &clustersv1alpha1.AccessRequest{}
	require.NoError(t, c.Get(context.Background(), key, ar))
	require.NotNil(t, ar.Status.SecretRef)
	secret := client.ObjectKey{Namespace: ar.Namespace, Name: ar.Status.SecretRef.Name}
	rt := &reloading{}
	var last []byte
	var host string
	load := func() error {
		s := &corev1.Secret{}
		if err := c.Get(context.Background(), secret, s); err != nil {
			return err
		}
		data := s.Data[clustersv1alpha1.SecretKeyKubeconfig]
		if bytes.Equal(data, last) {
			return nil
		}
		cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
		if err != nil {
			return err
		}
		next, err := rest.TransportFor(cfg)
		if err != nil {
			return err
		}
		rt.cur.Store(&next)
		last, host = data, cfg.Host
		return nil
	}
	require.NoError(t, load())
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = load() // a read that fails is tried again; the kubeconfig of the moment stays
			}
		}
	}()
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: host, Transport: rt, Timeout: pollTimeout})
}

// reloading is a RoundTripper that sends each request with the transport of the moment.
type reloading struct {
	cur atomic.Pointer[http.RoundTripper]
}

func (r *reloading) RoundTrip(req *http.Request) (*http.Response, error) {
	return (*r.cur.Load()).RoundTrip(req)
}
