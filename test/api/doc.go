// Package api holds the admission tests of the CRDs in deploy/crds against a real API server:
// the specification's examples are accepted as written, every validation rule rejects what it
// must with its message, and the status subresources work. It has no non-test code.
package api
