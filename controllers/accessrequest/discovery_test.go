package accessrequest

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// secret is remote content that must never reach a request's status.
const secret = "REMOTE-CONTENT-d41d8cd98f00"

// idpServer is an https server on the loopback whose handler is h; its issuer URL and CA.
func idpServer(t *testing.T, h http.HandlerFunc) (issuer, ca string) {
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	ca = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	return srv.URL, ca
}

func discoveryDoc(issuer func() string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"issuer":%q}`, issuer())
	}
}

// TestDiscover runs discovery against real https servers: what it refuses and what it says.
func TestDiscover(t *testing.T) {
	var goodURL string
	good, goodCA := idpServer(t, discoveryDoc(func() string { return goodURL }))
	goodURL = good

	redirectHTTP, redirectCA := idpServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.1:1/.well-known/openid-configuration", http.StatusFound)
	})
	redirectOther, otherCA := idpServer(t, func(w http.ResponseWriter, r *http.Request) {
		// The same address under another name is another host.
		http.Redirect(w, r, strings.Replace(goodURL, "127.0.0.1", "localhost", 1)+"/.well-known/openid-configuration", http.StatusFound)
	})
	status, statusCA := idpServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, secret)
	})
	garbage, garbageCA := idpServer(t, func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "<html>"+secret) })
	mismatch, mismatchCA := idpServer(t, discoveryDoc(func() string { return "https://" + secret + ".example.com" }))
	slow, slowCA := idpServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	})
	allCAs := goodCA + redirectCA + otherCA + statusCA + garbageCA + mismatchCA + slowCA

	for _, tc := range []struct {
		name         string
		issuer       string
		caBundle     string
		allowPrivate bool
		reason       string // empty: reachable
		says         string
	}{
		{name: "a good issuer", issuer: good, caBundle: allCAs, allowPrivate: true},
		{name: "loopback refused unless allowed", issuer: good, caBundle: allCAs, reason: ReasonIssuerNotAllowed, says: "loopback, link-local, private or shared address"},
		{name: "a name that resolves to the loopback", issuer: strings.Replace(good, "127.0.0.1", "localhost", 1), caBundle: allCAs, reason: ReasonIssuerNotAllowed, says: "loopback, link-local, private or shared address"},
		{name: "redirect to http", issuer: redirectHTTP, caBundle: allCAs, allowPrivate: true, reason: ReasonIssuerUnreachable, says: "redirects to another host or to http"},
		{name: "redirect to another host", issuer: redirectOther, caBundle: allCAs, allowPrivate: true, reason: ReasonIssuerUnreachable, says: "redirects to another host or to http"},
		{name: "HTTP status", issuer: status, caBundle: allCAs, allowPrivate: true, reason: ReasonIssuerUnreachable, says: "it answered HTTP 418, not 200"},
		{name: "not JSON", issuer: garbage, caBundle: allCAs, allowPrivate: true, reason: ReasonIssuerUnreachable, says: "not valid JSON"},
		{name: "another issuer named", issuer: mismatch, caBundle: allCAs, allowPrivate: true, reason: ReasonInvalidOIDC, says: "names another issuer"},
		{name: "untrusted certificate", issuer: good, caBundle: testCA(t), allowPrivate: true, reason: ReasonIssuerUnreachable, says: "TLS certificate is not trusted"},
		{name: "nothing listens", issuer: "https://127.0.0.1:1", caBundle: allCAs, allowPrivate: true, reason: ReasonIssuerUnreachable, says: "connection was refused"},
		{name: "no answer in time", issuer: slow, caBundle: allCAs, allowPrivate: true, reason: ReasonIssuerUnreachable, says: "did not answer within 5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDiscoveryCache(clock.RealClock{})
			err := d.reachable(t.Context(), &providersv1alpha1.OIDCSettings{IssuerCABundle: tc.caBundle, AllowPrivateIssuers: tc.allowPrivate})(tc.issuer)
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, tc.reason, kit.ReasonOf(err, ""), err.Error())
			assert.Contains(t, err.Error(), tc.says)
			assert.NotContains(t, err.Error(), secret, "remote content is never echoed")
			for _, goErr := range []string{"dial tcp", "x509:", "tls:", "invalid character", "Get \""} {
				assert.NotContains(t, err.Error(), goErr, "no Go error text")
			}
		})
	}
}

// TestDiscoverBoundedByContext: discovery ends with the request's context, not only at its own
// timeout, and an answer cut short is not remembered.
func TestDiscoverBoundedByContext(t *testing.T) {
	var calls atomic.Int32
	slow, ca := idpServer(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-r.Context().Done()
	})
	d := newDiscoveryCache(clock.RealClock{})
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := d.reachable(ctx, &providersv1alpha1.OIDCSettings{IssuerCABundle: ca, AllowPrivateIssuers: true})(slow)
	require.Error(t, err)
	assert.Less(t, time.Since(start), discoveryTimeout, "ended with the context")
	assert.Empty(t, keys(d), "nothing learned, nothing remembered")
}

func TestPublicAddress(t *testing.T) {
	for addr, want := range map[string]bool{
		"8.8.8.8": true, "1.1.1.1": true, "2001:4860:4860::8888": true,
		"127.0.0.1": false, "127.1.2.3": false, "::1": false,
		"169.254.169.254": false, "fe80::1": false, // link-local: cloud metadata
		"10.0.0.1": false, "172.16.5.4": false, "192.168.1.1": false, "fd00:ec2::254": false,
		"100.64.0.1": false, "100.127.255.254": false, "100.128.0.1": true,
		"0.0.0.0": false, "::": false, "224.0.0.1": false, "ff02::1": false,
		"::ffff:127.0.0.1": false, "::ffff:10.0.0.1": false, "::ffff:8.8.8.8": true,
	} {
		assert.Equal(t, want, publicAddress(netip.MustParseAddr(addr)), addr)
	}
}

// TestDiscoveryCacheEvicts: stale answers are forgotten, and the cache never holds more than
// maxDiscoveryResults.
func TestDiscoveryCacheEvicts(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Now())
	d := newDiscoveryCache(clock)
	d.store("ok-old", nil)
	d.store("failed-old", fmt.Errorf("down"))
	// An answer is remembered for its whole lifetime, up to and including its end (the library
	// cache's boundary): it goes just after.
	clock.SetTime(clock.Now().Add(discoveryFailedFor + time.Millisecond))
	d.store("new", nil)
	assert.ElementsMatch(t, []string{"ok-old", "new"}, keys(d), "a failed answer goes after discoveryFailedFor")
	clock.SetTime(clock.Now().Add(discoveryOKFor + time.Millisecond))
	d.store("newer", nil)
	assert.ElementsMatch(t, []string{"newer"}, keys(d), "a good answer goes after discoveryOKFor")

	for i := range maxDiscoveryResults + 10 {
		clock.SetTime(clock.Now().Add(time.Millisecond))
		d.store(fmt.Sprintf("issuer-%d", i), nil)
	}
	assert.Len(t, keys(d), maxDiscoveryResults)
	assert.Contains(t, keys(d), fmt.Sprintf("issuer-%d", maxDiscoveryResults+9), "the newest stays")
	assert.NotContains(t, keys(d), "issuer-0", "the oldest went")
}

// keys lists the keys of the answers d remembers (unexpired).
func keys(d *discoveryCache) []string {
	var out []string
	for _, k := range d.results.Keys() {
		out = append(out, k.(string))
	}
	return out
}
