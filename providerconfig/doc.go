// Package providerconfig is the ProviderConfig controller. For each ProviderConfig it validates
// the spec, publishes the ClusterProfile <environment>.<provider-name>.<providerconfig-name>, and
// asks the engine (manager/) to run that profile's reconcilers, restarting them when the spec
// changes. On deletion it keeps them running until no Cluster uses the profile any more, then
// stops them, deletes the profile and releases the ProviderConfig.
//
// It never overwrites a ClusterProfile that belongs to another provider or ProviderConfig, and it
// never reconciles Clusters or AccessRequests itself.
package providerconfig
