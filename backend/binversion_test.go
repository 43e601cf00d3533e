package backend

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/util/version"
)

// TestCheckImageVersions: an image may serve a Kubernetes version when its kube-apiserver is of
// that minor and its etcd of the line the version ships with (EtcdLine); otherwise the answer
// says what the image carries and what the version needs.
func TestCheckImageVersions(t *testing.T) {
	for _, tc := range []struct {
		name, want, kubernetes, etcd string
		says                         string // "" : fits
	}{
		{"fits", "1.37.1", "1.37.1", "3.7.0", ""},
		{"another patch of the minor fits", "1.37.1", "1.37.2", "3.7.1", ""},
		{"with a v", "v1.36.3", "v1.36.3", "3.6.6", ""},
		{"1.33 ships etcd 3.5", "1.33.4", "1.33.4", "3.5.21", ""},
		{"an etcd of an older line", "1.37.1", "1.37.1", "3.5.21", "it carries etcd 3.5.21, and Kubernetes 1.37.1 needs etcd 3.7"},
		{"an etcd of a newer line", "1.36.3", "1.36.3", "3.7.0", "it carries etcd 3.7.0, and Kubernetes 1.36.3 needs etcd 3.6"},
		{"another kube-apiserver minor", "1.37.1", "1.36.3", "3.7.0", "it carries kube-apiserver 1.36.3, and Kubernetes 1.37.1 needs kube-apiserver 1.37"},
		{"no kube-apiserver version", "1.37.1", "", "3.7.0", "its kube-apiserver reports no version"},
		{"no etcd version", "1.37.1", "1.37.1", "", "its etcd reports no version"},
		{"etcd 4", "1.37.1", "1.37.1", "4.7.0", "it carries etcd 4.7.0, and Kubernetes 1.37.1 needs etcd 3.7"},
		{"no target", "x", "1.37.1", "3.7.0", "is not a version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckImageVersions(tc.want, tc.kubernetes, tc.etcd)
			if tc.says == "" {
				assert.Empty(t, got)
				return
			}
			assert.Contains(t, got, tc.says)
		})
	}
}

// TestParseEtcdVersion: the version from `etcd --version`, "" when it names none.
func TestParseEtcdVersion(t *testing.T) {
	for out, want := range map[string]string{
		"etcd Version: 3.7.0\nGit SHA: v3.7.0\nGo Version: go1.25\n": "3.7.0",
		"  etcd Version: 3.5.21  \n":                                 "3.5.21",
		"Git SHA: x\netcd Version: 3.6.6\n":                          "3.6.6",
		"etcd Version: three\n":                                      "",
		"":                                                           "",
		"Kubernetes v1.37.1":                                         "",
	} {
		assert.Equal(t, want, ParseEtcdVersion(out), "%q", out)
	}
}

// FuzzImageVersions: the parsers of --version outputs and the image check never panic; an image
// whose kube-apiserver reads as the version asked for fits exactly when its etcd is of that
// version's line, and is otherwise refused for the etcd it carries.
func FuzzImageVersions(f *testing.F) {
	f.Add("Kubernetes v1.37.1\n", "etcd Version: 3.7.0\n", "1.37.1")
	f.Add("Kubernetes v1.36.3", "etcd Version: 3.5.21", "1.36.3")
	f.Add("junk", "", "x")
	f.Fuzz(func(t *testing.T, apiserver, etcd, want string) {
		k, err := ParseKubernetesVersion(apiserver)
		e := ParseEtcdVersion(etcd)
		why := CheckImageVersions(want, k, e)
		line, lerr := EtcdLine(want)
		if err != nil || e == "" || lerr != nil || !SameVersion(k, want) {
			return
		}
		ev := version.MustParseSemantic(e)
		if ev.Major() == 3 && int(ev.Minor()) == line {
			assert.Empty(t, why)
		} else {
			assert.Contains(t, why, "it carries etcd "+e)
		}
	})
}
