// Package kit holds what every reconciler of this operator shares, written once: the operation
// annotation (controller-guidelines.md), the standard event filters, and the common status
// helpers (conditions, phase, observedGeneration). It holds no reconciler and must not import
// one.
package kit
