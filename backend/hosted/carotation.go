package hosted

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// The rotation of a hosted control plane's CAs (the cluster CA and etcd's), with an overlapping
// trust bundle, in the phases of certs.Rotation:
//
//   - Trusting: a new CA is made and trusted beside the old one, which still signs. The bundle
//     (old, new) goes to everything that verifies: the API servers' client CAs, etcd's trusted
//     CAs (both roll: AnnotationTrust), the controller manager's root CA, the kubeconfigs of the
//     operator, of the controller manager and of every AccessRequest (issued anew with it).
//   - Signing, once every API server and etcd member runs with the bundle: the new CA signs; every
//     leaf is issued anew by it (the API servers roll, etcd reads its certificates at each
//     handshake); the old CA is still trusted, so a client that kept the bundle goes on.
//   - none, once they all run the new leaves: the old CA is dropped from the bundle.
//
// Each phase lasts a step (certs.Lifetime.CAStep) at least, and moves on only when the control
// plane's workloads have rolled to the current bundle (trustSettled): an operator that was down,
// or a pod that cannot start, holds the rotation where it is, never ahead of what runs. Every
// move is one update of the CA's Secret, so none is ever half made.

// Keys of a hosted CA's Secret (SecretCA, SecretEtcdCA).
const (
	// caKeyBundle is the trust bundle, which every verifier mounts: the signing CA and, during a
	// rotation, the other one, the old CA first in both phases (the bundle keeps the same bytes
	// from Trusting to Signing, so a kubeconfig that has it is not issued anew in between).
	caKeyBundle = "ca.crt"
	// caKeySigning is the certificate of the CA that signs, alone (the controller manager's
	// signing certificate); a Secret made before rotations has only ca.crt, which is it.
	caKeySigning  = "signing.crt"
	caKeyKey      = "ca.key"        // the signing CA's key
	caKeyNextCert = "next.crt"      // phase Trusting: the new CA, trusted, not signing yet
	caKeyNextKey  = "next.key"      // its key
	caKeyOldCert  = "old.crt"       // phase Signing: the old CA, still trusted
	caKeyRotation = "rotation.json" // the rotation's record (certs.Rotation)
)

// rotatingCA is a hosted CA as its Secret holds it: the CA that signs, the other one of a
// rotation (next in phase Trusting, old in phase Signing) and where the rotation is.
type rotatingCA struct {
	ca       *certs.CA
	next     *certs.CA // phase Trusting
	old      []byte    // phase Signing: the old CA's certificate (PEM), nil once lost
	rotation certs.Rotation
}

// bundle is the trust bundle of the rotation's phase (caKeyBundle).
func (r *rotatingCA) bundle() []byte {
	switch {
	case r.rotation.Phase == certs.PhaseTrusting && r.next != nil:
		return append(append([]byte{}, r.ca.CertPEM...), r.next.CertPEM...)
	case r.rotation.Phase == certs.PhaseSigning && r.old != nil:
		return append(append([]byte{}, r.old...), r.ca.CertPEM...)
	}
	return r.ca.CertPEM
}

// notAfter are the ends of the CAs of the bundle by role (backend.CACurrent, CANext, CAPrevious).
func (r *rotatingCA) notAfter() map[string]time.Time {
	ends := map[string]time.Time{backend.CACurrent: r.ca.Cert.NotAfter}
	if r.next != nil {
		ends[backend.CANext] = r.next.Cert.NotAfter
	}
	if end, err := certs.NotAfter(r.old); r.old != nil && err == nil {
		ends[backend.CAPrevious] = end
	}
	return ends
}

// data is the Secret's data for r.
func (r *rotatingCA) data() (map[string][]byte, error) {
	rec, err := json.Marshal(r.rotation)
	if err != nil {
		return nil, err
	}
	d := map[string][]byte{caKeyBundle: r.bundle(), caKeySigning: r.ca.CertPEM, caKeyKey: r.ca.KeyPEM, caKeyRotation: rec}
	if r.next != nil {
		d[caKeyNextCert], d[caKeyNextKey] = r.next.CertPEM, r.next.KeyPEM
	}
	if r.old != nil {
		d[caKeyOldCert] = r.old
	}
	return d, nil
}

// readCA reads the CA of a Secret's data. Only the signing CA must read: a next CA that does not
// (phase Trusting) starts the rotation again, an old one that does not (phase Signing) is no
// longer trusted (what it signed was issued anew already).
func readCA(cur map[string][]byte) (*rotatingCA, error) {
	signing := cur[caKeySigning]
	if len(signing) == 0 {
		signing = cur[caKeyBundle]
	}
	ca, err := certs.ParseCA(signing, cur[caKeyKey])
	if err != nil {
		return nil, err
	}
	r := &rotatingCA{ca: ca}
	if rec := cur[caKeyRotation]; len(rec) > 0 {
		if err := json.Unmarshal(rec, &r.rotation); err != nil {
			return nil, fmt.Errorf("%s does not read: %w", caKeyRotation, err)
		}
		if !r.rotation.Known() {
			return nil, fmt.Errorf("%s names an unknown phase %q", caKeyRotation, r.rotation.Phase)
		}
	}
	switch r.rotation.Phase {
	case certs.PhaseTrusting:
		if r.next, err = certs.ParseCA(cur[caKeyNextCert], cur[caKeyNextKey]); err != nil {
			r.next = nil
			r.rotation = certs.Rotation{RotatedAt: r.rotation.RotatedAt, Rotations: r.rotation.Rotations}
		}
	case certs.PhaseSigning:
		if _, err := certs.NotAfter(cur[caKeyOldCert]); err == nil {
			r.old = cur[caKeyOldCert]
		}
	}
	return r, nil
}

// move makes r follow its rotation to phase `to`: a new CA named commonName to trust (Trusting),
// the new CA signing with the old one kept trusted (Signing), or the old one dropped (none).
func (r *rotatingCA) move(to certs.Rotation, commonName string, life certs.Lifetime) error {
	switch to.Phase {
	case certs.PhaseTrusting:
		next, err := certs.NewCAValid(commonName, life.Or().CAValidity)
		if err != nil {
			return err
		}
		r.next = next
	case certs.PhaseSigning:
		if r.next == nil {
			return fmt.Errorf("moving the %s rotation to phase Signing without a next CA", commonName)
		}
		r.old, r.ca, r.next = r.ca.CertPEM, r.next, nil
	default:
		r.old, r.next = nil, nil
	}
	r.rotation = to
	return nil
}

// plan is where a CA's rotation goes from r, for a signing CA that ends at caEnd: r itself to
// stay where it is.
type plan func(r certs.Rotation, caEnd time.Time) certs.Rotation

// ensureCA returns the CA in Secret name (commonName, valid for life's CAValidity), made when the
// Secret does not exist. With next set, it moves the CA's rotation to where next says; without,
// the rotation stays where it is. A Secret whose signing CA does not read stops here with
// StateDamaged: every certificate and kubeconfig of the cluster depends on it.
func ensureCA(ctx context.Context, c client.Client, s *Spec, name, commonName string, life certs.Lifetime, next plan) (*rotatingCA, error) {
	var out *rotatingCA
	err := ensureSecret(ctx, c, s, name, func(cur map[string][]byte) (map[string][]byte, error) {
		if cur == nil {
			ca, err := certs.NewCAValid(commonName, life.Or().CAValidity)
			if err != nil {
				return nil, err
			}
			out = &rotatingCA{ca: ca}
			return out.data()
		}
		r, err := readCA(cur)
		if err != nil {
			return nil, backend.Errorf(backend.ReasonStateDamaged,
				"Secret %s/%s holds the cluster's %s, which does not read (%v): every certificate and kubeconfig of the cluster depends on it, so it is not replaced; restore the Secret from a backup, or delete the Cluster",
				s.Namespace, name, commonName, err)
		}
		out = r
		if next != nil {
			if to := next(r.rotation, r.ca.Cert.NotAfter); to != r.rotation {
				if err := r.move(to, commonName, life); err != nil {
					return nil, err
				}
			}
		}
		data, err := r.data()
		if err != nil || maps.EqualFunc(data, cur, bytes.Equal) {
			return nil, err
		}
		return data, nil
	})
	if err != nil {
		return nil, err
	}
	// A leaf is issued anew by the next CA when it signs (certs.CA.Keep: signed by the signing CA),
	// not by time: a leaf that ends with its CA is kept until then (no ReplacedAt), even while a
	// rotation waits for the workloads past its time (issuing it again from the same CA would
	// not make it last longer, and would roll the API servers at every reconcile).
	out.ca.Lifetime = life
	return out, nil
}

// pairPlan is where the rotations of the cluster CA and etcd's go at now: a rotation whose time
// has come moves on, and with it the other CA's when both are in the same phase (made together,
// their times are a moment apart: moved apart, each would roll the workloads on its own). A
// rotation leaves phase Trusting or Signing only when settled says nothing keeps it; held is what
// did.
func pairPlan(now time.Time, life certs.Lifetime, cluster, etcd *rotatingCA, settled func() string) (next plan, held *string) {
	due := func(r *rotatingCA) bool { return !now.Before(r.rotation.NextAt(r.ca.Cert.NotAfter, life)) }
	together := cluster.rotation.Phase == etcd.rotation.Phase && (due(cluster) || due(etcd))
	phase := cluster.rotation.Phase
	var why string
	asked := false
	next = func(r certs.Rotation, caEnd time.Time) certs.Rotation {
		if !(together && r.Phase == phase) && now.Before(r.NextAt(caEnd, life)) {
			return r
		}
		if r.Phase != certs.PhaseNone {
			if !asked {
				why, asked = settled(), true
			}
			if why != "" {
				return r
			}
		}
		return r.Next(now)
	}
	return next, &why
}

// trustOf is the checksum of the trust bundles of the cluster CA and etcd's (Spec.Trust), empty
// while neither CA was ever rotated: the pod templates of control planes that never rotated do not
// change.
func trustOf(cluster, etcd *rotatingCA) string {
	if cluster.rotation == (certs.Rotation{}) && etcd.rotation == (certs.Rotation{}) {
		return ""
	}
	return hashOf([]string{string(cluster.bundle()), string(etcd.bundle())})
}

// trustSettled says what keeps a CA rotation of s from its next phase: "" once the API servers
// and etcd's members all run with the trust bundles of checksum trust (AnnotationTrust), rolled
// out; a workload not made yet starts with them.
func trustSettled(ctx context.Context, h *host, s *Spec, trust string) string {
	dep := &appsv1.Deployment{}
	switch err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Sprintf("reading Deployment %s/%s: %v", s.Namespace, NameAPIServer, err)
	case dep.Spec.Template.Annotations[AnnotationTrust] != trust || !rolledOut(dep) && ptr.Deref(dep.Spec.Replicas, 1) > 0:
		return fmt.Sprintf("the API servers (Deployment %s/%s) to run with the trust bundle of this phase (%d of %d replicas updated, %d available)",
			s.Namespace, NameAPIServer, dep.Status.UpdatedReplicas, ptr.Deref(dep.Spec.Replicas, 1), dep.Status.AvailableReplicas)
	}
	sts := &appsv1.StatefulSet{}
	switch err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Sprintf("reading StatefulSet %s/%s: %v", s.Namespace, NameEtcd, err)
	case sts.Spec.Template.Annotations[AnnotationTrust] != trust || !statefulSetDone(sts):
		return fmt.Sprintf("etcd's members (StatefulSet %s/%s) to run with the trust bundle of this phase (%d of %d ready)",
			s.Namespace, NameEtcd, sts.Status.ReadyReplicas, ptr.Deref(sts.Spec.Replicas, 1))
	}
	return ""
}
