package authconfig

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

func TestRender(t *testing.T) {
	empty, err := Render(nil)
	require.NoError(t, err)
	assert.Equal(t, Empty, string(empty), "no issuer is the file a cluster starts with, so its hash matches the running config")

	jwt := []apiserverv1.JWTAuthenticator{{
		Issuer: apiserverv1.Issuer{URL: "https://idp", Audiences: []string{"a", "b"}, AudienceMatchPolicy: apiserverv1.AudienceMatchPolicyMatchAny},
		ClaimMappings: apiserverv1.ClaimMappings{
			Username: apiserverv1.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptr.To("")},
		},
	}}
	data, err := Render(jwt)
	require.NoError(t, err)
	var back apiserverv1.AuthenticationConfiguration
	require.NoError(t, yaml.UnmarshalStrict(data, &back))
	assert.Equal(t, "apiserver.config.k8s.io/v1", back.APIVersion)
	assert.Equal(t, "AuthenticationConfiguration", back.Kind)
	assert.Equal(t, jwt, back.JWT)
	assert.Contains(t, string(data), `prefix: ""`, "an empty prefix is written, as the API server requires")
	again, err := Render(jwt)
	require.NoError(t, err)
	assert.Equal(t, data, again, "the same issuers render the same bytes (and hash)")
}

func TestWriteIfChanged(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	wrote, err := WriteIfChanged(path, []byte("a"))
	require.NoError(t, err)
	assert.True(t, wrote)
	wrote, err = WriteIfChanged(path, []byte("a"))
	require.NoError(t, err)
	assert.False(t, wrote, "unchanged content is not written again")
	info, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())
}

func TestApplied(t *testing.T) {
	data := []byte(Empty)
	running := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
	metrics := func(hash string) string {
		return "# HELP x\n" + configInfoMetric + `{apiserver_id_hash="sha256:1",hash="` + hash + "\"} 1\nother_metric 1\n"
	}
	tests := []struct {
		name    string
		body    string
		status  int
		applied bool
		err     bool
	}{
		{"runs the file", metrics(running), http.StatusOK, true, false},
		{"runs another file", metrics("sha256:0"), http.StatusOK, false, false},
		{"no such metric", "other_metric 1\n", http.StatusOK, false, false},
		{"forbidden", "", http.StatusForbidden, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				assert.Equal(t, "/metrics", r.URL.Path)
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer srv.Close()
			applied, err := Applied(t.Context(), srv.Client(), srv.URL, data)
			assert.Equal(t, tt.applied, applied)
			assert.Equal(t, tt.err, err != nil, "%v", err)
		})
	}
}
