// Package labeller is the central AccessRequest labeller: the one fixed sub-controller that runs
// beside the engine (manager/) and prepares AccessRequests for the ClusterProviders (see "The
// Preparation of AccessRequests" in cluster-providers.md).
//
// For every AccessRequest that lacks the clusters.openmcp.cloud/provider or the
// clusters.openmcp.cloud/profile label and matches the configured selector, it resolves the
// responsible ClusterProvider (spec.clusterRef, or else spec.requestRef → the granted
// ClusterRequest's status.cluster, then the Cluster's spec.profile → the ClusterProfile's
// spec.providerRef.name) and writes both labels, plus spec.clusterRef when that is empty, in one
// optimistically locked PATCH. When it cannot label, it says why in the AccessRequest's status
// (the ProviderResolved condition, observedGeneration, phase Pending; status.go). A first-pass
// success writes no status: the labelled AccessRequest is the provider's, whose reconciler writes
// the status; an earlier condition of the labeller's is turned True.
//
// An AccessRequest that waits for something (a ClusterRequest to be granted, a missing
// ClusterRequest, Cluster or ClusterProfile) is not retried on a timer: watches on those kinds map
// back to it through cache indexes (watches.go) that hold only AccessRequests still lacking a
// label. Every read comes from the manager's shared cache.
//
// It owns only those labels, spec.clusterRef while it is empty, and its own condition. It must
// not touch an AccessRequest that already carries both labels (the provider's reconciler owns it
// from then on, including its reconcile annotation), must never change a label that is already
// set (a conflicting value is reported with an error log, a Warning Event and the LabelConflict
// condition, and the object is left as it is), and must not grant or deny access. The CLI wiring
// (--controllers accessrequest, the accessRequest config section) lives elsewhere; Config is what
// it hands in.
package labeller
