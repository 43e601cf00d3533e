package backend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// TestCertificatesPart: the CertificatesValid condition in each state of the CA.
func TestCertificatesPart(t *testing.T) {
	life := certs.Lifetime{CAValidity: 4 * time.Hour, CARenewBefore: 2 * time.Hour}
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	end := now.Add(3 * time.Hour)
	ends := map[string]time.Time{CACurrent: end, CANext: end.Add(4 * time.Hour), CAPrevious: end.Add(-time.Hour)}
	for _, tc := range []struct {
		name   string
		r      certs.Rotation
		ends   map[string]time.Time
		err    string
		ready  bool
		reason string
		says   []string
	}{
		{"valid", certs.Rotation{}, ends, "", true, ReasonCAValid, []string{"valid until 2030-01-01T15:00:00Z", "rotation starts at 2030-01-01T13:00:00Z"}},
		{"Trusting", certs.Rotation{Phase: certs.PhaseTrusting, Since: now}, ends, "", true, ReasonCARotating,
			[]string{"phase 1 of 3 (Trusting)", "from 2030-01-01T12:30:00Z on", "fetched again"}},
		{"Signing", certs.Rotation{Phase: certs.PhaseSigning, Since: now}, ends, "", true, ReasonCARotating,
			[]string{"phase 2 of 3 (Signing)", "old CA (ends 2030-01-01T14:00:00Z) stays in the trust bundle until 2030-01-01T12:30:00Z"}},
		{"rotated", certs.Rotation{RotatedAt: now, Rotations: 1}, ends, "", true, ReasonCARotated, []string{"rotated at 2030-01-01T12:00:00Z"}},
		{"failed", certs.Rotation{Phase: certs.PhaseTrusting, Since: now}, ends, "disk full", false, ReasonCARotationFailed, []string{"disk full"}},
		{"expired", certs.Rotation{}, map[string]time.Time{CACurrent: now.Add(-time.Second)}, "", false, ReasonCAExpired, []string{"Create a new Cluster"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := CertificatesPart(now, tc.r, tc.ends, life, tc.err)
			assert.Equal(t, PartCertificates, p.Type)
			assert.Equal(t, tc.ready, p.Ready)
			assert.Equal(t, tc.reason, p.Reason)
			for _, s := range tc.says {
				assert.Contains(t, p.Message, s)
			}
		})
	}
}
