// Package backend is the interface between the per-profile Cluster and AccessRequest reconcilers
// and the machinery that runs real clusters. A Backend makes, observes and deletes the cluster
// behind a Cluster resource and hands the provider an administrator's rest.Config for it.
//
// It knows nothing about controllers: no client of the platform cluster, no status, no Events.
// A Backend reports what it observes (State) and, when that changes without being asked (a
// cluster became healthy, a process crashed), tells its Notify callback which Cluster to look at
// again; the reconcilers turn that into status. The reconcilers never know which Backend runs.
//
// # The contract
//
//   - Bound at profile build: the profile builder picks a Backend by the ProviderConfig's
//     spec.backend through Registry and binds it to that ProviderConfig once per spec
//     (Backend.ForProfile). Every Backend is bound, whether it reads much of the spec (kind: node
//     images; hosted: images, seed, storage, exposure) or little (local: spec.audit); what a
//     Backend reads of the ProviderConfig reaches it by no other road. A spec change builds the
//     profile, and so the binding, anew.
//   - Asked for a version only: Want carries what the Cluster asks for (Resolve and the version
//     contract of Backend), nothing of the ProviderConfig.
//   - Observed as a State without backend-specific fields: the API server (Ready, Reason,
//     Message), where it serves, the version it runs, and a list of Parts, each the Cluster
//     condition of its Type (PartControllerManager, PartEtcd, PartEndpoint, PartProvisioned).
//     The Cluster reconciler sets one condition per reported part and removes those of the
//     PartTypes not reported; a Backend adds a kind of part with one constant here and one entry
//     in PartTypes, and no reconciler changes. One-shot observations are Warnings, each a
//     Warning Event. Backend-specific detail goes to ProviderStatus only.
//   - Optional capabilities are interfaces a Backend may implement: Authenticator (OIDC issuers)
//     and Backups (snapshots and restores). A bound Backend implements the same ones as its
//     unbound one.
//
// Implementations: backend/local (a kube-apiserver, etcd and kube-controller-manager per Cluster,
// processes of the operator), backend/kind (a kind cluster per Cluster, with a Docker engine) and
// backend/hosted (a control plane of Deployments and a StatefulSet per Cluster in a host
// cluster). Each implements Authenticator through backend/authconfig, so OIDC access works on
// every one.
package backend
