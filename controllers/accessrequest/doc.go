// Package accessrequest is the per-profile AccessRequest reconciler: one instance runs for each
// ClusterProfile of this provider, started by the engine (manager/). It acts only on
// AccessRequests that the central labeller has prepared (both labels set, the provider label
// equal to this provider) for its profile, and it must never touch an AccessRequest of another
// provider or one that is not labelled yet.
//
// It grants spec.token requests in the cluster spec.clusterRef names, reached as the provider's
// administrator through the backend's AdminConfig: a ServiceAccount in the access namespace, a
// (Cluster)Role and binding per permission, a binding per roleRef, labelled with RequestID, a
// stable hash of the request; then a TokenRequest token, written with the cluster's endpoint and
// CA as a kubeconfig into a Secret owned by the request (SecretName). What a request asks for is a
// pure plan (token.go), rendered as one list of objects; target.go writes it with one applier
// (a forced server-side apply per object, namespaces only created when missing) and one prune
// over a table of kinds: objects with the request's label that the list does not hold are
// deleted, and revoking is pruning to an empty list. A restart in the middle of a grant repeats
// it without duplicates. The Secret is written before the status and records the generation it was granted
// for, so a reconcile that reads a stale request from the cache never grants twice.
//
// A granted request costs nothing until its token is due (80 % of its validity, a RequeueAfter),
// its Secret is deleted or edited (a checksum annotation tells), its spec changes, or it is
// deleted: then the finalizer revokes everything in the cluster, which invalidates the token. A
// Cluster that is not Ready keeps a new request Pending; the engine's Cluster watch brings it
// back. Errors the user must fix deny the request with a reason and a message; no token,
// kubeconfig or key is ever logged, put in an Event, a condition or the status.
//
// Grants follow today's requests (sweep.go, Sweeper: a second reconciler of the profile's
// Clusters): objects with the request labels whose AccessRequest is gone, or was made again
// under its name (another UID), are deleted from the cluster after a restore or a loss of data
// the Cluster reports (SweepMarker, remembered in AnnotationGrantsSwept, whose change brings the
// Cluster's requests back to be granted again at once), when the operator starts, when the
// Cluster becomes Ready and every GrantCheck. What goes is a pure judgement (judge); an object
// this provider cannot match to a request of its own is left alone.
//
// It grants spec.oidc requests by making the cluster trust the issuer: every OIDC request of a
// cluster that is not Denied or being deleted contributes to one set of jwt entries (trustFor:
// one per issuer, client IDs merged as audiences, oldest request first, conflicts, unallowed and
// unreachable issuers left out with their reason), which the backend's Authenticator writes into
// the cluster's structured authentication configuration. The request is Granted once the API
// server runs with it; its roles and bindings are applied as for tokens, with User and Group
// subjects prefixed as the cluster maps them, and its Secret holds a kubeconfig for kubelogin.
//
// An issuer is trusted only if it answers OpenID discovery (grant_oidc.go, discover), fetched
// from the operator's pod: so the fetch dials no loopback, link-local, private or shared address
// unless the ProviderConfig allows it (spec.oidc.allowPrivateIssuers), follows no redirect off
// the issuer's https host, ends with the reconcile's context, and is remembered in a bounded
// cache. What a failed fetch puts in the status is the provider's own sentence
// (discoveryError), never the issuer's answer or a Go error text.
package accessrequest
