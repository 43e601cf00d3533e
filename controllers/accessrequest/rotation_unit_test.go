package accessrequest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// TestOtherCAAcrossRotation: a Secret whose CA bundle shares a certificate with the cluster's
// bundle of the moment belongs to the same cluster, whose CA is being rotated (old and new side
// by side, then the new alone): it is written anew, not granted as for a cluster created anew.
// A bundle with nothing in common is another cluster's.
func TestOtherCAAcrossRotation(t *testing.T) {
	newCA := func() []byte {
		ca, err := certs.NewCA("local-cluster-ca")
		require.NoError(t, err)
		return ca.CertPEM
	}
	old, next, foreign := newCA(), newCA(), newCA()
	both := append(append([]byte{}, old...), next...)
	secret := func(ca []byte) *corev1.Secret {
		return &corev1.Secret{Data: map[string][]byte{clustersv1alpha1.SecretKeyCACert: ca}}
	}
	for _, tc := range []struct {
		name      string
		held, now []byte
		other     bool
	}{
		{"unchanged", old, old, false},
		{"rotation begins: the old CA and the new one", old, both, false},
		{"rotation ends: the new CA alone", both, next, false},
		{"the cluster created anew", old, foreign, true},
		{"a bundle of others", both, foreign, true},
		{"the old CA alone, the new one alone (an AccessRequest reconciled in neither phase)", old, next, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.other, otherCA(secret(tc.held), tc.now))
		})
	}
	assert.False(t, otherCA(nil, old), "no Secret")
	assert.False(t, otherCA(secret(nil), old), "a Secret without a CA")
}
