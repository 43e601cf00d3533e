// Package labeller is the central AccessRequest labeller: the one fixed sub-controller that runs
// beside the engine (manager/) and prepares AccessRequests for the ClusterProviders (see "The
// Preparation of AccessRequests" in cluster-providers.md).
//
// For every AccessRequest that lacks the clusters.openmcp.cloud/provider or the
// clusters.openmcp.cloud/profile label and matches the configured selector, it resolves the
// responsible ClusterProvider (spec.clusterRef, or else spec.requestRef → the granted
// ClusterRequest's status.cluster, then the Cluster's spec.profile → the ClusterProfile's
// spec.providerRef.name) and writes both labels, plus spec.clusterRef when that is empty, in one
// optimistically locked PATCH, then hands it to the provider with a status PATCH: phase Pending
// for its generation and the ProviderResolved condition True. That is openMCP's handshake
// (kit.ProviderResponsible): a provider acts on a Pending request, and on a Granted one only while
// its observedGeneration matches. When the spec of a labelled Granted or Denied request changes
// (its deletion bumps the generation too), the labeller sets it Pending again, and only that:
// labels, annotations and the provider's conditions are the provider's. When it cannot label, it
// says why in the AccessRequest's status (the ProviderResolved condition, observedGeneration,
// phase Pending; status.go).
//
// An AccessRequest that waits for something (a ClusterRequest to be granted, a missing
// ClusterRequest, Cluster or ClusterProfile) is not retried on a timer: watches on those kinds map
// back to it through cache indexes (watches.go) that hold only AccessRequests still lacking a
// label. Every read comes from the manager's shared cache.
//
// It owns only those labels, spec.clusterRef while it is empty, its own condition and the Pending
// handover. Of an AccessRequest that already carries both labels it writes nothing but that
// handover (the provider's reconciler owns it, including its reconcile annotation), it must never
// change a label that is already
// set (a conflicting value is reported with an error log, a Warning Event and the LabelConflict
// condition, and the object is left as it is), and must not grant or deny access. The CLI wiring
// (--controllers accessrequest, the accessRequest config section) lives elsewhere; Config is what
// it hands in.
package labeller
