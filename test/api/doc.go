// Package api holds the admission tests of the CRDs in deploy/crds against a real API server:
// the specification's examples are accepted as written, every validation rule rejects what it
// must with its message, what openMCP's CRDs accept is accepted, and the status subresources work.
// It also checks the generated clusters.openmcp.cloud CRDs against openMCP's own (fields, required
// fields, rules, selectable fields, short names; openmcp_test.go). It has no non-test code.
package api
