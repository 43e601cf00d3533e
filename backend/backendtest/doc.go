// Package backendtest is a fake backend for the controllers' tests: an in-memory
// backend.Backend, backend.Authenticator and backend.Backups whose clusters a test scripts (Ready
// or not, a reason, a version, a failing Ensure, the parts of a control plane, a refused version
// change) and whose calls it records, so that the Cluster and AccessRequest reconcilers are tested
// without starting etcd and a kube-apiserver per Cluster.
//
// Versions follow the real contract: a new cluster runs what backend.Resolve chooses, an existing
// one keeps its recorded version, and a change is made or refused as backend.Resolve says (plus
// the refusal a test scripts, as kind or hosted add their own).
//
// Every fake cluster's AdminConfig is a copy of ONE real API server's configuration (Options.
// Server, envtest's), so the AccessRequest reconciler grants real tokens and RBAC objects there.
// The fake clusters share that API server: tests keep apart by the names they use.
//
// It must stay a test double: no process, no file, nothing of a real backend's behaviour beyond
// the contract of package backend. What only a real backend shows (processes, data on disk,
// OIDC trust of a real API server) is tested with that backend.
package backendtest
