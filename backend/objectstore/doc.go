// Package objectstore keeps etcd snapshots in an S3-compatible object store, outside the failure
// domain of the clusters whose data they hold: a small client (Store: Put, Get, List, Delete,
// Stat over minio-go), encryption before anything leaves (Seal and Open: age, scrypt recipient,
// with the key of the credentials Secret), and the layout of the snapshots in the bucket
// (Catalog), whose LIST is the catalog of a Cluster's snapshots:
//
//	<prefix>/<namespace>/<cluster UID>/<name>.db.enc    the snapshot, encrypted
//	<prefix>/<namespace>/<cluster UID>/<name>.keys.enc  the keys its Secrets are encrypted with, encrypted (optional)
//	<prefix>/<namespace>/<cluster UID>/<name>.json      backend.Snapshot, plain, written last
//
// The namespace in the path is a tenant wall: a Cluster lists and fetches only under its own
// namespace, so a snapshot of another namespace's Cluster is never found. A record names the
// SHA-256 of the plaintext: what is fetched is decrypted and checked against it before it is
// used. Catalog.Sync is how both backends upload: after each snapshot, every snapshot kept beside
// the cluster (the local state folder, the hosted claim) that the store lacks, newest first, and
// then the store pruned with the retention. This package neither takes nor restores snapshots
// (backend/snapshots does) and reads no Kubernetes object: its caller passes the settings and the
// Secret's values.
package objectstore
