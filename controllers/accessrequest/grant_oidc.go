package accessrequest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

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
	if g.granted && intact(g.secret, g.cfg.Host, g.cfg.CAData) && r.discovery().reachable(r.OIDC)(c.Issuer) == nil {
		// Granted and its issuer still answers; looked at again after oidcRecheck. An issuer
		// that stopped answering falls through: it leaves the cluster's configuration (which its
		// API server could not reload otherwise) and the request goes back to Pending.
		res, err := r.granted(ctx, g, oidcGrantedMessage(ar, c))
		res.RequeueAfter = oidcRecheck
		return res, err
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
	a := oidcAccess{Host: g.cfg.Host, CA: g.cfg.CAData, Issuer: c.Issuer, ClientID: c.ClientID, ExtraScopes: c.ExtraScopes, Created: g.now, Expires: ttlEnd(ar)}
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
	h := fnv.New32a()
	_, _ = h.Write([]byte(client.ObjectKeyFromObject(cl).String()))
	mu := &r.trustLocks[h.Sum32()%uint32(len(r.trustLocks))]
	mu.Lock()
	defer mu.Unlock()
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
	tr := trustFor(reqs, r.OIDC, r.discovery().reachable(r.OIDC))
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
	r.discoveryOnce.Do(func() { r.issuers = &discoveryCache{results: map[string]discoveryResult{}, now: r.Options.Clock.Now} })
	return r.issuers
}

// discoveryCache remembers for a while whether issuers answer OpenID discovery, so that one
// cluster's requests do not ask an issuer again on every reconcile.
type discoveryCache struct {
	mu      sync.Mutex
	results map[string]discoveryResult
	now     func() time.Time
}

type discoveryResult struct {
	err error
	at  time.Time
}

// How long a discovery answer is remembered: a working issuer longer than a failing one.
const (
	discoveryOKFor     = time.Minute
	discoveryFailedFor = 10 * time.Second
	discoveryTimeout   = 5 * time.Second
)

// reachable returns a function that reports whether an issuer answers discovery, verified with
// settings' CA bundle (or the system's roots).
func (d *discoveryCache) reachable(settings *providersv1alpha1.OIDCSettings) func(string) error {
	var caBundle string
	if settings != nil {
		caBundle = settings.IssuerCABundle
	}
	return func(issuer string) error {
		key := issuer + "\x00" + caBundle
		d.mu.Lock()
		res, ok := d.results[key]
		d.mu.Unlock()
		if ok {
			age := d.now().Sub(res.at)
			if res.err == nil && age < discoveryOKFor || res.err != nil && age < discoveryFailedFor {
				return res.err
			}
		}
		err := discover(issuer, caBundle)
		d.mu.Lock()
		d.results[key] = discoveryResult{err: err, at: d.now()}
		d.mu.Unlock()
		return err
	}
}

// discover fetches issuer's OpenID configuration and checks that it names issuer exactly, as the
// API server does before it trusts it.
func discover(issuer, caBundle string) error {
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if caBundle != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(caBundle)) {
			return errors.New("the ProviderConfig's spec.oidc.issuerCABundle holds no PEM certificate")
		}
		tlsConfig.RootCAs = pool
	}
	c := &http.Client{Timeout: discoveryTimeout, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	defer c.CloseIdleConnections()
	resp, err := c.Get(strings.TrimSuffix(issuer, "/") + "/.well-known/openid-configuration")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("discovery answered %s", resp.Status)
	}
	var doc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc); err != nil {
		return fmt.Errorf("discovery document: %w", err)
	}
	if doc.Issuer != issuer {
		return kit.Errorf(ReasonInvalidOIDC, "the discovery document names issuer %q, not %q: they must be equal, as in the tokens' iss claim", doc.Issuer, issuer)
	}
	return nil
}
