// Package cluster is the per-profile Cluster reconciler: one instance runs for each ClusterProfile
// of this provider, started by the engine (manager/). It acts only on Clusters whose profile
// belongs to this provider, owns their finalizer and status, and (once a backend is wired in)
// creates and deletes the real clusters. It must never touch a Cluster of another provider.
package cluster
