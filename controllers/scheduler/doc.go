// Package scheduler is the ClusterRequest scheduler, the second fixed sub-controller beside the
// AccessRequest labeller: it answers each ClusterRequest with a Cluster, chosen among the existing
// ones or created, compatible with openMCP's scheduler so that a platform can switch between the
// two without its Clusters changing names or owners.
//
// The pure parts: Config (the `scheduler:` section of --config) with its validation, the selector
// that decides which Clusters a purpose may use (CombinedSelector, Fits), the choice among
// candidates (Choose: scope, selectors, purpose, tenancy count from the request finalizers,
// strategy, recovery of an earlier choice), and the Clusters it creates (NewCluster, ClusterName:
// name, namespace, metadata, spec and finalizer, never changing the configured template) with the
// request metadata an Exclusive Cluster receives (Propagate).
//
// The Reconciler: a request gets the finalizer Finalizer; its Cluster carries RequestFinalizer of
// the request's UID. Decisions are taken one at a time under a lock, in memory, each on the shared
// cache overlaid with the scheduler's own decisions and writes the cache does not show yet (book),
// so a burst of requests spreads exactly as the strategy says and never past tenancyCount. The
// writes of a decision run outside the lock, one at a time per Cluster (carrying the finalizers
// decided for it meanwhile), every one optimistically locked. A request that waits (condition Scheduled False: NoPurposeMapping,
// ClusterConflict, WaitingForCluster, ClusterRejected) is brought back by a Cluster watch when a
// Cluster is freed, goes or changes its labels or purposes. A granted Cluster that is gone is
// created anew under the same name. Deleting a request releases its Cluster and deletes it if no
// request is left and it asks for that (AnnotationDeleteWithoutRequests); with
// spec.waitForClusterDeletion the request waits until it is gone.
//
// Better than openMCP's scheduler: the configured template is never changed while building a
// Cluster; nil label and annotation maps are handled; an existing Cluster's spec is never
// written; everything is read from the shared cache; the request's condition and Events say why
// it waits; later changes of propagated request metadata are watched.
package scheduler
