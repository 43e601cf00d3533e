package backend

import (
	"testing"

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
