// Package hosted is the hosted backend: each Cluster's control plane runs as ordinary workloads of
// a host cluster (the platform, or a ProviderConfig's seed), which schedules, restarts and spreads
// them; the operator only writes objects and watches them, so it keeps no state of its own and its
// pods can come and go without any control plane noticing.
//
// Per Cluster, in namespace hcp-<the UID's first 20 hex digits> (labelled with the Cluster's uid,
// namespace and name; restricted Pod Security):
//   - Secrets with the cluster's CA and etcd's CA (made once, never replaced: a damaged one stops
//     the backend with StateDamaged), the service-account key, and leaf certificates (the API
//     server's serving certificate, etcd's, the API server's etcd client, the operator's admin, the
//     controller manager's kubeconfig), each issued anew only when it is missing, does not verify,
//     nears its end (checked at every reconcile; the reconcile comes back when the first is due),
//     or (serving) lacks a host;
//   - etcd: a 1-replica StatefulSet, TLS with client certificates of its own CA, data on a claim
//     of spec.hosted.storageClassName (an emptyDir without one: lost with the pod); highly
//     available (spec.hosted.highAvailability, recorded): three members, TLS between them on the
//     headless Service etcd-peer, one per node, a PodDisruptionBudget, PriorityClass
//     cluster-provider-control-plane (one per host, preemptionPolicy Never: a control plane waits
//     for room rather than evict another tenant's pods; an earlier version's class, which
//     preempted, is replaced once, and one the backend did not make is never touched: a highly
//     available control plane is refused while it preempts);
//   - kube-apiserver (a sidecar, so that it starts first) and kube-controller-manager (leader
//     elected) in a Deployment rolled out blue/green (maxSurge 100 %, maxUnavailable 0); two of
//     them, one per node, when highly available;
//   - Services apiserver (ClusterIP: apiserver-internal, what the operator uses in the host) and
//     apiserver-external (NodePort on spec.hosted.externalHost or the first node's address, or
//     LoadBalancer), and etcd;
//   - NetworkPolicies: etcd takes only its API server; the API server takes clients on 6443 and
//     reaches only its etcd, DNS and the OIDC issuers' ports (public addresses unless the
//     ProviderConfig allows private issuers, and never link-local addresses nor the host's own
//     API server: the ClusterIP of Service default/kubernetes and its EndpointSlices' addresses,
//     read at every reconcile); with spec.hosted.allowedSourceRanges it takes clients from those
//     ranges and the operator's own pods only (its namespace and its pod's labels, when it runs
//     in the host: Options.OperatorPod); default-deny for everything else;
//   - the ConfigMap with the structured authentication configuration, which the API server reloads;
//     SetJWTAuthenticators annotates the API server's pods so that the kubelet refreshes it at once;
//   - the ConfigMap control-plane-record (NameRecord): what the control plane was made with, and
//     a restore under way;
//   - Secret encryption (encryption.go): the keys the API servers encrypt Secrets with at rest,
//     staged before they write; those the snapshots need are kept beside them, wrapped;
//   - with spec.hibernation on the ProviderConfig, the front door (component_frontdoor.go): a
//     Deployment of cmd/front-door that Service apiserver-external selects, its ServiceAccount
//     bound to ClusterRole cluster-provider-front-door (patch Lease front-door, list the
//     EndpointSlices that find a waking API server's pod, nothing else) and that Lease, in which
//     it reports its use; a hibernated control plane
//     (component_hibernation.go) has etcd and the API servers at zero replicas behind it;
//   - unless the ProviderConfig turns audit logs off, the ConfigMap audit-policy, the API server's
//     audit log on a capped volume and the sidecar that streams it (cmd/audit-log).
//
// Fair shares (quota.go): with spec.hosted.maxClusters, a namespace has control planes for at most
// that many Clusters of the profile. A Cluster without a control plane is admitted only while the
// Clusters of its namespace and profile that have one, or are older and wait for one, are fewer;
// so the places go to the oldest Clusters (creationTimestamp, then name) whatever the order of the
// reconciles, and the decision and the making of the namespace are serialized per namespace and
// profile. What is counted is read from the API servers (the Clusters, the hcp-* namespaces), the
// same after a restart of the operator. A refused Cluster gets the error QuotaExceeded, nothing is
// made, and it is looked at again when a control plane of its namespace and profile is gone (freed
// notifies it) and every 30 s. A control plane that exists is never refused nor stopped: a lowered
// cap applies to new Clusters.
//
// Snapshots (backup.go) are Jobs of the control plane's own image (cmd/etcd-snapshot) in the host's
// namespace cluster-provider-backups, onto a claim per Cluster that outlives it; restores
// (restore.go) serve a snapshot from there to an init container of etcd's pods. The snapshot,
// maintenance (maintain.go) and serve Jobs run on one task runner (task.go: start, deadline,
// result, backoff, cleanup); the host's cache watches them, so a Job's end notifies its Cluster.
// Each gets a certificate of the control plane's etcd CA
// made for that Job when it starts (jobcert.go): valid for the Job's deadline and 15 minutes,
// never reused for another Job, in a Secret named after the Job, which the Job owns (the garbage
// collector deletes it with the Job) and which the backend deletes once it read the Job's result.
// etcd has no RBAC, so its client certificate is full access to that etcd: none stays in the
// shared namespace beyond its Job. The year-long client certificate earlier versions kept there
// for all of a Cluster's Jobs (etcd-client-hcp-…) is deleted when the first Job starts, and with
// the Cluster.
// The encryption keys a Cluster's snapshots need are kept there too (Secret keys-hcp-…), stored only
// wrapped with the key in Secret cluster-provider-key-wrapping of the operator's own namespace in
// the platform (Options.Namespace; made once, never replaced, never beside the snapshots nor on a
// seed), and pruned to what the listed snapshots need and the control plane uses (encryption.go).
//
// # The pipeline
//
// An Ensure fills a scope once (scope.go): it locates the control plane and reads its record once,
// admits a new one (quota), resolves the version and makes the Spec. It then runs the components
// of pipeline.go in order, each in its own file (component_<name>.go) with its objects, its step
// and its readiness: namespace (and its Services, NetworkPolicies, PodDisruptionBudgets, audit
// policy), exposure (the external host, which the serving certificate names), pki, encryption,
// restore, record, front-door, hibernation, etcd, apiserver, serving, controller-manager,
// maintenance, rewrite, upgrade.
// Dependencies are explicit: the API server's Deployment is made once etcd serves, and an upgrade
// (or an image refresh) rolls it only once every etcd member runs the new image, ready — etcd
// first. A new component is one file and one line in the list. Each step is timed
// (cluster_provider_hosted_component_seconds{component}; a step over a second is logged at V(1)).
// The State is made once at the end (scope.state) and the record saved once (scope.save), and
// before the workloads by the record component: what they are made of is recorded first.
//
// Every object goes through one applier (apply.go): server-side apply as FieldOwner, skipped when
// the object in the host's cache carries the hash of the rendered object (AnnotationInputs,
// Rendered) and nobody changed it since the backend's last apply (the generation, or
// resourceVersion, that apply returned); a change by someone else is drift, put back. A change
// of a workload that rolls pods waits for its turn (Options.MaxRolling). So a new operator version
// whose plan renders the same never rolls a running control plane, and an Ensure of an unchanged
// control plane writes nothing. It reads nothing from the API server either but the control
// plane's Secrets (the operator may not list or watch Secrets): the workloads, Services, pods,
// namespaces, NetworkPolicies, PodDisruptionBudgets, the PriorityClass and the host API server's
// EndpointSlices come from the host's cache, and the record and configuration ConfigMaps from
// memory while the cache of their metadata shows them unchanged (reads.go).
//
// The objects are pure functions of a Spec, table-tested. The version, image, service range,
// exposure, external host, seed and etcd storage a Cluster was created with are kept in its
// record for its life (the Cluster's status.providerStatus shows them; locate finds a control
// plane without it). The version moves only as backend.Resolve allows and only with etcd on a
// claim; a patched image of the same version only when the Cluster asks (AnnotationImageRefresh).
// Ready needs etcd ready, the Deployment rolled out and the API server's /readyz answering the
// operator. AdminConfig makes the operator's config from the record and the admin certificate's
// Secret, without provisioning anything. Deletion deletes the namespace (and with it the claims);
// the Cluster is gone when the namespace is. A namespace of that name that is not the Cluster's is
// never touched.
package hosted
