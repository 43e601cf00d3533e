package local

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

func TestRenderAuthConfig(t *testing.T) {
	empty, err := renderAuthConfig(nil)
	require.NoError(t, err)
	assert.Equal(t, emptyAuthConfig, string(empty), "no issuer is the file a cluster starts with, so its hash matches the running config")

	jwt := []apiserverv1.JWTAuthenticator{{
		Issuer: apiserverv1.Issuer{URL: "https://idp", Audiences: []string{"a", "b"}, AudienceMatchPolicy: apiserverv1.AudienceMatchPolicyMatchAny},
		ClaimMappings: apiserverv1.ClaimMappings{
			Username: apiserverv1.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptr.To("")},
		},
	}}
	data, err := renderAuthConfig(jwt)
	require.NoError(t, err)
	var back apiserverv1.AuthenticationConfiguration
	require.NoError(t, yaml.UnmarshalStrict(data, &back))
	assert.Equal(t, "apiserver.config.k8s.io/v1", back.APIVersion)
	assert.Equal(t, "AuthenticationConfiguration", back.Kind)
	assert.Equal(t, jwt, back.JWT)
	assert.Contains(t, string(data), `prefix: ""`, "an empty prefix is written, as the API server requires")
	again, err := renderAuthConfig(jwt)
	require.NoError(t, err)
	assert.Equal(t, data, again, "the same issuers render the same bytes (and hash)")
}
