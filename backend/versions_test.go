package backend

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/version"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

func sv(v string, deprecated bool) clustersv1alpha1.SupportedK8sVersion {
	return clustersv1alpha1.SupportedK8sVersion{Version: v, Deprecated: deprecated}
}

func TestNewOffer(t *testing.T) {
	served := []string{"1.37.1", "1.36.3"}
	tests := []struct {
		name        string
		wanted      []clustersv1alpha1.SupportedK8sVersion
		def         string
		wantOffered []clustersv1alpha1.SupportedK8sVersion
		wantMissing []string
		wantDefault string
	}{
		{"nothing wanted offers everything served", nil, "", []clustersv1alpha1.SupportedK8sVersion{sv("1.37.1", false), sv("1.36.3", false)}, nil, ""},
		{"wanted and served", []clustersv1alpha1.SupportedK8sVersion{sv("1.36.3", true)}, "", []clustersv1alpha1.SupportedK8sVersion{sv("1.36.3", true)}, nil, ""},
		{"v prefix matches", []clustersv1alpha1.SupportedK8sVersion{sv("v1.37.1", false)}, "1.37.1", []clustersv1alpha1.SupportedK8sVersion{sv("v1.37.1", false)}, nil, "v1.37.1"},
		{"unserved left out", []clustersv1alpha1.SupportedK8sVersion{sv("1.37.1", false), sv("1.30.0", false)}, "1.30.0", []clustersv1alpha1.SupportedK8sVersion{sv("1.37.1", false)}, []string{"1.30.0"}, ""},
		{"deprecated default dropped", []clustersv1alpha1.SupportedK8sVersion{sv("1.37.1", true)}, "1.37.1", []clustersv1alpha1.SupportedK8sVersion{sv("1.37.1", true)}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOffer(tt.wanted, tt.def, served)
			assert.Equal(t, tt.wantOffered, o.Versions)
			assert.Equal(t, tt.wantMissing, o.Missing)
			assert.Equal(t, tt.wantDefault, o.Default)
		})
	}
}

func TestOfferChoose(t *testing.T) {
	offer := Offer{Versions: []clustersv1alpha1.SupportedK8sVersion{sv("1.35.0", false), sv("1.37.1", true), sv("1.36.3", false)}}
	tests := []struct {
		name      string
		offer     Offer
		requested string
		want      string
		wantErr   string
	}{
		{"requested and offered", offer, "v1.37.1", "1.37.1", ""},
		{"requested, not offered", offer, "1.30.0", "", "1.35.0, 1.37.1, 1.36.3"},
		{"default", Offer{Versions: offer.Versions, Default: "1.35.0"}, "", "1.35.0", ""},
		{"newest non-deprecated", offer, "", "1.36.3", ""},
		{"nothing offered", Offer{}, "", "", "offers no non-deprecated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.offer.Choose(tt.requested)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.True(t, IsReason(err, ReasonVersionNotSupported))
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestSortNewestFirst(t *testing.T) {
	vs := []string{"1.9.0", "junk", "1.37.1", "1.10.2", "1.37.0"}
	SortNewestFirst(vs)
	assert.Equal(t, []string{"1.37.1", "1.37.0", "1.10.2", "1.9.0", "junk"}, vs)
}

func TestImageMaps(t *testing.T) {
	images := map[string]string{"v1.36.2": "a:v1.36.2", "1.37.1": "a:v1.37.1", "nightly": "a:nightly"}
	assert.Equal(t, []string{"1.37.1", "1.36.2", "nightly"}, ImageVersions(images))
	assert.Empty(t, ImageVersions(nil))
	for _, tc := range []struct {
		version, want string
		ok            bool
	}{
		{"1.36.2", "a:v1.36.2", true},
		{"v1.37.1", "a:v1.37.1", true},
		{"1.35.0", "", false},
	} {
		got, ok := ImageFor(images, tc.version)
		assert.Equal(t, tc.ok, ok, tc.version)
		assert.Equal(t, tc.want, got, tc.version)
	}
}

func TestCheckVersionChange(t *testing.T) {
	tests := []struct {
		from, to string
		refused  string // a part of the error; "" allowed
	}{
		{"1.37.1", "1.37.2", ""},
		{"1.36.3", "1.37.1", ""},
		{"v1.36.3", "v1.37.0", ""},
		{"1.37.2", "1.37.1", ""}, // a patch down within the minor
		{"1.37.1", "1.36.3", "downgrade from 1.37.1 to 1.36.3 is refused: etcd and the API server's storage cannot go back; create a new Cluster"},
		{"1.35.4", "1.37.1", "skips Kubernetes 1.36"},
		{"1.37.1", "2.0.0", "major version"},
		{"1.37.1", "latest", "not a semantic version"},
		{"garbage", "1.37.1", "does not parse"},
	}
	for _, tt := range tests {
		t.Run(tt.from+"->"+tt.to, func(t *testing.T) {
			err := CheckVersionChange(tt.from, tt.to)
			if tt.refused == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.refused)
		})
	}
}

func TestResolve(t *testing.T) {
	notOffered := Errorf(ReasonVersionNotSupported, "spec.kubernetes.version 1.38.0 is not offered by this profile")
	tests := []struct {
		name       string
		running    string
		want       Want
		wantTarget string
		wantChange *VersionChange
		wantErr    bool
	}{
		{"new cluster takes the default", "", Want{Version: "1.37.1"}, "1.37.1", nil, false},
		{"new cluster takes the named version", "", Want{Version: "1.36.3", Requested: "1.36.3"}, "1.36.3", nil, false},
		{"new cluster of an unoffered version fails", "", Want{Requested: "1.38.0", NotOffered: notOffered}, "", nil, true},
		{"no version named keeps the running one, whatever the default", "1.36.3", Want{Version: "1.37.1"}, "1.36.3", nil, false},
		{"the running version named", "1.37.1", Want{Version: "v1.37.1", Requested: "1.37.1"}, "1.37.1", nil, false},
		{"next minor upgrades", "1.36.3", Want{Version: "1.37.1", Requested: "1.37.1"}, "1.37.1",
			&VersionChange{From: "1.36.3", To: "1.37.1", Message: "Upgrading from Kubernetes 1.36.3 to 1.37.1 in place: data, endpoint, CA and issued kubeconfigs are kept."}, false},
		{"downgrade refused, keeps running", "1.37.1", Want{Version: "1.36.3", Requested: "1.36.3"}, "1.37.1",
			&VersionChange{From: "1.37.1", To: "1.36.3", Refused: true,
				Message: "downgrade from 1.37.1 to 1.36.3 is refused: etcd and the API server's storage cannot go back; create a new Cluster (or set spec.kubernetes.version back to 1.37.1)"}, false},
		{"unoffered version refused, keeps running", "1.37.1", Want{Requested: "1.38.0", NotOffered: notOffered}, "1.37.1",
			&VersionChange{From: "1.37.1", To: "1.38.0", Refused: true,
				Message: "spec.kubernetes.version 1.38.0 is not offered by this profile; the cluster keeps running 1.37.1"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, change, err := Resolve(tt.running, tt.want)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.wantTarget, target)
			assert.Equal(t, tt.wantChange, change)
		})
	}
}

func TestWantOf(t *testing.T) {
	o := NewOffer(nil, "1.36.3", []string{"1.37.1", "1.36.3"})
	assert.Equal(t, Want{Version: "1.36.3"}, WantOf(o, ""))
	assert.Equal(t, Want{Version: "1.37.1", Requested: "1.37.1"}, WantOf(o, "v1.37.1"))
	w := WantOf(o, "1.38.0")
	assert.Equal(t, "1.38.0", w.Requested)
	assert.True(t, IsReason(w.NotOffered, ReasonVersionNotSupported))
}

func TestEtcdLine(t *testing.T) {
	for v, want := range map[string]int{"1.30.2": 5, "1.33.9": 5, "1.34.0": 6, "1.36.3": 6, "v1.37.1": 7, "1.40.0": 7} {
		got, err := EtcdLine(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, got, v)
	}
	_, err := EtcdLine("x")
	assert.Error(t, err)
}

// FuzzCheckVersionChange: whatever the two strings, no panic, and a change to the same version
// or to a later patch of the same minor is never refused.
func FuzzCheckVersionChange(f *testing.F) {
	f.Add("1.37.1", "1.36.3")
	f.Add("v1.36.0", "1.37.0-rc.1")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, from, to string) {
		err := CheckVersionChange(from, to)
		if err == nil {
			if _, _, perr := Resolve(from, Want{Version: to, Requested: to}); perr != nil {
				t.Fatalf("Resolve(%q, %q) failed after an allowed change: %v", from, to, perr)
			}
		}
		if p, perr := version.ParseSemantic(Normalize(from)); perr == nil && SameVersion(from, to) && err != nil {
			t.Fatalf("the same version %s refused: %v", p, err)
		}
	})
}
