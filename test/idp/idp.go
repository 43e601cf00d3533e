// Package idp is a test OpenID Connect identity provider: an https server (its own CA, a serving
// certificate for 127.0.0.1) that answers OpenID discovery and serves its signing keys (JWKS),
// and signs ID tokens (ES256) with whatever claims a test asks for. A real kube-apiserver can be
// made to trust it: give it Issuer and CAPEM.
package idp

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/stretchr/testify/require"

	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// IdP is a running identity provider. Stop it with Close (Start registers that as a cleanup).
type IdP struct {
	// Issuer is the issuer URL: https://127.0.0.1:<port>.
	Issuer string
	// CAPEM verifies the server's certificate.
	CAPEM string

	server *httptest.Server
	key    *ecdsa.PrivateKey
}

// keyID names the signing key in the JWKS and in tokens' headers.
const keyID = "test-key"

// Start starts an identity provider on 127.0.0.1 until the test ends.
func Start(t testing.TB) *IdP { t.Helper(); return StartAt(t, "127.0.0.1") }

// StartAt starts an identity provider on the IP address ip (its certificate names it) until the
// test ends: an address other processes reach, the gateway of a Docker network say.
func StartAt(t testing.TB, ip string) *IdP {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	p := &IdP{key: key}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{
			"issuer":                                p.Issuer,
			"jwks_uri":                              p.Issuer + "/keys",
			"authorization_endpoint":                p.Issuer + "/authorize",
			"token_endpoint":                        p.Issuer + "/token",
			"response_types_supported":              []string{"code"},
			"subject_types_supported":               []string{"public"},
			"id_token_signing_alg_values_supported": []string{string(jose.ES256)},
		})
	})
	mux.HandleFunc("GET /keys", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: keyID, Algorithm: string(jose.ES256), Use: "sig"}}})
	})
	caPEM, cert := certificates(t, net.ParseIP(ip))
	p.CAPEM = caPEM
	p.server = httptest.NewUnstartedServer(mux)
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	p.server.Listener.Close()
	p.server.Listener = l
	p.server.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	p.server.StartTLS()
	p.Issuer = p.server.URL
	t.Cleanup(p.Close)
	return p
}

// Close stops the server: the issuer no longer answers.
func (p *IdP) Close() { p.server.Close() }

// Token signs an ID token for audience with the standard claims (iss, aud, sub, iat, nbf, exp in
// an hour) and extra claims, which override them.
func (p *IdP) Token(t testing.TB, audience, subject string, extra map[string]any) string {
	t.Helper()
	return p.TokenSignedBy(t, p.key, audience, subject, extra)
}

// TokenSignedBy is Token signed with another key (which the IdP does not publish).
func (p *IdP) TokenSignedBy(t testing.TB, key *ecdsa.PrivateKey, audience, subject string, extra map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", keyID))
	require.NoError(t, err)
	now := time.Now()
	claims := jwt.Claims{
		Issuer: p.Issuer, Subject: subject, Audience: jwt.Audience{audience},
		IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)), Expiry: jwt.NewNumericDate(now.Add(time.Hour)),
	}
	token, err := jwt.Signed(signer).Claims(claims).Claims(extra).Serialize()
	require.NoError(t, err)
	return token
}

// NewKey returns a signing key the IdP does not know.
func NewKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	return key
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// certificates makes a CA and a serving certificate for ip (and localhost) signed by it, valid
// for a day.
func certificates(t testing.TB, ip net.IP) (caPEM string, serving tls.Certificate) {
	t.Helper()
	ca, err := certs.NewCA("test idp CA")
	require.NoError(t, err)
	certPEM, keyPEM, err := ca.Issue(certs.Leaf{CommonName: ip.String(), Hosts: []string{ip.String(), "localhost"},
		Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, Validity: 24 * time.Hour})
	require.NoError(t, err)
	serving, err = tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return string(ca.CertPEM), serving
}
