package certs

import (
	"crypto/x509"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClampNotAfter(t *testing.T) {
	caEnd := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		want, ends time.Time
	}{
		{"before the CA's end: as asked", caEnd.Add(-time.Hour), caEnd.Add(-time.Hour)},
		{"at the CA's end", caEnd, caEnd},
		{"past the CA's end: the CA's end", caEnd.Add(365 * 24 * time.Hour), caEnd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.ends, ClampNotAfter(tc.want, caEnd))
		})
	}
}

// TestIssueNeverOutlivesCA: a leaf asked for longer than its CA has left ends with the CA; one
// that ends before is as asked. Either verifies against the CA.
func TestIssueNeverOutlivesCA(t *testing.T) {
	ca, err := NewCAValid("kubernetes", 2*time.Hour)
	require.NoError(t, err)
	client := Leaf{CommonName: "admin", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	for _, tc := range []struct {
		name     string
		life     Lifetime
		validity time.Duration
		clamped  bool
	}{
		{"the default year", Lifetime{}, 0, true},
		{"a Job's own validity past the CA", Lifetime{}, 3 * time.Hour, true},
		{"an hour", Lifetime{Validity: time.Hour}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca.Lifetime = tc.life
			l := client
			l.Validity = tc.validity
			certPEM, _, err := ca.Issue(l)
			require.NoError(t, err)
			c := parse(t, certPEM)
			require.NoError(t, c.CheckSignatureFrom(ca.Cert))
			assert.False(t, c.NotAfter.After(ca.Cert.NotAfter), "ends %s, the CA %s", c.NotAfter, ca.Cert.NotAfter)
			assert.Equal(t, tc.clamped, c.NotAfter.Equal(ca.Cert.NotAfter), "ends with the CA")
		})
	}
}

// TestNewCAValid: a CA valid for the time asked, from an hour ago, with a key ID of its own that
// its leaves name, so that two CAs of one name in a bundle are told apart.
func TestNewCAValid(t *testing.T) {
	before := time.Now()
	a, err := NewCAValid("local-cluster-ca", 3*time.Minute)
	require.NoError(t, err)
	b, err := NewCAValid("local-cluster-ca", 3*time.Minute)
	require.NoError(t, err)
	assert.True(t, a.Cert.IsCA)
	assert.WithinDuration(t, before.Add(3*time.Minute), a.Cert.NotAfter, 2*time.Second)
	assert.False(t, a.Cert.NotBefore.After(before.Add(-time.Hour+time.Second)))
	assert.NotEmpty(t, a.Cert.SubjectKeyId)
	assert.NotEqual(t, a.Cert.SubjectKeyId, b.Cert.SubjectKeyId)
	leaf, _, err := a.Issue(Leaf{CommonName: "x", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	assert.Equal(t, a.Cert.SubjectKeyId, parse(t, leaf).AuthorityKeyId)
	parsed, err := ParseCA(a.CertPEM, a.KeyPEM)
	require.NoError(t, err, "a CA made here reads back")
	assert.Equal(t, a.Cert.Raw, parsed.Cert.Raw)

	d, err := NewCA("kubernetes")
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now().Add(CAValidity), d.Cert.NotAfter, 2*time.Second, "NewCA: ten years")
}

// TestLeafRenewAt: a leaf that ends before its CA is due its Lifetime's RenewBefore its end; one
// that ends with its CA (clamped) is due when the CA is replaced, or kept to its end by a CA that
// is never replaced (issuing it anew would not make it last longer).
func TestLeafRenewAt(t *testing.T) {
	ca, err := NewCAValid("kubernetes", 100*24*time.Hour)
	require.NoError(t, err)
	caEnd := ca.Cert.NotAfter
	replaced := caEnd.Add(-40 * 24 * time.Hour)
	for _, tc := range []struct {
		name       string
		replacedAt time.Time
		notAfter   time.Time
		want       time.Time
	}{
		{"ends before the CA", time.Time{}, caEnd.Add(-50 * 24 * time.Hour), caEnd.Add(-80 * 24 * time.Hour)},
		{"ends before the CA, the CA replaced later", replaced, caEnd.Add(-50 * 24 * time.Hour), caEnd.Add(-80 * 24 * time.Hour)},
		{"ends with the CA, the CA replaced", replaced, caEnd, replaced},
		{"ends with the CA, never replaced", time.Time{}, caEnd, caEnd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca.ReplacedAt = tc.replacedAt
			assert.Equal(t, tc.want, ca.LeafRenewAt(tc.notAfter))
		})
	}
}

// TestKeepClampedLeaf: a leaf that ends with its CA is kept until the CA is replaced, although
// its RenewBefore (30 days by default) has come long ago; then it is due.
func TestKeepClampedLeaf(t *testing.T) {
	ca, err := NewCAValid("kubernetes", time.Hour)
	require.NoError(t, err)
	l := Leaf{CommonName: "admin", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	certPEM, keyPEM, err := ca.Issue(l)
	require.NoError(t, err)
	assert.True(t, ca.Keep(certPEM, keyPEM, l), "never replaced: kept")
	ca.ReplacedAt = time.Now().Add(time.Minute)
	assert.True(t, ca.Keep(certPEM, keyPEM, l), "replaced in a minute: kept")
	ca.ReplacedAt = time.Now().Add(-time.Second)
	assert.False(t, ca.Keep(certPEM, keyPEM, l), "replaced: due")
}

func TestCALifetime(t *testing.T) {
	l := Lifetime{}.Or()
	assert.Equal(t, CAValidity, l.CAValidity)
	assert.Equal(t, CARenewBefore, l.CARenewBefore)
	end := time.Date(2035, 6, 1, 0, 0, 0, 0, time.UTC)
	assert.Equal(t, end.Add(-CARenewBefore), l.CARenewAt(end))
	assert.Equal(t, CARenewBefore/4, l.CAStep())
	short := Lifetime{CAValidity: 3 * time.Minute, CARenewBefore: 2 * time.Minute}
	assert.Equal(t, 30*time.Second, short.CAStep())
	assert.Equal(t, end.Add(-2*time.Minute), short.CARenewAt(end))
}
