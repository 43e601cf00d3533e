// Package cluster is the per-profile Cluster reconciler: one instance runs for each ClusterProfile
// of this provider, started by the engine (manager/). It acts only on Clusters whose profile
// belongs to this provider, owns their finalizer and status, and has the profile's backend
// (bound to the profile's ProviderConfig) create and delete the real clusters. It must never
// touch a Cluster of another provider.
//
// What the backend observes (backend.State) becomes status without knowing the backend: the API
// server is condition APIServerReady, each reported backend.Part the condition of its Type (the
// conditions of backend.PartTypes not reported are removed), each backend.Warning a Warning
// Event; condition changes worth telling become Events (events in reconciler.go).
package cluster
