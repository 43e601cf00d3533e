// Package accessrequest is the per-profile AccessRequest reconciler: one instance runs for each
// ClusterProfile of this provider, started by the engine (manager/). It acts only on
// AccessRequests that the central labeller has prepared (both labels set, the provider label
// equal to this provider) for its profile, and answers them. It must never touch an
// AccessRequest of another provider or one that is not labelled yet.
package accessrequest
