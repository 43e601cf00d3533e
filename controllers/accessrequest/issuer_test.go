package accessrequest

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestIssuerAllowed(t *testing.T) {
	for _, tc := range []struct {
		issuer, allowed string
		want            bool
	}{
		{"https://idp.example.com", "https://idp.example.com", true},
		{"https://idp.example.com/", "https://idp.example.com", true},
		{"https://idp.example.com/realms/corp", "https://idp.example.com", true},
		{"https://idp.example.com/realms/corp", "https://idp.example.com/", true},
		{"https://idp.example.com/realms/corp", "https://idp.example.com/realms", true},
		{"https://idp.example.com/realms/corp", "https://idp.example.com/realms/", true},
		{"https://IDP.example.com/realms", "https://idp.EXAMPLE.com", true},
		{"https://idp.example.com:443/a", "https://idp.example.com", true},
		{"https://idp.example.com/a", "https://idp.example.com:443", true},
		{"https://127.0.0.1:8443/x", "https://127.0.0.1:8443", true},
		// A string prefix would admit these.
		{"https://idp.example.com.evil.net", "https://idp.example.com", false},
		{"https://idp.example.comx", "https://idp.example.com", false},
		{"https://idp.example.com:8443", "https://idp.example.com", false},
		{"https://127.0.0.1:84430", "https://127.0.0.1:8443", false},
		{"https://idp.example.com/realmsx", "https://idp.example.com/realms", false},
		{"https://idp.example.com/realms/../admin", "https://idp.example.com/realms", false},
		{"https://idp.example.com/realms/./corp", "https://idp.example.com/realms", false},
		{"https://evil@idp.example.com", "https://idp.example.com", false},
		{"https://idp.example.com?x=1", "https://idp.example.com", false},
		{"https://idp.example.com#x", "https://idp.example.com", false},
		{"http://idp.example.com", "https://idp.example.com", false},
		{"https://other.example.com", "https://idp.example.com", false},
		{"https://idp.example.com", "https://idp.example.com/realms", false},
		{"", "https://idp.example.com", false},
		{"https://", "https://", false},
	} {
		t.Run(tc.issuer+" by "+tc.allowed, func(t *testing.T) {
			assert.Equal(t, tc.want, issuerAllowed(tc.issuer, tc.allowed))
		})
	}
}

// FuzzIssuerAllowed: an allowed issuer has the entry's scheme and host and a path at or below
// the entry's, segment by segment; a host with anything appended is never allowed.
func FuzzIssuerAllowed(f *testing.F) {
	f.Add("https://idp.example.com/realms/corp", "https://idp.example.com/realms")
	f.Add("https://idp.example.com.evil.net", "https://idp.example.com")
	f.Add("https://[::1]:8443/a", "https://[::1]:8443")
	f.Add("https://a.b/%2e%2e/c", "https://a.b/x")
	f.Fuzz(func(t *testing.T, issuer, allowed string) {
		if !issuerAllowed(issuer, allowed) {
			return
		}
		iu, err1 := url.Parse(issuer)
		au, err2 := url.Parse(allowed)
		if err1 != nil || err2 != nil {
			t.Fatalf("allowed although unparsable: %q by %q", issuer, allowed)
		}
		if !strings.EqualFold(iu.Scheme, au.Scheme) || hostPort(iu) != hostPort(au) {
			t.Fatalf("%q allowed by %q with another scheme or host", issuer, allowed)
		}
		ip, ap := strings.TrimSuffix(iu.EscapedPath(), "/"), strings.TrimSuffix(au.EscapedPath(), "/")
		if ip != ap && !strings.HasPrefix(ip, ap+"/") {
			t.Fatalf("%q allowed by %q: path not at or below", issuer, allowed)
		}
		if au.Host != "" {
			evil := *iu
			evil.Host = iu.Hostname() + ".evil.net"
			if issuerAllowed(evil.String(), allowed) {
				t.Fatalf("%q allowed by %q", evil.String(), allowed)
			}
		}
	})
}
