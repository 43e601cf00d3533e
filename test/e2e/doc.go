// Package e2e tests the cluster-provider binary as users run it: built with `go build`, pointed at
// an envtest API server through a kubeconfig, driven only through its command line, HTTP probes,
// the API and signals. It must not import the operator's packages beyond the API types; what it
// checks is what a user would see.
package e2e
