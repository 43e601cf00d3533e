package backend

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// Registry holds the Backends of this operator by their Name.
type Registry map[string]Backend

// Get returns the Backend named name, or nil.
func (r Registry) Get(name string) Backend {
	if r == nil {
		return nil
	}
	return r[name]
}

// Offer is what a profile offers: the wanted versions that the backend serves.
type Offer struct {
	// Versions are the wanted versions the backend serves, in the wanted order; with nothing
	// wanted, every served version.
	Versions []clustersv1alpha1.SupportedK8sVersion
	// Missing are wanted versions the backend does not serve.
	Missing []string
	// Default is the wanted default version if it is offered and not deprecated, else "".
	Default string
}

// NewOffer intersects wanted (a ProviderConfig's spec.supportedVersions) with served (a
// Backend's Versions). With wanted empty, every served version is offered. defaultVersion is kept
// if it is offered and not deprecated.
func NewOffer(wanted []clustersv1alpha1.SupportedK8sVersion, defaultVersion string, served []string) Offer {
	var o Offer
	if len(wanted) == 0 {
		for _, v := range served {
			o.Versions = append(o.Versions, clustersv1alpha1.SupportedK8sVersion{Version: v})
		}
	}
	for _, w := range wanted {
		if slices.ContainsFunc(served, func(s string) bool { return SameVersion(s, w.Version) }) {
			o.Versions = append(o.Versions, w)
		} else {
			o.Missing = append(o.Missing, w.Version)
		}
	}
	if defaultVersion != "" {
		for _, v := range o.Versions {
			if SameVersion(v.Version, defaultVersion) && !v.Deprecated {
				o.Default = v.Version
			}
		}
	}
	return o
}

// Choose returns the version a Cluster runs: requested if offered, else (nothing requested) the
// default, else the newest non-deprecated offered version. A requested version that is not
// offered is an error with reason VersionNotSupported that lists the offered ones.
func (o Offer) Choose(requested string) (string, error) {
	if requested != "" {
		for _, v := range o.Versions {
			if SameVersion(v.Version, requested) {
				return Normalize(v.Version), nil
			}
		}
		return "", Errorf(ReasonVersionNotSupported,
			"spec.kubernetes.version %s is not offered by this profile; offered are: %s. Set spec.kubernetes.version to one of them, or leave it empty for the default",
			requested, o.list())
	}
	if o.Default != "" {
		return Normalize(o.Default), nil
	}
	var newest *version.Version
	for _, v := range o.Versions {
		p, err := version.ParseGeneric(v.Version)
		if err != nil || v.Deprecated {
			continue
		}
		if newest == nil || p.GreaterThan(newest) {
			newest = p
		}
	}
	if newest == nil {
		return "", Errorf(ReasonVersionNotSupported,
			"this profile offers no non-deprecated Kubernetes version (offered: %s); the ProviderConfig's conditions say which wanted versions are missing", o.list())
	}
	return newest.String(), nil
}

func (o Offer) list() string {
	if len(o.Versions) == 0 {
		return "none"
	}
	names := make([]string, len(o.Versions))
	for i, v := range o.Versions {
		names[i] = v.Version
	}
	return strings.Join(names, ", ")
}

// Normalize returns v without a leading "v" and, if it parses, in canonical form (1.37.1).
func Normalize(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if p, err := version.ParseGeneric(v); err == nil {
		return p.String()
	}
	return v
}

// SameVersion reports whether a and b name the same version, with or without a "v".
func SameVersion(a, b string) bool { return Normalize(a) == Normalize(b) }

// ImageVersions returns the versions of an image map (version → image, as a ProviderConfig's
// spec.kind.nodeImages or spec.hosted.images), normalized, newest first.
func ImageVersions(images map[string]string) []string {
	var vs []string
	for v := range images {
		vs = append(vs, Normalize(v))
	}
	SortNewestFirst(vs)
	return vs
}

// ImageFor returns the image of version in an image map, whichever way the key writes it.
func ImageFor(images map[string]string, version string) (string, bool) {
	for v, image := range images {
		if SameVersion(v, version) {
			return image, true
		}
	}
	return "", false
}

// SortNewestFirst sorts versions, newest first; unparsable ones go last.
func SortNewestFirst(vs []string) {
	slices.SortStableFunc(vs, func(a, b string) int {
		pa, ea := version.ParseGeneric(a)
		pb, eb := version.ParseGeneric(b)
		switch {
		case ea != nil && eb != nil:
			return strings.Compare(a, b)
		case ea != nil:
			return 1
		case eb != nil:
			return -1
		}
		switch {
		case pa.GreaterThan(pb):
			return -1
		case pb.GreaterThan(pa):
			return 1
		}
		return 0
	})
}

// MissingMessage explains versions a ProviderConfig wants that the backend does not serve.
func MissingMessage(backend string, missing, served []string) string {
	return fmt.Sprintf("spec.supportedVersions %s: no %s binaries serve them, so the ClusterProfile leaves them out (served: %s). Add a folder with a kube-apiserver and etcd of that version to --local-binaries, or remove them from spec.supportedVersions",
		strings.Join(missing, ", "), backend, strings.Join(served, ", "))
}

// Want is the version a Cluster asks its backend for, as the Cluster reconciler computes it from
// spec.kubernetes.version and the profile's Offer. It holds nothing of the ProviderConfig: a
// Backend reads its settings from the ProviderConfig it is bound to (Backend.ForProfile).
type Want struct {
	// Version is what a cluster made now runs: spec.kubernetes.version, or the profile's default
	// when the Cluster names none. Empty when NotOffered is set.
	Version string
	// Requested is spec.kubernetes.version, normalized; empty when the Cluster names none, so an
	// existing cluster keeps the version it runs.
	Requested string
	// NotOffered, when set, says that Requested is not offered by the profile (reason
	// VersionNotSupported): no cluster is made for it, and a running one keeps its version.
	NotOffered error
}

// WantOf is what cl asks for of a profile offering o.
func WantOf(o Offer, requested string) Want {
	w := Want{Requested: Normalize(requested)}
	w.Version, w.NotOffered = o.Choose(requested)
	return w
}

// VersionChange is a change of version that a Cluster asks for and its cluster does not run yet:
// in progress, or refused.
type VersionChange struct {
	// From is the version the cluster runs; To the one asked for.
	From, To string
	// Refused is true when the backend does not make the change: the cluster keeps running From.
	Refused bool
	// Message says, in a sentence, what happens (or what was refused, why, and what to do).
	Message string
}

// ReasonVersionChangeRefused: a change of spec.kubernetes.version that the backend does not make
// (a downgrade, a skipped minor, a change the backend cannot make without losing data).
const ReasonVersionChangeRefused = "VersionChangeRefused"

// ReasonUpgrading: the backend moves the cluster to the version asked for.
const ReasonUpgrading = "Upgrading"

// Resolve decides the version a cluster runs, given the version its backend recorded (running:
// empty for a cluster not made yet) and what the Cluster asks for:
//   - a new cluster runs w.Version (or fails with w.NotOffered);
//   - a Cluster that names no version, or names the one it runs, keeps running it: moving the
//     profile's default, deprecating a version or adding one never moves an existing cluster;
//   - a named version that differs is checked by CheckVersionChange: allowed, target is it and
//     change says it is in progress; refused, target stays running and change says why.
//
// A backend adds its own refusals (Refuse) for changes it cannot make safely.
func Resolve(running string, w Want) (target string, change *VersionChange, err error) {
	if running == "" {
		if w.NotOffered != nil {
			return "", nil, w.NotOffered
		}
		return w.Version, nil, nil
	}
	running = Normalize(running)
	if w.Requested == "" || SameVersion(running, w.Requested) {
		return running, nil, nil
	}
	if w.NotOffered != nil {
		return running, Refuse(running, w.Requested, fmt.Sprintf("%s; the cluster keeps running %s", w.NotOffered, running)), nil
	}
	if err := CheckVersionChange(running, w.Requested); err != nil {
		return running, Refuse(running, w.Requested, err.Error()), nil
	}
	return Normalize(w.Requested), &VersionChange{From: running, To: Normalize(w.Requested),
		Message: fmt.Sprintf("Upgrading from Kubernetes %s to %s in place: data, endpoint, CA and issued kubeconfigs are kept.", running, Normalize(w.Requested))}, nil
}

// Refuse is a refused change from → to, with message (a sentence saying why and what to do).
func Refuse(from, to, message string) *VersionChange {
	return &VersionChange{From: Normalize(from), To: Normalize(to), Refused: true, Message: message}
}

// CheckVersionChange reports whether a cluster of Kubernetes from may move in place to to. Allowed:
// a later patch of the same minor, any patch of the next minor, and an earlier patch of the same
// minor (the storage format does not change within a minor). Refused: a change of the major, a
// downgrade of the minor (etcd and the API server's storage cannot go back) and a skipped minor
// (Kubernetes' version skew policy: one minor at a time). The error says why and what to do.
func CheckVersionChange(from, to string) error {
	f, err := version.ParseSemantic(Normalize(from))
	if err != nil {
		return fmt.Errorf("the cluster's version %q does not parse (%v); its version cannot be changed in place: create a new Cluster", from, err)
	}
	t, err := version.ParseSemantic(Normalize(to))
	if err != nil {
		return fmt.Errorf("spec.kubernetes.version %q is not a semantic version (%v); name a version like %d.%d.0", to, err, f.Major(), f.Minor()+1)
	}
	switch {
	case f.Major() != t.Major():
		return fmt.Errorf("a change of the major version from %s to %s is refused: Kubernetes does not move between majors in place; create a new Cluster", f, t)
	case t.Minor() < f.Minor():
		return fmt.Errorf("downgrade from %s to %s is refused: etcd and the API server's storage cannot go back; create a new Cluster (or set spec.kubernetes.version back to %s)", f, t, f)
	case t.Minor() > f.Minor()+1:
		return fmt.Errorf("upgrade from %s to %s is refused: it skips Kubernetes %d.%d, and a cluster moves one minor at a time; set spec.kubernetes.version to a %d.%d version first", f, t, f.Major(), f.Minor()+1, f.Major(), f.Minor()+1)
	}
	return nil
}

// EtcdLine is the etcd release line (3.5, 3.6, 3.7) that Kubernetes version v ships with: 3.5 up
// to 1.33, 3.6 from 1.34 to 1.36, 3.7 from 1.37. A move between Kubernetes minors may move etcd
// one line at most.
func EtcdLine(v string) (int, error) {
	p, err := version.ParseGeneric(Normalize(v))
	if err != nil {
		return 0, err
	}
	switch {
	case p.Minor() <= 33:
		return 5, nil
	case p.Minor() <= 36:
		return 6, nil
	}
	return 7, nil
}
