package certs

import "time"

// RotationPhase is the phase of a CA rotation.
type RotationPhase string

// The phases of a CA rotation: none (one CA, signing and trusted), Trusting (a new CA is trusted
// beside the old one, which still signs: clients get the bundle of both), Signing (the new CA
// signs every leaf, the old one is still trusted: clients that kept an old bundle keep
// verifying what the old CA signed... until it is dropped, back to none).
const (
	PhaseNone     RotationPhase = ""
	PhaseTrusting RotationPhase = "Trusting"
	PhaseSigning  RotationPhase = "Signing"
)

// Rotation is the record of a cluster's CA rotation: the phase it is in and since when, so that
// a restarted operator goes on where it was. Each backend keeps it beside its CA (local: a file
// of the pki folder; hosted: a key of the CA's Secret).
type Rotation struct {
	Phase RotationPhase `json:"phase,omitempty"`
	Since time.Time     `json:"since,omitzero"`
	// RotatedAt is when the last rotation ended (the old CA was dropped); Rotations counts them.
	RotatedAt time.Time `json:"rotatedAt,omitzero"`
	Rotations int       `json:"rotations,omitempty"`
}

// Known reports whether r's phase is one of the three.
func (r Rotation) Known() bool {
	switch r.Phase {
	case PhaseNone, PhaseTrusting, PhaseSigning:
		return true
	}
	return false
}

// Advance is r at now, for a signing CA that ends at caEnd: the next phase when the current one
// has lasted its step (Lifetime.CAStep), or when the CA reached its renewal time (CARenewAt);
// else r. It moves one phase at most: each phase lasts a step even after an operator that was
// down.
func (r Rotation) Advance(now, caEnd time.Time, life Lifetime) Rotation {
	if now.Before(r.NextAt(caEnd, life)) {
		return r
	}
	return r.Next(now)
}

// Next is r moved on to its next phase at now, whether or not its time has come (a backend that
// rotates two CAs together moves the one that is a moment from its time with the other).
func (r Rotation) Next(now time.Time) Rotation {
	switch r.Phase {
	case PhaseNone:
		r.Phase, r.Since = PhaseTrusting, now
	case PhaseTrusting:
		r.Phase, r.Since = PhaseSigning, now
	default:
		r = Rotation{RotatedAt: now, Rotations: r.Rotations + 1}
	}
	return r
}

// NextAt is when r moves to its next phase, for a signing CA that ends at caEnd.
func (r Rotation) NextAt(caEnd time.Time, life Lifetime) time.Time {
	if r.Phase == PhaseNone {
		return life.CARenewAt(caEnd)
	}
	return r.Since.Add(life.CAStep())
}

// ReplacedAt is when the signing CA, ending at caEnd, is replaced: the end of phase Trusting, or
// the earliest a rotation not started yet can get there.
func (r Rotation) ReplacedAt(caEnd time.Time, life Lifetime) time.Time {
	if r.Phase == PhaseTrusting {
		return r.Since.Add(life.CAStep())
	}
	return life.CARenewAt(caEnd).Add(life.CAStep())
}
