// Package e2e tests the cluster-provider binary as users run it: built with `go build`, pointed at
// an envtest API server through a kubeconfig, driven only through its command line, HTTP probes,
// the API and signals. It must not import the operator's packages beyond the API types; what it
// checks is what a user would see.
//
// On the kind platform (make e2e-kind), a hosted test that touches nothing but its own Cluster
// (no operator flag, image or rollout, no node drained or cordoned) calls t.Parallel: go test runs
// the others one after the other first, then those together (-parallel in hack/e2e-kind.sh),
// since they mostly wait for pods, snapshots and timers. TestHostedHibernationOnKind runs alone
// too: its wake figures want a quiet platform.
package e2e
