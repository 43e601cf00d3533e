package certs

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestCARotationAdvance: the phases of a CA rotation, each moved on when its time has come and
// one at a time; each phase lasts a step (a quarter of CARenewBefore) from when it began, even
// after an operator that was down for longer.
func TestCARotationAdvance(t *testing.T) {
	life := Lifetime{CAValidity: 4 * time.Hour, CARenewBefore: 2 * time.Hour} // step 30m
	caEnd := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	start := caEnd.Add(-2 * time.Hour)
	rotated := caEnd.Add(-48 * time.Hour)
	for _, tc := range []struct {
		name string
		r    Rotation
		now  time.Time
		want Rotation
	}{
		{"none, before the CA's renewal time", Rotation{}, start.Add(-time.Second), Rotation{}},
		{"none, at the CA's renewal time: Trusting", Rotation{}, start, Rotation{Phase: PhaseTrusting, Since: start}},
		{"none, long after it: Trusting from now", Rotation{}, caEnd, Rotation{Phase: PhaseTrusting, Since: caEnd}},
		{"none after a rotation keeps the count", Rotation{RotatedAt: rotated, Rotations: 2}, start,
			Rotation{Phase: PhaseTrusting, Since: start, RotatedAt: rotated, Rotations: 2}},
		{"Trusting, within its step", Rotation{Phase: PhaseTrusting, Since: start}, start.Add(29 * time.Minute),
			Rotation{Phase: PhaseTrusting, Since: start}},
		{"Trusting, after its step: Signing", Rotation{Phase: PhaseTrusting, Since: start}, start.Add(30 * time.Minute),
			Rotation{Phase: PhaseSigning, Since: start.Add(30 * time.Minute)}},
		{"Trusting, an operator down for hours: Signing from now, for a whole step", Rotation{Phase: PhaseTrusting, Since: start}, start.Add(5 * time.Hour),
			Rotation{Phase: PhaseSigning, Since: start.Add(5 * time.Hour)}},
		{"Signing, within its step", Rotation{Phase: PhaseSigning, Since: start}, start.Add(29 * time.Minute),
			Rotation{Phase: PhaseSigning, Since: start}},
		{"Signing, after its step: done", Rotation{Phase: PhaseSigning, Since: start, Rotations: 2}, start.Add(31 * time.Minute),
			Rotation{RotatedAt: start.Add(31 * time.Minute), Rotations: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.r.Advance(tc.now, caEnd, life))
		})
	}
}

// TestCARotationTimes: when a rotation moves on next and when the signing CA is replaced.
func TestCARotationTimes(t *testing.T) {
	life := Lifetime{CAValidity: 4 * time.Hour, CARenewBefore: 2 * time.Hour} // step 30m
	caEnd := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	since := caEnd.Add(-90 * time.Minute)
	for _, tc := range []struct {
		name               string
		r                  Rotation
		next, replacedWhen time.Time
	}{
		{"none", Rotation{}, caEnd.Add(-2 * time.Hour), caEnd.Add(-90 * time.Minute)},
		{"Trusting", Rotation{Phase: PhaseTrusting, Since: since}, since.Add(30 * time.Minute), since.Add(30 * time.Minute)},
		// In phase Signing the signing CA is the new one: replaced at its own rotation.
		{"Signing", Rotation{Phase: PhaseSigning, Since: since}, since.Add(30 * time.Minute), caEnd.Add(-90 * time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.next, tc.r.NextAt(caEnd, life))
			assert.Equal(t, tc.replacedWhen, tc.r.ReplacedAt(caEnd, life))
		})
	}
}
