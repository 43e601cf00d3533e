package backend

import (
	"fmt"
	"time"

	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// PartCertificates: the cluster's CA and certificates are valid, and where the CA's rotation is.
// Ready with reason CAValid, CARotating (the message says the phase and until when) or CARotated; not Ready with CARotationFailed (the message says why)
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

// The roles of the CAs in a trust bundle, as the CA expiry metric (RecordCAs) and
// CertificatesPart name them.
const (
	CACurrent  = "current"  // signs the leaves
	CANext     = "next"     // phase Trusting: trusted, signs from phase Signing on
	CAPrevious = "previous" // phase Signing: signed the leaves before, still trusted
)

// CertificatesPart says where a cluster's CA is: valid until when and rotated from when on, in
// which phase of a rotation and until when, or why its renewal failed. caNotAfter holds the ends
// of the CAs by role (CACurrent, CANext, CAPrevious).
func CertificatesPart(now time.Time, r certs.Rotation, caNotAfter map[string]time.Time, life certs.Lifetime, caErr string) Part {
	p := Part{Type: PartCertificates, Ready: true}
	cur := caNotAfter[CACurrent]
	switch {
	case !now.Before(cur):
		p.Ready, p.Reason = false, ReasonCAExpired
		p.Message = fmt.Sprintf("The cluster CA ended at %s: no certificate it signed verifies. Create a new Cluster and move the workloads.", rfc(cur))
	case caErr != "":
		p.Ready, p.Reason = false, ReasonCARotationFailed
		p.Message = fmt.Sprintf("Renewing the cluster's certificates or rotating its CA failed (tried again at every health check): %s. The signing CA ends at %s.", caErr, rfc(cur))
	case r.Phase == certs.PhaseTrusting:
		p.Reason = ReasonCARotating
		p.Message = fmt.Sprintf("CA rotation, phase 1 of 3 (Trusting) since %s: the trust bundle holds the old CA (ends %s) and a new one (ends %s); "+
			"the AccessRequests' kubeconfigs are issued anew with it. The new CA signs the API server's certificate from %s on: a kubeconfig copied before %s must be fetched again by then.",
			rfc(r.Since), rfc(cur), rfc(caNotAfter[CANext]), rfc(r.NextAt(cur, life)), rfc(r.Since))
	case r.Phase == certs.PhaseSigning:
		p.Reason = ReasonCARotating
		p.Message = fmt.Sprintf("CA rotation, phase 2 of 3 (Signing) since %s: the new CA (ends %s) signs every certificate of the control plane; "+
			"the old CA (ends %s) stays in the trust bundle until %s.", rfc(r.Since), rfc(cur), rfc(caNotAfter[CAPrevious]), rfc(r.NextAt(cur, life)))
	case r.Rotations > 0:
		p.Reason = ReasonCARotated
		p.Message = fmt.Sprintf("The cluster CA was rotated at %s (%d rotations): the new CA alone is trusted, valid until %s; its rotation starts at %s.",
			rfc(r.RotatedAt), r.Rotations, rfc(cur), rfc(r.NextAt(cur, life)))
	default:
		p.Reason = ReasonCAValid
		p.Message = fmt.Sprintf("The cluster CA is valid until %s; its rotation starts at %s.", rfc(cur), rfc(r.NextAt(cur, life)))
	}
	return p
}

// rfc formats t for a message.
func rfc(t time.Time) string { return t.UTC().Format(time.RFC3339) }
