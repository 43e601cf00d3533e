package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// Files of a CA rotation in a cluster's pki folder. ca.crt and ca.key are always the CA that signs
// the leaves; the trust bundle (ca-bundle.crt: the API server's client CAs, the controller
// manager's root CA, every kubeconfig's CA) holds it and, during a rotation, the other CA.
const (
	caBundleFile   = "ca-bundle.crt"
	caNextCertFile = "ca-next.crt" // phase Trusting: the new CA, trusted, not signing yet
	caNextKeyFile  = "ca-next.key"
	caOldCertFile  = "ca-old.crt"       // phase Signing: the old CA, still trusted
	caRotationFile = "ca-rotation.json" // the rotation's record (certs.Rotation)
)

// readRotation reads the rotation record; none is phase none.
func (p *pki) readRotation() (certs.Rotation, error) {
	var r certs.Rotation
	data, err := os.ReadFile(p.path(caRotationFile))
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("%s does not read: %w", caRotationFile, err)
	}
	if r.Known() {
		return r, nil
	}
	return r, fmt.Errorf("%s names an unknown phase %q", caRotationFile, r.Phase)
}

func (p *pki) writeRotation(r certs.Rotation) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeFileAtomic(p.path(caRotationFile), data, 0o600)
}

// finishSwap completes a move to phase Signing that an operator stopped half-way: while the
// next CA's files are there, they are copied over the signing CA's (key first) and then removed.
// It is idempotent: ca-old.crt was written before the record said Signing.
func (p *pki) finishSwap() error {
	certPEM, certErr := os.ReadFile(p.path(caNextCertFile))
	keyPEM, keyErr := os.ReadFile(p.path(caNextKeyFile))
	if errors.Is(certErr, os.ErrNotExist) && errors.Is(keyErr, os.ErrNotExist) {
		return nil
	}
	if _, err := loadCA(certPEM, certErr, keyPEM, keyErr); err != nil {
		return fmt.Errorf("the next CA (%s, %s): %w", caNextCertFile, caNextKeyFile, err)
	}
	if err := p.write(caCertFile, caKeyFile, certPEM, keyPEM); err != nil {
		return err
	}
	return removeFiles(p.path(caNextCertFile), p.path(caNextKeyFile))
}

// step makes the files follow the record moving from phase `from` to r: a new CA to trust
// (Trusting), the new CA signing and the old one kept as ca-old.crt (Signing), or the old one
// dropped (none). The record is written at the point from which the move can only go forward.
func (p *pki) step(from certs.RotationPhase, r certs.Rotation, life certs.Lifetime) error {
	switch r.Phase {
	case certs.PhaseTrusting:
		next, err := certs.NewCAValid(caCommonName, life.Or().CAValidity)
		if err != nil {
			return err
		}
		if err := p.write(caNextCertFile, caNextKeyFile, next.CertPEM, next.KeyPEM); err != nil {
			return err
		}
		return p.writeRotation(r)
	case certs.PhaseSigning:
		if err := writeFileAtomic(p.path(caOldCertFile), p.ca.CertPEM, 0o644); err != nil {
			return err
		}
		if err := p.writeRotation(r); err != nil {
			return err
		}
		return p.finishSwap()
	}
	if from == certs.PhaseNone {
		return nil
	}
	if err := p.writeRotation(r); err != nil {
		return err
	}
	return removeFiles(p.path(caOldCertFile))
}

// removeFiles removes paths; one that is gone already is no error.
func removeFiles(paths ...string) error {
	for _, path := range paths {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// writeBundle sets p.CAPEM to the trust bundle of the rotation's phase and writes it to
// caBundleFile when it differs: the signing CA alone, or with the CA of the other side of the
// rotation, the old one first in both phases (the bundle stays the same bytes from Trusting to
// Signing, so a kubeconfig that has it is not issued anew in between). A next CA gone missing in
// phase Trusting is made anew, and the phase starts again.
func (p *pki) writeBundle(life certs.Lifetime) error {
	p.CANotAfter[backend.CACurrent] = p.ca.Cert.NotAfter
	bundle := p.ca.CertPEM
	switch p.rotation.Phase {
	case certs.PhaseTrusting:
		next, readErr := p.readCert(caNextCertFile)
		if readErr != nil {
			r := certs.Rotation{Phase: certs.PhaseTrusting, Since: time.Now(), RotatedAt: p.rotation.RotatedAt, Rotations: p.rotation.Rotations}
			if err := p.step(certs.PhaseNone, r, life); err != nil {
				return fmt.Errorf("making the next CA anew (%s did not read: %v): %w", caNextCertFile, readErr, err)
			}
			p.rotation = r
			p.ca.ReplacedAt = r.ReplacedAt(p.ca.Cert.NotAfter, life)
			return p.writeBundle(life)
		}
		p.CANotAfter[backend.CANext] = next.NotAfter
		bundle = append(append([]byte{}, p.ca.CertPEM...), next.Raw...)
	case certs.PhaseSigning:
		// A previous CA gone missing is only no longer trusted: what it signed was issued anew.
		if old, err := p.readCert(caOldCertFile); err == nil {
			p.CANotAfter[backend.CAPrevious] = old.NotAfter
			bundle = append(append([]byte{}, old.Raw...), p.ca.CertPEM...)
		}
	}
	p.CAPEM = bundle
	if cur, err := os.ReadFile(p.path(caBundleFile)); err == nil && bytes.Equal(cur, bundle) {
		return nil
	}
	return writeFileAtomic(p.path(caBundleFile), bundle, 0o644)
}

// pemCert is a CA certificate read from a file: its PEM (Raw) and its end.
type pemCert struct {
	Raw      []byte
	NotAfter time.Time
}

// readCert reads the CA certificate of file name.
func (p *pki) readCert(name string) (pemCert, error) {
	data, err := os.ReadFile(p.path(name))
	if err != nil {
		return pemCert{}, err
	}
	end, err := certs.NotAfter(data)
	if err != nil {
		return pemCert{}, fmt.Errorf("%s: %w", name, err)
	}
	return pemCert{Raw: data, NotAfter: end}, nil
}
