package accessrequest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/keymutex"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// IndexClusterRef indexes the AccessRequests prepared for this provider by their Cluster
// (namespace/name): a Cluster event finds the requests waiting for it, and an OIDC grant finds
// the other OIDC requests of its cluster. controllers/profile registers it.
const IndexClusterRef = "accessrequest.clusterRef"

// How soon an OIDC request is looked at again while the cluster's API server loads its new
// authentication configuration, and while its issuer does not answer discovery.
const (
	retryAuthConfig = 500 * time.Millisecond
	retryIssuer     = 30 * time.Second
)

// oidcRecheck is how often a granted OIDC request checks that its issuer still answers discovery.
const oidcRecheck = 5 * time.Minute

// grantOIDC grants a spec.oidc request: the cluster is made to trust every issuer its OIDC
// requests ask for (this one among them), the request's roles and bindings are applied, and once
// the API server runs with the new trust the Secret gets a kubeconfig for kubelogin.
func (r *Reconciler) grantOIDC(ctx context.Context, g *grant) (reconcile.Result, error) {
	ar := g.ar
	auth, ok := r.Backend.(backend.Authenticator)
	if !ok {
		return r.deny(ctx, ar, g.base, ReasonOIDCNotSupported, fmt.Sprintf("backend %q cannot make its clusters trust OIDC issuers; request spec.token instead", r.BackendName))
	}
	c := oidcConfig(ar)
	if g.granted && intact(g.secret, g.host, g.cfg.CAData) && r.discovery().reachable(ctx, r.OIDC)(c.Issuer) == nil {
		// Granted and its issuer still answers; looked at again after oidcRecheck. An issuer
		// that stopped answering falls through: it leaves the cluster's configuration (which its
		// API server could not reload otherwise) and the request goes back to Pending. Roles and
		// bindings gone from the cluster fall through too: they are made again.
		still, err := r.stillGranted(ctx, g, planOIDC(ar, c, g.id), "")
		if err != nil {
			return r.retry(ctx, ar, g.base, err)
		}
		if still {
			res, err := r.granted(ctx, g, oidcGrantedMessage(ar, c))
			res.RequeueAfter = min(oidcRecheck, r.Options.GrantCheck)
			return res, err
		}
	}
	applied, rejected, err := r.setTrust(ctx, auth, g.cl, ar)
	if err != nil {
		return r.retry(ctx, ar, g.base, err)
	}
	if rejected != nil {
		return r.grantFailed(ctx, ar, g.base, rejected)
	}
	t, err := r.target(g.cfg)
	if err != nil {
		return r.retry(ctx, ar, g.base, err)
	}
	if !g.granted {
		if err := t.grant(ctx, planOIDC(ar, c, g.id), g.fresh); err != nil {
			return r.grantFailed(ctx, ar, g.base, err)
		}
	}
	if !applied {
		res, err := r.pending(ctx, ar, g.base, ReasonWaitingForAPIServer, fmt.Sprintf("the API server of Cluster %s is loading the trust in issuer %s", clusterKey(ar), c.Issuer))
		res.RequeueAfter = retryAuthConfig
		return res, err
	}
	a := oidcAccess{Host: g.host, CA: g.cfg.CAData, Issuer: c.Issuer, ClientID: c.ClientID, ExtraScopes: c.ExtraScopes, Created: g.now, Expires: ttlEnd(ar)}
	data, err := a.secretData(ar.Spec.ClusterRef.Name)
	if err == nil {
		err = r.writeSecret(ctx, ar, data)
	}
	if err != nil {
		return r.retry(ctx, ar, g.base, err)
	}
	if g.granted {
		r.secretRestored(ctx, ar)
	} else {
		log.FromContext(ctx).Info("Granted OIDC access", "cluster", clusterKey(ar), "issuer", c.Issuer, "clientID", c.ClientID)
	}
	res, err := r.granted(ctx, g, oidcGrantedMessage(ar, c))
	res.RequeueAfter = oidcRecheck
	return res, err
}

func oidcGrantedMessage(ar *clustersv1alpha1.AccessRequest, c common.OIDCProviderConfig) string {
	return fmt.Sprintf("Cluster %s trusts issuer %s for client %s; Secret %s holds a kubeconfig for kubectl oidc-login", clusterKey(ar), c.Issuer, c.ClientID, SecretName(ar.Name))
}

// setTrust makes cl trust the issuers of its OIDC requests: ar (even if the cache does not show
// it yet) and every other one that is neither being deleted nor Denied. It returns
// whether the API server runs with them, and why ar itself cannot be trusted, if it cannot.
func (r *Reconciler) setTrust(ctx context.Context, auth backend.Authenticator, cl *clustersv1alpha1.Cluster, ar *clustersv1alpha1.AccessRequest) (applied bool, rejected error, err error) {
	r.trustLocksOnce.Do(func() { r.trustLocks = keymutex.NewHashed(64) })
	key := client.ObjectKeyFromObject(cl).String()
	r.trustLocks.LockKey(key)
	defer func() { _ = r.trustLocks.UnlockKey(key) }()
	list := &clustersv1alpha1.AccessRequestList{}
	if err := r.Client.List(ctx, list, client.MatchingFields{IndexClusterRef: client.ObjectKeyFromObject(cl).String()}); err != nil {
		return false, nil, fmt.Errorf("listing the AccessRequests of Cluster %s: %w", client.ObjectKeyFromObject(cl), err)
	}
	var reqs []*clustersv1alpha1.AccessRequest
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == ar.UID {
			o = ar
		}
		// A request Denied for its current spec is answered: it gets no trust, even if what
		// denied it went away (fixing its spec re-evaluates it). A Granted one whose spec changed
		// keeps its trust until it is answered again. Only requests of the Cluster's own profile
		// count (one labelled for another is Denied ProfileMismatch).
		if o.Spec.OIDC != nil && o.DeletionTimestamp.IsZero() && !deniedForGeneration(o) && ProfileOf(o, r.ProviderName) == cl.Spec.Profile {
			reqs = append(reqs, o)
		}
	}
	tr := trustFor(reqs, r.OIDC, r.discovery().reachable(ctx, r.OIDC))
	applied, err = auth.SetJWTAuthenticators(ctx, cl, tr.jwt)
	if err != nil {
		return false, nil, fmt.Errorf("setting the cluster's trusted issuers: %w", err)
	}
	return applied, tr.rejected[ar.UID], nil
}

// revokeOIDC makes ar's cluster stop trusting what only ar asked for. ar is being deleted.
func (r *Reconciler) revokeOIDC(ctx context.Context, cl *clustersv1alpha1.Cluster, ar *clustersv1alpha1.AccessRequest) (applied bool, err error) {
	auth, ok := r.Backend.(backend.Authenticator)
	if !ok {
		return true, nil
	}
	applied, _, err = r.setTrust(ctx, auth, cl, ar)
	return applied, err
}

// discovery returns the reconciler's issuer discovery cache.
func (r *Reconciler) discovery() *discoveryCache {
	r.discoveryOnce.Do(func() { r.issuers = newDiscoveryCache(r.Options.Clock) })
	return r.issuers
}

// discoveryCache remembers for a while whether issuers answer OpenID discovery, so that one
// cluster's requests do not ask an issuer again on every reconcile. It holds at most
// maxDiscoveryResults answers (the least recently used goes first), a working issuer's for
// discoveryOKFor, a failing one's for discoveryFailedFor.
type discoveryCache struct {
	results *cache.LRUExpireCache // key → discoveryResult
}

type discoveryResult struct {
	err error
}

func newDiscoveryCache(clock cache.Clock) *discoveryCache {
	return &discoveryCache{results: cache.NewLRUExpireCacheWithClock(maxDiscoveryResults, clock)}
}

// How long a discovery answer is remembered: a working issuer longer than a failing one; how
// long one discovery may take; how many answers are kept.
const (
	discoveryOKFor      = time.Minute
	discoveryFailedFor  = 10 * time.Second
	discoveryTimeout    = 5 * time.Second
	maxDiscoveryResults = 1024
)

// reachable returns a function that reports whether an issuer answers discovery, verified with
// settings' CA bundle (or the system's roots) and within settings' address rules. Its error says
// what is wrong in the provider's own words, never in the issuer's (see discoveryError).
func (d *discoveryCache) reachable(ctx context.Context, settings *providersv1alpha1.OIDCSettings) func(string) error {
	var caBundle string
	var allowPrivate bool
	if settings != nil {
		caBundle, allowPrivate = settings.IssuerCABundle, settings.AllowPrivateIssuers
	}
	return func(issuer string) error {
		key := fmt.Sprintf("%s\x00%s\x00%t", issuer, caBundle, allowPrivate)
		if res, ok := d.results.Get(key); ok {
			return res.(discoveryResult).err
		}
		err := discover(ctx, issuer, caBundle, allowPrivate)
		if err != nil {
			log.FromContext(ctx).V(1).Info("OpenID discovery failed", "issuer", issuer, "error", err.Error())
			err = discoveryError(issuer, err)
		}
		if ctx.Err() != nil {
			return err // cut short by the caller: nothing learned about the issuer
		}
		d.store(key, err)
		return err
	}
}

// store remembers the answer err (nil: the issuer answers) under key.
func (d *discoveryCache) store(key string, err error) {
	ttl := discoveryOKFor
	if err != nil {
		ttl = discoveryFailedFor
	}
	d.results.Add(key, discoveryResult{err: err}, ttl)
}

// errAddressNotAllowed: the issuer's host resolved to an address the ProviderConfig does not
// allow (AllowPrivateIssuers).
var errAddressNotAllowed = errors.New("address not allowed")

// errRedirect: discovery was redirected to another host, or to http.
var errRedirect = errors.New("redirected to another host or to http")

// errIssuerMismatch: the discovery document names another issuer.
var errIssuerMismatch = errors.New("the discovery document names another issuer")

// discover fetches issuer's OpenID configuration and checks that it names issuer exactly, as the
// API server does before it trusts it. It dials only addresses allowedAddress accepts (checked on
// the address actually dialed, so a name that resolves, or is re-resolved, to a private address
// is refused too), follows redirects only within the issuer's https host, and gives up with ctx
// or after discoveryTimeout.
func discover(ctx context.Context, issuer, caBundle string, allowPrivate bool) error {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if caBundle != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caBundle)) {
			return errors.New("the ProviderConfig's spec.oidc.issuerCABundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	dialer := &net.Dialer{Timeout: discoveryTimeout}
	if !allowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip, err := netip.ParseAddr(host); err != nil || !publicAddress(ip) {
				return fmt.Errorf("%w: %s", errAddressNotAllowed, host)
			}
			return nil
		}
	}
	// No proxy from the environment: the addresses checked are the ones dialed.
	transport := &http.Transport{TLSClientConfig: tlsConfig, DialContext: dialer.DialContext, ForceAttemptHTTP2: true}
	defer transport.CloseIdleConnections()
	start, err := url.Parse(issuer)
	if err != nil {
		return err
	}
	c := &http.Client{
		Timeout:   discoveryTimeout,
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Scheme != "https" || !strings.EqualFold(req.URL.Host, start.Host) || len(via) > 3 {
				return errRedirect
			}
			return nil
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(issuer, "/")+"/.well-known/openid-configuration", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return httpStatusError(resp.StatusCode)
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return fmt.Errorf("discovery document: %w", err)
	}
	if doc.Issuer != issuer {
		return errIssuerMismatch
	}
	return nil
}

// httpStatusError is a discovery answer other than 200.
type httpStatusError int

func (e httpStatusError) Error() string { return fmt.Sprintf("HTTP %d", int(e)) }

// sharedAddressSpace is 100.64.0.0/10 (RFC 6598): carrier-grade NAT, and pod or service ranges
// of some platforms (Gardener).
var sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10")

// publicAddress reports whether ip is an address discovery may reach without the ProviderConfig's
// AllowPrivateIssuers: not loopback, link-local (cloud metadata: 169.254.169.254), private
// (RFC 1918, IPv6 ULA such as fd00:ec2::254), shared, unspecified or multicast.
func publicAddress(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsValid() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && !ip.IsLinkLocalMulticast() &&
		!ip.IsPrivate() && !ip.IsUnspecified() && !ip.IsMulticast() && !ip.IsInterfaceLocalMulticast() &&
		!sharedAddressSpace.Contains(ip)
}

// discoveryError turns a failed discovery of issuer into an error for the request's status: its
// reason and a message in the provider's words. Nothing of the issuer's answer (its body, its
// headers, its certificate's names) and no Go dial or TLS error text goes into it; the raw error
// is logged at V(1).
func discoveryError(issuer string, err error) error {
	if kit.ReasonOf(err, "") != "" {
		return err
	}
	var (
		status   httpStatusError
		dnsErr   *net.DNSError
		certErr  *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostErr  x509.HostnameError
		invalid  x509.CertificateInvalidError
		syntax   *json.SyntaxError
		typeErr  *json.UnmarshalTypeError
		netError net.Error
	)
	what := "the connection failed"
	switch {
	case errors.Is(err, errAddressNotAllowed):
		return kit.Errorf(ReasonIssuerNotAllowed, "issuer %s resolves to a loopback, link-local, private or shared address, which this ClusterProfile does not allow: the provider fetches discovery documents from inside the platform (ask the platform team to set the ProviderConfig's spec.oidc.allowPrivateIssuers for an identity provider in its network)", issuer)
	case errors.Is(err, errRedirect):
		what = "it redirects to another host or to http, which is not followed; name the issuer the tokens' iss claim names"
	case errors.Is(err, errIssuerMismatch):
		return kit.Errorf(ReasonInvalidOIDC, "the discovery document of %s names another issuer: spec.oidc.issuer must equal the issuer the identity provider names, as in the tokens' iss claim", issuer)
	case errors.As(err, &status):
		what = fmt.Sprintf("it answered HTTP %d, not 200", int(status))
	case errors.As(err, &dnsErr):
		what = "its host name does not resolve"
	case errors.As(err, &certErr), errors.As(err, &unknown), errors.As(err, &hostErr), errors.As(err, &invalid):
		what = "its TLS certificate is not trusted for that name (the ProviderConfig's spec.oidc.issuerCABundle, or else the system's roots, must verify it)"
	case errors.As(err, &syntax), errors.As(err, &typeErr), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		what = "its discovery document is not valid JSON"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netError) && netError.Timeout():
		what = fmt.Sprintf("it did not answer within %s", discoveryTimeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		what = "the connection was refused"
	case errors.Is(err, context.Canceled):
		what = "the check was cut short"
	}
	return kit.Errorf(ReasonIssuerUnreachable, "issuer %s does not answer OpenID discovery: %s; the cluster trusts it once it does", issuer, what)
}
