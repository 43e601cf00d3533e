package accessrequest

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/apiserver/pkg/apis/apiserver/validation"
	authenticationcel "k8s.io/apiserver/pkg/authentication/cel"
	"k8s.io/utils/ptr"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Reasons of OIDC requests.
const (
	// ReasonInvalidOIDC: spec.oidc cannot be trusted as it is (an http issuer, a system: prefix,
	// a claim the API server rejects); the message says what to change.
	ReasonInvalidOIDC = "InvalidOIDC"
	// ReasonIssuerNotAllowed: the issuer is outside the ProviderConfig's spec.oidc.allowedIssuers.
	ReasonIssuerNotAllowed = "IssuerNotAllowed"
	// ReasonIssuerConflict: another request already makes the cluster trust the issuer with other
	// claim mappings.
	ReasonIssuerConflict = "IssuerConflict"
	// ReasonIssuerUnreachable: the issuer does not answer OpenID discovery; the cluster's API
	// server would not load it, so it is left out until it answers.
	ReasonIssuerUnreachable = "IssuerUnreachable"
	// ReasonTooManyIssuers: the cluster already trusts as many issuers as an API server takes.
	ReasonTooManyIssuers = "TooManyIssuers"
	// ReasonWaitingForAPIServer: the cluster's API server has not loaded its new authentication
	// configuration yet.
	ReasonWaitingForAPIServer = "WaitingForAPIServer"
)

// maxIssuers is how many jwt entries kube-apiserver accepts.
const maxIssuers = 64

// systemPrefix starts the user and group names Kubernetes reserves.
const systemPrefix = "system:"

// oidcConfig is ar's spec.oidc with Default applied and the prefixes resolved: empty means
// "<name>:" (openMCP's GetUsernamePrefix / GetGroupsPrefix).
func oidcConfig(ar *clustersv1alpha1.AccessRequest) common.OIDCProviderConfig {
	c := *ar.Spec.OIDC.OIDCProviderConfig.DeepCopy()
	c.Default()
	if c.UsernamePrefix == "" {
		c.UsernamePrefix = c.Name + ":"
	}
	if c.GroupsPrefix == "" {
		c.GroupsPrefix = c.Name + ":"
	}
	return c
}

// checkOIDC returns what the user must fix in c before a cluster may trust it under settings.
func checkOIDC(c common.OIDCProviderConfig, settings *providersv1alpha1.OIDCSettings) error {
	u, err := url.Parse(c.Issuer)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "":
		return kit.Errorf(ReasonInvalidOIDC, "spec.oidc.issuer %q must be an https URL: the API server only trusts https issuers", c.Issuer)
	case strings.HasPrefix(c.UsernamePrefix, systemPrefix) || strings.HasPrefix(c.GroupsPrefix, systemPrefix):
		return kit.Errorf(ReasonInvalidOIDC, "spec.oidc usernamePrefix %q and groupsPrefix %q must not start with %q: those names are Kubernetes' own", c.UsernamePrefix, c.GroupsPrefix, systemPrefix)
	}
	if settings != nil && len(settings.AllowedIssuers) > 0 && !slices.ContainsFunc(settings.AllowedIssuers, func(p string) bool { return issuerAllowed(c.Issuer, p) }) {
		return kit.Errorf(ReasonIssuerNotAllowed, "issuer %s is not allowed for this ClusterProfile (ProviderConfig spec.oidc.allowedIssuers: %s); use an allowed issuer or ask the platform team to allow it",
			c.Issuer, strings.Join(settings.AllowedIssuers, ", "))
	}
	return nil
}

// issuerAllowed reports whether issuer is allowed by the allowedIssuers entry allowed: the same
// scheme and host (case-insensitive, with the port, 443 implied for https), and a path that is
// allowed's path or below it segment by segment. A string prefix would let https://idp.example.com
// admit https://idp.example.com.evil.net.
func issuerAllowed(issuer, allowed string) bool {
	iu, err := url.Parse(issuer)
	if err != nil || iu.User != nil || iu.RawQuery != "" || iu.Fragment != "" {
		return false
	}
	au, err := url.Parse(allowed)
	if err != nil || au.User != nil {
		return false
	}
	if !strings.EqualFold(iu.Scheme, au.Scheme) || iu.Host == "" || hostPort(iu) != hostPort(au) {
		return false
	}
	ip, ap := strings.TrimSuffix(iu.EscapedPath(), "/"), strings.TrimSuffix(au.EscapedPath(), "/")
	if strings.Contains(ip, "/../") || strings.HasSuffix(ip, "/..") || strings.Contains(ip, "/./") || strings.HasSuffix(ip, "/.") {
		return false // a path that does not say where it is
	}
	return ip == ap || strings.HasPrefix(ip, ap+"/")
}

// hostPort is u's host, lower-cased, and its port, the scheme's default when none is given.
func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" && strings.EqualFold(u.Scheme, "https") {
		port = "443"
	}
	return strings.ToLower(u.Hostname()) + ":" + port
}

// jwtAuthenticator is how a cluster's API server trusts c's issuer for the given audiences.
func jwtAuthenticator(c common.OIDCProviderConfig, audiences []string, caBundle string) apiserverv1.JWTAuthenticator {
	return apiserverv1.JWTAuthenticator{
		Issuer: apiserverv1.Issuer{
			URL:                  c.Issuer,
			Audiences:            audiences,
			AudienceMatchPolicy:  apiserverv1.AudienceMatchPolicyMatchAny,
			CertificateAuthority: caBundle,
		},
		ClaimMappings: apiserverv1.ClaimMappings{
			Username: apiserverv1.PrefixedClaimOrExpression{Claim: c.UsernameClaim, Prefix: ptr.To(c.UsernamePrefix)},
			Groups:   apiserverv1.PrefixedClaimOrExpression{Claim: c.GroupsClaim, Prefix: ptr.To(c.GroupsPrefix)},
		},
		// The prefixes already keep mapped names out of system:, this states it to the API server.
		UserValidationRules: []apiserverv1.UserValidationRule{
			{Expression: "!user.username.startsWith('system:')", Message: "user names starting with system: are Kubernetes' own"},
			{Expression: "user.groups.all(group, !group.startsWith('system:'))", Message: "group names starting with system: are Kubernetes' own"},
		},
	}
}

// validateJWT checks j with the API server's own validation, so that no request can put a file
// into the cluster that its API server refuses (which would block every later change).
func validateJWT(j apiserverv1.JWTAuthenticator) error {
	var internal apiserver.JWTAuthenticator
	if err := apiserverv1.Convert_v1_JWTAuthenticator_To_apiserver_JWTAuthenticator(&j, &internal, nil); err != nil {
		return err
	}
	// The clusters' own service-account issuer is refused, as their API servers refuse it: a token
	// of an identity provider must never pass for one of the cluster's service accounts.
	errs := validation.ValidateAuthenticationConfiguration(authenticationcel.NewDefaultCompiler(),
		&apiserver.AuthenticationConfiguration{JWT: []apiserver.JWTAuthenticator{internal}}, []string{backend.ServiceAccountIssuer})
	if err := errs.ToAggregate(); err != nil {
		return kit.Errorf(ReasonInvalidOIDC, "the cluster's API server would reject spec.oidc: %s", err.Error())
	}
	return nil
}

// sameMappings reports whether a and b map claims alike: requests on one issuer must.
func sameMappings(a, b common.OIDCProviderConfig) bool {
	return a.UsernameClaim == b.UsernameClaim && a.UsernamePrefix == b.UsernamePrefix &&
		a.GroupsClaim == b.GroupsClaim && a.GroupsPrefix == b.GroupsPrefix
}

// trust is what a cluster trusts for its OIDC requests: one jwt entry per issuer, and the reason
// each request that is left out is left out.
type trust struct {
	jwt      []apiserverv1.JWTAuthenticator
	rejected map[types.UID]error
}

// trustedIssuer is one issuer a cluster trusts: its configuration (from the first request that
// asked for it), that request, and every client ID of its requests.
type trustedIssuer struct {
	cfg       common.OIDCProviderConfig
	owner     string
	audiences []string
}

// prefixClash returns the trusted issuer (of another URL than c's) whose username or groups
// prefix equals c's or is a prefix of it or the other way round: tokens of one could then be
// mapped to the names of the other's users or groups. Nil if none.
func prefixClash(issuers map[string]*trustedIssuer, order []string, c common.OIDCProviderConfig) *trustedIssuer {
	overlap := func(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }
	for _, u := range order {
		if is := issuers[u]; u != c.Issuer && (overlap(is.cfg.UsernamePrefix, c.UsernamePrefix) || overlap(is.cfg.GroupsPrefix, c.GroupsPrefix)) {
			return is
		}
	}
	return nil
}

// trustFor computes the trust of a cluster from its OIDC requests (those being deleted are not
// passed). Requests are taken oldest first, so that a later request never displaces an earlier
// one: it is the one Denied on a conflict. reachable says whether an issuer answers discovery.
func trustFor(reqs []*clustersv1alpha1.AccessRequest, settings *providersv1alpha1.OIDCSettings, reachable func(issuer string) error) trust {
	reqs = slices.Clone(reqs)
	slices.SortFunc(reqs, func(a, b *clustersv1alpha1.AccessRequest) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	var caBundle string
	if settings != nil {
		caBundle = settings.IssuerCABundle
	}
	var order []string
	issuers := map[string]*trustedIssuer{}
	t := trust{rejected: map[types.UID]error{}}
	for _, ar := range reqs {
		c := oidcConfig(ar)
		if err := checkOIDC(c, settings); err != nil {
			t.rejected[ar.UID] = err
			continue
		}
		if err := validateJWT(jwtAuthenticator(c, []string{c.ClientID}, caBundle)); err != nil {
			t.rejected[ar.UID] = err
			continue
		}
		if is := issuers[c.Issuer]; is != nil {
			if !sameMappings(is.cfg, c) {
				t.rejected[ar.UID] = kit.Errorf(ReasonIssuerConflict,
					"the cluster already trusts issuer %s for AccessRequest %s with other claim mappings (usernameClaim %q, usernamePrefix %q, groupsClaim %q, groupsPrefix %q); use the same mappings",
					c.Issuer, is.owner, is.cfg.UsernameClaim, is.cfg.UsernamePrefix, is.cfg.GroupsClaim, is.cfg.GroupsPrefix)
				continue
			}
			if !slices.Contains(is.audiences, c.ClientID) {
				is.audiences = append(is.audiences, c.ClientID)
			}
			continue
		}
		if other := prefixClash(issuers, order, c); other != nil {
			t.rejected[ar.UID] = kit.Errorf(ReasonIssuerConflict,
				"the cluster trusts issuer %s (for AccessRequest %s) with usernamePrefix %q and groupsPrefix %q; this request's usernamePrefix %q or groupsPrefix %q is one of them, or one starts with the other, so one identity provider could sign in as the other's users or groups: choose other prefixes (or another spec.oidc.name, their default)",
				other.cfg.Issuer, other.owner, other.cfg.UsernamePrefix, other.cfg.GroupsPrefix, c.UsernamePrefix, c.GroupsPrefix)
			continue
		}
		if len(order) == maxIssuers {
			t.rejected[ar.UID] = kit.Errorf(ReasonTooManyIssuers, "the cluster already trusts %d issuers, the most its API server takes; share an issuer with another request", maxIssuers)
			continue
		}
		if err := reachable(c.Issuer); err != nil {
			if kit.ReasonOf(err, "") == "" {
				err = kit.Errorf(ReasonIssuerUnreachable, "issuer %s does not answer OpenID discovery; the cluster trusts it once it does", c.Issuer)
			}
			t.rejected[ar.UID] = err
			continue
		}
		order = append(order, c.Issuer)
		issuers[c.Issuer] = &trustedIssuer{cfg: c, owner: ar.Namespace + "/" + ar.Name, audiences: []string{c.ClientID}}
	}
	for _, u := range order {
		is := issuers[u]
		slices.Sort(is.audiences)
		t.jwt = append(t.jwt, jwtAuthenticator(is.cfg, is.audiences, caBundle))
	}
	return t
}

// planOIDC builds the RBAC of ar's spec.oidc: its roles, and its role bindings with the User and
// Group subjects prefixed as the cluster maps them (ServiceAccount subjects are not).
func planOIDC(ar *clustersv1alpha1.AccessRequest, c common.OIDCProviderConfig, id string) plan {
	p := plan{id: id, labels: requestLabels(ar, id), annotations: map[string]string{AnnotationRequestName: ar.Namespace + "/" + ar.Name}}
	for i, role := range ar.Spec.OIDC.Roles {
		name := role.Name
		if name == "" {
			name = fmt.Sprintf("openmcp:oidc-role:%s:%d", id, i)
		}
		p.role(fmt.Sprintf("spec.oidc.roles[%d]", i), name, role, role.Name != "")
	}
	for i, rb := range c.RoleBindings {
		subjects := make([]rbacv1.Subject, len(rb.Subjects))
		for k, s := range rb.Subjects {
			subjects[k] = s
			switch s.Kind {
			case rbacv1.UserKind:
				subjects[k].Name, subjects[k].APIGroup = c.UsernamePrefix+s.Name, rbacv1.GroupName
			case rbacv1.GroupKind:
				subjects[k].Name, subjects[k].APIGroup = c.GroupsPrefix+s.Name, rbacv1.GroupName
			}
		}
		for j, ref := range rb.RoleRefs {
			p.bind(fmt.Sprintf("spec.oidc.roleBindings[%d].roleRefs[%d]", i, j), fmt.Sprintf("openmcp:oidc:%s:%d:%d", id, i, j), ref.Namespace, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: ref.Kind, Name: ref.Name}, subjects, false)
		}
	}
	return p
}
