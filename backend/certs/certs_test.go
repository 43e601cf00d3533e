package certs

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	certutil "k8s.io/client-go/util/cert"
)

func TestKeep(t *testing.T) {
	ca, err := NewCA("kubernetes")
	require.NoError(t, err)
	other, err := NewCA("kubernetes")
	require.NoError(t, err)
	serving := Leaf{CommonName: "kube-apiserver", Hosts: []string{"apiserver.ns.svc", "10.0.0.1"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	cert, key, err := ca.Issue(serving)
	require.NoError(t, err)
	_, otherKey, err := ca.Issue(serving)
	require.NoError(t, err)
	foreignCert, foreignKey, err := other.Issue(serving)
	require.NoError(t, err)

	for _, tc := range []struct {
		name      string
		cert, key []byte
		leaf      Leaf
		want      bool
	}{
		{"as issued", cert, key, serving, true},
		{"a subset of its hosts", cert, key, Leaf{CommonName: serving.CommonName, Hosts: []string{"10.0.0.1"}, Usages: serving.Usages}, true},
		{"another usage too", cert, key, Leaf{CommonName: serving.CommonName, Hosts: serving.Hosts,
			Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, false},
		{"a new host", cert, key, Leaf{CommonName: serving.CommonName, Hosts: append([]string{"203.0.113.9"}, serving.Hosts...), Usages: serving.Usages}, false},
		{"another subject", cert, key, Leaf{CommonName: "admin", Hosts: serving.Hosts, Usages: serving.Usages}, false},
		{"another organization", cert, key, Leaf{CommonName: serving.CommonName, Organization: []string{"system:masters"}, Usages: serving.Usages}, false},
		{"a key of another certificate", cert, otherKey, serving, false},
		{"signed by another CA", foreignCert, foreignKey, serving, false},
		{"garbage", []byte("x"), []byte("y"), serving, false},
		{"missing", nil, nil, serving, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ca.Keep(tc.cert, tc.key, tc.leaf))
		})
	}
}

// TestIssueValidity: a leaf is valid for the CA's Lifetime unless it says how long itself (a
// certificate made for one Job); either way from an hour ago, with a serial and key of its own.
func TestIssueValidity(t *testing.T) {
	ca, err := NewCA("etcd-ca")
	require.NoError(t, err)
	ca.Lifetime = Lifetime{Validity: 48 * time.Hour}
	client := Leaf{CommonName: "etcd-snapshot", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, tc := range []struct {
		name     string
		validity time.Duration
		want     time.Duration
	}{
		{"the CA's lifetime", 0, 48 * time.Hour},
		{"its own", 25 * time.Minute, 25 * time.Minute},
		{"its own, longer than the CA's lifetime", 72 * time.Hour, 72 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := client
			l.Validity = tc.validity
			before := time.Now()
			first, firstKey, err := ca.Issue(l)
			require.NoError(t, err)
			second, secondKey, err := ca.Issue(l)
			require.NoError(t, err)
			after := time.Now()
			c := parse(t, first)
			assert.False(t, c.NotAfter.Before(before.Add(tc.want).Truncate(time.Second)), "ends %s, not before %s", c.NotAfter, before.Add(tc.want))
			assert.False(t, c.NotAfter.After(after.Add(tc.want)), "ends %s, not after %s", c.NotAfter, after.Add(tc.want))
			assert.False(t, c.NotBefore.After(before.Add(-time.Hour+time.Second)), "valid from an hour ago: %s", c.NotBefore)
			assert.NoError(t, c.CheckSignatureFrom(ca.Cert))
			assert.NotEqual(t, 0, c.SerialNumber.Cmp(parse(t, second).SerialNumber), "a serial of its own")
			assert.NotEqual(t, firstKey, secondKey, "a key of its own")
		})
	}
}

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	c, err := certutil.ParseCertsPEM(certPEM)
	require.NoError(t, err)
	return c[0]
}

func TestParseCA(t *testing.T) {
	ca, err := NewCA("etcd-ca")
	require.NoError(t, err)
	got, err := ParseCA(ca.CertPEM, ca.KeyPEM)
	require.NoError(t, err)
	assert.True(t, got.Cert.Equal(ca.Cert))

	other, err := NewCA("etcd-ca")
	require.NoError(t, err)
	leaf, leafKey, err := ca.Issue(Leaf{CommonName: "x", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	for _, tc := range []struct {
		name, want string
		cert, key  []byte
		keyFault   bool
	}{
		{"garbled certificate", "certificate does not read", []byte("x"), ca.KeyPEM, false},
		{"garbled key", "key does not read", ca.CertPEM, []byte("x"), true},
		{"truncated key", "key does not read", ca.CertPEM, ca.KeyPEM[:len(ca.KeyPEM)/2], true},
		{"another CA's key", "does not belong", ca.CertPEM, other.KeyPEM, true},
		{"a leaf", "not a CA's", leaf, leafKey, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseCA(tc.cert, tc.key)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			var caErr *CAError
			require.ErrorAs(t, err, &caErr, "a *CAError names the half at fault")
			assert.Equal(t, tc.keyFault, caErr.Key, "the key is at fault")
		})
	}
}

func TestServiceAccountKey(t *testing.T) {
	key, pub, err := NewServiceAccountKey()
	require.NoError(t, err)
	assert.Contains(t, string(key), "PRIVATE KEY")
	assert.Contains(t, string(pub), "BEGIN PUBLIC KEY")

	t.Run("its public key written anew from the private one", func(t *testing.T) {
		got, err := ServiceAccountPublicKey(key)
		require.NoError(t, err)
		assert.Equal(t, pub, got)
	})
	for name, keyPEM := range map[string][]byte{"garbage": []byte("garbage"), "empty": nil, "truncated": key[:len(key)/2]} {
		t.Run("a "+name+" key does not read", func(t *testing.T) {
			_, err := ServiceAccountPublicKey(keyPEM)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "the service-account key does not read")
		})
	}
	t.Run("a certificate is no key", func(t *testing.T) {
		ca, err := NewCA("x")
		require.NoError(t, err)
		_, err = ServiceAccountPublicKey(ca.CertPEM)
		assert.Error(t, err)
	})
}
