// Package backend is the interface between the per-profile Cluster and AccessRequest reconcilers
// and the machinery that runs real clusters. A Backend makes, observes and deletes the cluster
// behind a Cluster resource and hands the provider an administrator's rest.Config for it.
//
// It knows nothing about controllers: no client of the platform cluster, no status, no Events.
// A Backend reports what it observes (State) and, when that changes without being asked (a
// cluster became healthy, a process crashed), tells its Notify callback which Cluster to look at
// again; the reconcilers turn that into status. The reconcilers never know which Backend runs.
//
// Implementations: backend/local (a kube-apiserver and etcd per Cluster, processes of the
// operator) and backend/kind (a kind cluster per Cluster, with a Docker engine). Both implement
// Authenticator through backend/authconfig, so OIDC access works on either. The profile builder
// picks one by the ProviderConfig's spec.backend through Registry.
package backend
