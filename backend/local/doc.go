// Package local is the local backend: each Cluster is a complete, workerless Kubernetes control
// plane made of three child processes of the operator (etcd, kube-apiserver and
// kube-controller-manager of one --local-binaries folder), with its state in
// <state-dir>/<Cluster UID>/ (0700).
//
// # Processes
//
// etcd starts first; kube-apiserver once etcd answers; kube-controller-manager once the API server
// answers /healthz (it gives up after 10 s of an unanswered API server, so it is not started into
// that). Each is restarted with backoff when it exits and dies with the operator (Pdeathsig). A
// restarted operator adopts the folders of existing Clusters: same ports, same data. Readiness has
// two parts, reported apart (State.Ready and its part backend.PartControllerManager): the API
// server serves (etcd healthy, /readyz, /version), and the controller manager runs its
// controllers (its /healthz lists the clusterrole-aggregation controller's check, which it adds
// once it has built them, and the stock role view has its aggregated rules: the role users bind
// most works from the first moment). The Cluster reconciler turns them into the conditions
// APIServerReady and ControllerManagerReady; the Cluster is Ready only with both. Every Options.HealthInterval (10 s) a Ready controller manager
// is asked for its /healthz, a Ready API server for its /livez and its etcd for its health; a
// process that misses three (the controller manager) or six (the API server, etcd) checks in a
// row, hung but not exited, is stopped and started again, as a liveness probe would, and its
// condition says why.
//
// # Who reaches what
//
// etcd listens on two unix sockets in the cluster's folder (etcd.sock:0, etcd-peer.sock:0: the
// ":0" makes the URLs "host:port", which etcd 3.5 and 3.6 require), named relative to it (every
// process runs with the folder as its working directory), and on no TCP port: only the operator's
// user, and so the cluster's own API server, reaches its data. The flags work with the etcd of
// every line a served Kubernetes version requires (3.5, 3.6, 3.7; TestEtcdLines), and
// LoadBinaries starts each folder's etcd once with them, so a folder whose etcd cannot run a
// cluster is refused at start instead of offering a version whose clusters never start. The API
// server listens on the advertise host, on a port of its own behind the cluster's front door; the
// controller manager's health and metrics port is on the loopback. Each has its own credentials from the cluster's CA (pki.go): the operator is
// openmcp:cluster-provider in system:masters, the controller manager system:kube-controller-manager
// (bound by the API server's bootstrap RBAC policy), and it runs every controller with its own
// service-account credentials. It signs approved CertificateSigningRequests with the cluster CA.
//
// # Controllers
//
// A local cluster has no nodes, so it runs what a workerless Gardener shoot runs (openMCP's own
// clusters are Gardener shoots): every default controller of kube-controller-manager, plus the
// bootstrap-token signer and cleaner, without those that only serve nodes and the volumes on them:
//
//   - node-ipam, node-lifecycle, taint-eviction, device-taint-eviction, ttl: they manage Node
//     objects or evict Pods from nodes; there are none.
//   - persistentvolume-attach-detach, persistentvolume-binder, persistentvolume-expander: they
//     attach, provision and grow volumes for Pods on nodes.
//
// On are, among others: clusterrole-aggregation (the stock view, edit and admin roles), namespace
// (deletion finishes), garbage-collector, serviceaccount and serviceaccount-token,
// root-ca-certificate-publisher (kube-root-ca.crt in every namespace), resourcequota, the CSR
// signing, approving and cleaning controllers, ttl-after-finished, and the workload controllers.
// The workload controllers stay on as in a workerless shoot: a Deployment gets its ReplicaSet and
// its Pods, which stay Pending, as nothing schedules or runs them; Jobs, CronJobs, StatefulSets and
// DaemonSets behave the same way. Objects, their owners and their status are what users of such a
// cluster see, and what the upstream conformance suite checks (docs/conformance.md).
//
// # Front door and hibernation
//
// A cluster's endpoint is a front door the operator owns (frontdoor.go): it listens on the port
// of status.apiServer and passes every connection, TLS untouched, to the API server's own port
// (ports.Internal). It lives as long as the cluster runs here, so the endpoint never changes and
// a connection that comes while the API server restarts or is upgraded waits for it instead of
// being refused. It makes hibernation possible (hibernate.go, docs/hibernation.md): a cluster
// idle for its profile's spec.hibernation.idleAfter (no connection through the door), or
// annotated backend.AnnotationHibernate, has its processes stopped and its folder kept; the first
// connection wakes it (etcd, then the API server, from their data; due certificates issued
// first) and is passed on once the API server serves. A hibernated cluster holds no place of
// --local-max-clusters, and its record keeps it hibernated across a restart of the operator.
//
// # Data
//
// Nothing of a cluster's folder is ever removed while its Cluster exists. A Cluster whose folder
// is gone although it ran before (its status holds this backend's provider status) lost its data,
// most likely with the volume of --state-dir: it is created anew, EMPTY, on its old ports, and
// its State says so for the rest of its life with a part of type Provisioned, reason DataLost
// (the Cluster's Provisioned condition, and a Warning Event). Its AccessRequests are granted
// again: their kubeconfigs carry the new CA.
//
// A damaged folder (damage.go) loses nothing that could still be used. A CA or service-account
// key that exists but does not load is never replaced: the cluster stays stopped with reason
// StateDamaged, naming the file and what to do, and is tried again every Options.StateRetry. A
// garbled or missing record (cluster.json) of a cluster that ran is rebuilt from the Cluster's
// status (same ports and version) and the damaged file kept beside it (a State Warning of reason
// StateRepaired: a Warning Event). A missing etcd folder of a cluster that ran is DataLost, as a
// missing cluster folder is. A full --state-dir is reason StateDirFull, tried again every
// Options.StateRetry.
//
// # Backups
//
// Snapshots of a cluster's etcd (backup.go) are taken with the etcdctl of its binaries folder over
// the etcd socket, checked with etcdutl, and kept in <state-dir>/backups/<Cluster UID>/, outside
// the cluster's folder: they outlive their Cluster. A restore stops the cluster, restores the
// snapshot into a new data folder with etcdutl, moves the old one to backups/<UID>/replaced/ and
// starts the cluster again in its folder, on its ports, with its CA; the record's Restoring field
// lets a start after a crash finish or undo it. A Cluster annotated with
// backend.AnnotationRestoreFrom is made from another Cluster's snapshot. The encryption keys the
// snapshots need are kept beside them (backups/<UID>/keys/kept-keys.json), stored only wrapped
// with the key in <state-dir>/key-wrapping.key (0600, made once, never replaced; beside backups/,
// never in it: Start refuses a backups folder that holds it) and pruned to what the snapshots need
// and the running cluster uses; with the last snapshot of a deleted Cluster they go
// (encryption.go).
//
// # One process per folder
//
// Start takes an exclusive lock (flock) on <state-dir>/.lock before it adopts anything and holds
// it until every cluster has stopped: two processes (a new leader and an old one that does not
// know yet that it lost its lease) never run the same clusters. The one that waits says who holds
// the lock in its Clusters' BackendStarting message.
//
// # Capacity
//
// A place of --local-max-clusters is held by a cluster that runs and by one being made from a
// snapshot. A Cluster refused for capacity (CapacityExhausted) is remembered, and every place that
// frees (a cluster deleted, one that failed to start or to be made from a snapshot) notifies the
// waiting Clusters, the longest waiting first: the first whose reconcile comes starts, without
// anybody touching it; the others wait on. The refusal also asks for a reconcile after 30 s, so a
// notification lost while its profile restarts does not strand a Cluster (capacity.go).
//
// # Sharing one pod
//
// Every cluster's processes share the operator's pod: its CPU, memory and network. So each API
// server runs API Priority and Fairness with small in-flight limits (one user's load queues
// behind its own share), etcd has a 1 GiB quota, each process's log is capped (caplog.go), and a
// cluster's service range (meta.ServiceCIDR, --local-service-cidr) is one the platform does not
// use, because its API server calls webhooks and APIServices at their Services' addresses from
// the pod. BenchmarkNoisyNeighbour measures what one cluster's load does to another.
package local
