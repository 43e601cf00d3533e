// Package scheduler will hold the ClusterRequest scheduler, the second fixed sub-controller beside
// the AccessRequest labeller (issue 16): it answers ClusterRequests by choosing or creating
// Clusters, compatible with openMCP's scheduler so that a platform can switch between the two
// without its Clusters changing names or owners.
//
// What is here so far are its pure parts: the configuration (the `scheduler:` section of
// --config) with its validation, the selector that decides which Clusters a purpose may use, the
// choice among candidate Clusters (Choose: scope, selectors, purpose, tenancy count from the
// request finalizers, strategy, recovery of an earlier choice), and the Clusters it creates
// (NewCluster: name, namespace, metadata, spec and finalizer, never changing the configured
// template) with the request metadata an Exclusive Cluster receives (Propagate). No reconciler
// runs yet.
package scheduler
