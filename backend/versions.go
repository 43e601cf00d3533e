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
