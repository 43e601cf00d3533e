package accessrequest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/tools/clientcmd"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

func oidcRequest(name string, age time.Duration, c common.OIDCProviderConfig) *clustersv1alpha1.AccessRequest {
	return &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name),
			CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000, 0).Add(-age))},
		Spec: clustersv1alpha1.AccessRequestSpec{OIDC: &clustersv1alpha1.OIDCConfig{OIDCProviderConfig: c}},
	}
}

func TestOIDCConfigPrefixes(t *testing.T) {
	tests := []struct {
		name, userPrefix, groupPrefix string
		wantUser, wantGroup           string
	}{
		{"nil prefixes become <name>:", "", "", "idp:", "idp:"},
		{"given prefixes get a colon", "u", "g:", "u:", "g:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ar := oidcRequest("r", 0, common.OIDCProviderConfig{Name: "idp", Issuer: "https://i", ClientID: "c", UsernamePrefix: tt.userPrefix, GroupsPrefix: tt.groupPrefix})
			c := oidcConfig(ar)
			assert.Equal(t, tt.wantUser, c.UsernamePrefix)
			assert.Equal(t, tt.wantGroup, c.GroupsPrefix)
			assert.Equal(t, "sub", c.UsernameClaim)
			assert.Equal(t, "groups", c.GroupsClaim)
			assert.Empty(t, ar.Spec.OIDC.UsernameClaim, "the request itself is not changed")
		})
	}
}

func TestTrustFor(t *testing.T) {
	reachable := func(issuer string) error {
		if issuer == "https://down" {
			return errors.New("connection refused")
		}
		return nil
	}
	cfg := func(issuer, client string) common.OIDCProviderConfig {
		return common.OIDCProviderConfig{Name: "idp", Issuer: issuer, ClientID: client}
	}
	withClaim := func(c common.OIDCProviderConfig, claim string) common.OIDCProviderConfig {
		c.UsernameClaim = claim
		return c
	}
	withGroupsPrefix := func(c common.OIDCProviderConfig, p string) common.OIDCProviderConfig { c.GroupsPrefix = p; return c }
	withName := func(c common.OIDCProviderConfig, n string) common.OIDCProviderConfig { c.Name = n; return c }
	allowOnly := &providersv1alpha1.OIDCSettings{AllowedIssuers: []string{"https://a"}, IssuerCABundle: testCA(t)}

	tests := []struct {
		name      string
		reqs      []*clustersv1alpha1.AccessRequest
		settings  *providersv1alpha1.OIDCSettings
		issuers   map[string][]string // issuer → audiences
		rejected  map[string]string   // request → reason
		mentioned map[string]string   // request → text its rejection names
	}{
		{
			name:    "two client IDs share one issuer entry",
			reqs:    []*clustersv1alpha1.AccessRequest{oidcRequest("a", 2, cfg("https://a", "c2")), oidcRequest("b", 1, cfg("https://a", "c1"))},
			issuers: map[string][]string{"https://a": {"c1", "c2"}},
		},
		{
			name:      "the later request with other mappings is Denied, naming the earlier",
			reqs:      []*clustersv1alpha1.AccessRequest{oidcRequest("late", 1, withClaim(cfg("https://a", "c2"), "email")), oidcRequest("early", 2, cfg("https://a", "c1"))},
			issuers:   map[string][]string{"https://a": {"c1"}},
			rejected:  map[string]string{"late": ReasonIssuerConflict},
			mentioned: map[string]string{"late": "ns/early"},
		},
		{
			name:     "outside the allow-list",
			reqs:     []*clustersv1alpha1.AccessRequest{oidcRequest("a", 2, cfg("https://a/tenant", "c")), oidcRequest("b", 1, cfg("https://b", "c"))},
			settings: allowOnly,
			issuers:  map[string][]string{"https://a/tenant": {"c"}},
			rejected: map[string]string{"b": ReasonIssuerNotAllowed},
		},
		{
			name:     "http issuer and system: prefixes",
			reqs:     []*clustersv1alpha1.AccessRequest{oidcRequest("http", 3, cfg("http://a", "c")), oidcRequest("sys", 2, withGroupsPrefix(cfg("https://a", "c"), "system:x"))},
			issuers:  map[string][]string{},
			rejected: map[string]string{"http": ReasonInvalidOIDC, "sys": ReasonInvalidOIDC},
		},
		{
			name:      "two issuers with one prefix: the later is Denied, naming the earlier",
			reqs:      []*clustersv1alpha1.AccessRequest{oidcRequest("late", 1, cfg("https://b", "c")), oidcRequest("early", 2, cfg("https://a", "c"))},
			issuers:   map[string][]string{"https://a": {"c"}},
			rejected:  map[string]string{"late": ReasonIssuerConflict},
			mentioned: map[string]string{"late": "https://a (for AccessRequest ns/early)"},
		},
		{
			name: "a groups prefix that starts with another issuer's",
			reqs: []*clustersv1alpha1.AccessRequest{
				oidcRequest("late", 1, withName(withGroupsPrefix(cfg("https://b", "c"), "idp:team-"), "other")),
				oidcRequest("early", 2, cfg("https://a", "c")),
			},
			issuers:  map[string][]string{"https://a": {"c"}},
			rejected: map[string]string{"late": ReasonIssuerConflict},
		},
		{
			name:      "the clusters' service-account issuer is refused",
			reqs:      []*clustersv1alpha1.AccessRequest{oidcRequest("sa", 1, cfg(backend.ServiceAccountIssuer, "c"))},
			issuers:   map[string][]string{},
			rejected:  map[string]string{"sa": ReasonInvalidOIDC},
			mentioned: map[string]string{"sa": backend.ServiceAccountIssuer},
		},
		{
			name:     "an unreachable issuer is left out, the others stay",
			reqs:     []*clustersv1alpha1.AccessRequest{oidcRequest("down", 2, cfg("https://down", "c")), oidcRequest("up", 1, cfg("https://a", "c"))},
			issuers:  map[string][]string{"https://a": {"c"}},
			rejected: map[string]string{"down": ReasonIssuerUnreachable},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := trustFor(tt.reqs, tt.settings, reachable)
			got := map[string][]string{}
			for _, j := range tr.jwt {
				got[j.Issuer.URL] = j.Issuer.Audiences
				assert.Equal(t, apiserverv1.AudienceMatchPolicyMatchAny, j.Issuer.AudienceMatchPolicy)
				if tt.settings != nil {
					assert.Equal(t, tt.settings.IssuerCABundle, j.Issuer.CertificateAuthority)
				}
				require.NotNil(t, j.ClaimMappings.Username.Prefix, "the prefix is always written")
				assert.Equal(t, "idp:", *j.ClaimMappings.Username.Prefix)
				assert.Len(t, j.UserValidationRules, 2)
			}
			assert.Equal(t, tt.issuers, got)
			gotRejected := map[string]string{}
			for uid, err := range tr.rejected {
				gotRejected[string(uid)] = kit.ReasonOf(err, "")
				if want := tt.mentioned[string(uid)]; want != "" {
					assert.Contains(t, err.Error(), want)
				}
			}
			if tt.rejected == nil {
				tt.rejected = map[string]string{}
			}
			assert.Equal(t, tt.rejected, gotRejected)
		})
	}
}

func TestTrustForIssuerLimit(t *testing.T) {
	var reqs []*clustersv1alpha1.AccessRequest
	for i := range maxIssuers + 1 {
		reqs = append(reqs, oidcRequest(fmt.Sprintf("r%02d", i), time.Duration(maxIssuers-i)*time.Second,
			common.OIDCProviderConfig{Name: fmt.Sprintf("idp%02d", i), Issuer: fmt.Sprintf("https://i%d", i), ClientID: "c"}))
	}
	tr := trustFor(reqs, nil, func(string) error { return nil })
	assert.Len(t, tr.jwt, maxIssuers)
	assert.Equal(t, ReasonTooManyIssuers, kit.ReasonOf(tr.rejected[types.UID(fmt.Sprintf("r%02d", maxIssuers))], ""), "the newest is left out")
}

func TestPlanOIDC(t *testing.T) {
	ar := oidcRequest("r", 0, common.OIDCProviderConfig{Name: "idp", Issuer: "https://i", ClientID: "c", RoleBindings: []common.RoleBindings{{
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "alice"}, {Kind: rbacv1.GroupKind, Name: "devs"}, {Kind: rbacv1.ServiceAccountKind, Name: "bot", Namespace: "ci"}},
		RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "view"}, {Kind: "Role", Name: "edit", Namespace: "team"}},
	}}})
	ar.Spec.OIDC.Roles = []clustersv1alpha1.PermissionsRequest{{Name: "edit", Namespace: "team"}, {Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}}}}}
	c := oidcConfig(ar)
	c.UsernamePrefix, c.GroupsPrefix = "u:", "g:"
	p := planOIDC(ar, c, "id")
	assert.Nil(t, p.serviceAccount)
	assert.Equal(t, []string{"team"}, p.namespaces)
	var names []string
	for _, o := range p.objects {
		names = append(names, kindOf(o.obj)+" "+qualified(o.meta.Namespace, o.meta.Name))
	}
	assert.Equal(t, []string{"Role team/edit", "ClusterRole openmcp:oidc-role:id:1", "ClusterRoleBinding openmcp:oidc:id:0:0", "RoleBinding team/openmcp:oidc:id:0:1"}, names)
	b := p.objects[2].obj.(*rbacv1.ClusterRoleBinding)
	assert.Equal(t, []rbacv1.Subject{
		{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "u:alice"},
		{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "g:devs"},
		{Kind: rbacv1.ServiceAccountKind, Name: "bot", Namespace: "ci"},
	}, b.Subjects, "users and groups get the prefixes, ServiceAccounts do not")
}

func TestOIDCSecretData(t *testing.T) {
	end := time.Unix(1_700_003_600, 0)
	a := oidcAccess{Host: "https://h", CA: []byte("ca"), Issuer: "https://i", ClientID: "c", ExtraScopes: []string{"email", "groups"}, Created: time.Unix(1_700_000_000, 0)}
	data, err := a.secretData("ctx")
	require.NoError(t, err)
	assert.NotContains(t, data, clustersv1alpha1.SecretKeyToken)
	assert.NotContains(t, data, clustersv1alpha1.SecretKeyExpirationTimestamp, "no TTL, no expiry")
	assert.Equal(t, "c", string(data[clustersv1alpha1.SecretKeyClientID]))
	cfg, err := clientcmd.Load(data[clustersv1alpha1.SecretKeyKubeconfig])
	require.NoError(t, err)
	exec := cfg.AuthInfos["ctx"].Exec
	require.NotNil(t, exec)
	assert.Equal(t, []string{"oidc-login", "get-token", "--oidc-issuer-url=https://i", "--oidc-client-id=c", "--oidc-extra-scope=email", "--oidc-extra-scope=groups"}, exec.Args)
	a.Expires = &end
	data, err = a.secretData("ctx")
	require.NoError(t, err)
	assert.Equal(t, "1700003600", string(data[clustersv1alpha1.SecretKeyExpirationTimestamp]))
}

// testCA is a PEM CA certificate.
func testCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
}
