package e2e

import (
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// TestMetricsSecure runs the binary with --metrics-secure=true, as openMCP's operator can ask:
// /metrics answers over HTTPS only to a bearer token the platform's API server authenticates
// (TokenReview) and authorizes for GET /metrics (SubjectAccessReview): no token is 401, a
// ServiceAccount without the reader role 403, one bound to deploy/rbac's metrics reader 200. The
// operator runs with the generated ClusterRole only, so its reviews need nothing more.
func TestMetricsSecure(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	ctx := t.Context()
	metrics, probes := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	op := start(t, bin, "run", "--provider-name", "metrics", "--kubeconfig", kubeconfig,
		"--environment=e2e", "--verbosity=debug", "--controllers=providerconfig",
		"--metrics-bind-address", metrics, "--metrics-secure=true", "--health-probe-bind-address", probes)
	require.Eventually(t, func() bool { return op.exited() || httpOK("http://"+probes+"/readyz") },
		readyTimeout, poll, "/readyz never answered 200")
	require.False(t, op.exited(), "cluster-provider exited before it was ready")

	// ServiceAccounts of a scraper: one bound to the reader role, one not.
	ns := testNamespace(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	tokenOf := func(name string) string {
		_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		require.NoError(t, err)
		return tr.Status.Token
	}
	reader, stranger := tokenOf("scraper"), tokenOf("stranger")
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "rbac", "metrics_reader_role.yaml"))
	require.NoError(t, err)
	role := &rbacv1.ClusterRole{}
	require.NoError(t, yaml.UnmarshalStrict(data, role))
	role.Name += "-" + ns
	require.NoError(t, env.Client.Create(ctx, role))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "scraper"}},
	}))

	// The certificate is self-signed, made at start: this test checks who is let in, not it.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(token string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metrics+"/metrics", nil)
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	// RBAC takes effect in the API server's authorizer asynchronously: wait for the 200.
	var code int
	var body string
	require.Eventually(t, func() bool { code, body = get(reader); return code == http.StatusOK },
		convergeWithin, poll, "the reader's GET /metrics: %d %s", code, body)
	assert.True(t, strings.Contains(body, "controller_runtime_"), "metrics served")
	code, _ = get("")
	assert.Equal(t, http.StatusUnauthorized, code, "no token")
	code, _ = get(stranger)
	assert.Equal(t, http.StatusForbidden, code, "a token without the reader role")
	// controller-runtime's filter answers a token the TokenReview rejects with an error as 500.
	code, _ = get("not-a-token")
	assert.Contains(t, []int{http.StatusUnauthorized, http.StatusInternalServerError}, code, "a token the API server does not know")

	// Plain HTTP is not served on the secure port.
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + metrics + "/metrics")
	if err == nil {
		resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "an HTTP request to the HTTPS port")
	}
}
