// Package constants holds the names that every openMCP controller agrees on and that belong to no
// single API group: the operation annotation and its values.
package constants

const (
	// OperationAnnotation steers reconciliation of any resource by hand.
	OperationAnnotation = "openmcp.cloud/operation"
	// OperationAnnotationValueReconcile forces one reconciliation; the controller removes it.
	OperationAnnotationValueReconcile = "reconcile"
	// OperationAnnotationValueIgnore stops reconciliation while present.
	OperationAnnotationValueIgnore = "ignore"
)
