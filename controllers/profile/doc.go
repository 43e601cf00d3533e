// Package profile defines what runs for one ClusterProfile of this provider: how the engine
// routes Clusters and AccessRequests to their profile (Kinds: Clusters twice, to their reconciler
// and to the sweep of their grants, accessrequest.Sweeper), how a profile is named after its
// ProviderConfig (Name, ConfigName), and which reconcilers a profile runs (Builder). It starts
// nothing itself; providerconfig/ asks the engine to.
package profile
