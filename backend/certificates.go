package backend

// PartCertificates: the cluster's CA and certificates are valid, and where the CA's rotation is
// (for a Backend that rotates it: local). Ready with reason CAValid, CARotating (the message says
// the phase and until when) or CARotated; not Ready with CARotationFailed (the message says why)
// or CAExpired. Informational: it does not make the Cluster not Ready.
const PartCertificates = "CertificatesValid"

// Reasons of PartCertificates.
const (
	ReasonCAValid          = "CAValid"
	ReasonCARotating       = "CARotating"
	ReasonCARotated        = "CARotated"
	ReasonCARotationFailed = "CARotationFailed"
	ReasonCAExpired        = "CAExpired"
)
