package local

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// auditEvent is what the test reads of an audit log line.
type auditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string `json:"username"`
	} `json:"user"`
	ObjectRef *struct {
		Resource, Namespace, Name string
	} `json:"objectRef"`
	Level string `json:"level"`
}

// auditEvents reads the audit log of the cluster in dir.
func auditEvents(t require.TestingT, dir string) ([]auditEvent, []byte) {
	data, err := os.ReadFile(filepath.Join(dir, logDir, auditLogFile))
	require.NoError(t, err)
	var out []auditEvent
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e))
		out = append(out, e)
	}
	return out, data
}

func logged(events []auditEvent, user, verb, resource, name string) bool {
	for _, e := range events {
		if e.User.Username == user && e.Verb == verb && e.ObjectRef != nil && e.ObjectRef.Resource == resource && e.ObjectRef.Name == name {
			return true
		}
	}
	return false
}

// TestAuditLog: bound to a ProviderConfig with audit on (its default), a request made with a ServiceAccount's token
// (as an AccessRequest's kubeconfig has) is in the cluster's audit log with that user's name, at
// Metadata level; a Secret's data never is. Requests without credentials or with bogus ones are
// not logged but counted (unauthenticatedNotLogged). Turned off, the API server restarts without a log
// (a request then is not logged); on again, it logs again.
func TestAuditLog(t *testing.T) {
	h := startBackendOptions(t, Options{StateDir: t.TempDir(), MaxClusters: 1, Logger: testenv.Logger(t)})
	cl := newCluster("audited")
	want := backend.Want{Version: "1.37.1"}
	on := h.b.ForProfile(&providersv1alpha1.ProviderConfig{})
	off := h.b.ForProfile(&providersv1alpha1.ProviderConfig{Spec: providersv1alpha1.ProviderConfigSpec{Audit: &providersv1alpha1.AuditPolicy{Disabled: true}}})
	h.awaitOn(on, cl, want, "Ready", complete)
	dir := h.b.Dir(cl.UID)
	admin, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	cs := kubernetes.NewForConfigOrDie(admin)
	ctx := t.Context()

	// A ServiceAccount's token, as the token AccessRequests issue.
	_, err = cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "auditor"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "auditor", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	require.NoError(t, err)
	userCfg := rest.AnonymousClientConfig(admin)
	userCfg.BearerToken = tr.Status.Token
	user := kubernetes.NewForConfigOrDie(userCfg)
	const marker = "audit-marker-secret-value-51c2"
	_, err = cs.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hidden"},
		StringData: map[string]string{"password": marker}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = user.CoreV1().Secrets("default").Get(ctx, "hidden", metav1.GetOptions{})
	require.Error(t, err, "forbidden: the ServiceAccount has no role")

	const name = "system:serviceaccount:default:auditor"
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events, _ := auditEvents(c, dir)
		assert.True(c, logged(events, name, "get", "secrets", "hidden"), "the user's request is logged with its name")
	}, readyWithin, 200*time.Millisecond)
	events, data := auditEvents(t, dir)
	assert.NotContains(t, string(data), marker, "a Secret's data is never logged")
	assert.NotContains(t, string(data), base64.StdEncoding.EncodeToString([]byte(marker)))
	assert.NotContains(t, string(data), tr.Status.Token, "nor a token")
	for _, e := range events {
		assert.Equal(t, "Metadata", e.Level)
	}
	info, err := os.Stat(filepath.Join(dir, auditPolicyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), info.Mode().Perm())

	unauthenticatedNotLogged(t, cs, admin, dir)

	// Off: the API server restarts without the log; on again: logged again. What was asked while
	// it was off is not in the log (the log is written in order: the request after it is).
	pid := h.b.PIDs(cl.UID)[procAPIServer]
	h.awaitOn(off, cl, want, "restarted without audit", func(s backend.State) bool {
		return complete(s) && h.b.PIDs(cl.UID)[procAPIServer] != pid
	})
	_, _ = user.CoreV1().Secrets("default").Get(ctx, "while-off", metav1.GetOptions{})
	pid = h.b.PIDs(cl.UID)[procAPIServer]
	h.awaitOn(on, cl, want, "restarted with audit", func(s backend.State) bool {
		return complete(s) && h.b.PIDs(cl.UID)[procAPIServer] != pid
	})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, _ = user.CoreV1().Secrets("default").Get(ctx, "after-on", metav1.GetOptions{})
		events, _ := auditEvents(c, dir)
		assert.True(c, logged(events, name, "get", "secrets", "after-on"))
	}, readyWithin, 200*time.Millisecond)
	events, _ = auditEvents(t, dir)
	assert.False(t, logged(events, name, "get", "secrets", "while-off"), "not logged while off")
}

// unauthenticatedNotLogged: requests without credentials (anonymous, refused) and with a bogus
// bearer token (401) are not in the audit log of the cluster in dir, which logs an admin's request
// made after them; the API server's metrics count them (controlplane.AuditPolicy).
func unauthenticatedNotLogged(t *testing.T, cs kubernetes.Interface, admin *rest.Config, dir string) {
	ctx := t.Context()
	const n = 5
	const (
		failed  = `authentication_attempts{result="error"}`
		refused = `authorization_attempts_total{result="no-opinion"}` // RBAC does not deny, it does not allow
		none    = `apiserver_audit_level_total{level="None"}`
	)
	before := map[string]float64{}
	for _, series := range []string{failed, refused, none} {
		before[series] = apiServerMetric(t, cs, series)
	}

	anonymous := kubernetes.NewForConfigOrDie(rest.AnonymousClientConfig(admin))
	bogusCfg := rest.AnonymousClientConfig(admin)
	bogusCfg.BearerToken = "bogus-token-" + string(uuid.NewUUID())
	bogus := kubernetes.NewForConfigOrDie(bogusCfg)
	for i := range n {
		_, err := anonymous.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("unauthenticated-anonymous-%d", i), metav1.GetOptions{})
		require.Truef(t, apierrors.IsForbidden(err), "anonymous: %v", err)
		_, err = bogus.CoreV1().ConfigMaps("default").Get(ctx, fmt.Sprintf("unauthenticated-bogus-%d", i), metav1.GetOptions{})
		require.Truef(t, apierrors.IsUnauthorized(err), "a bogus token: %v", err)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.GreaterOrEqual(c, apiServerMetric(c, cs, failed), before[failed]+n, "the bogus tokens are counted")
		assert.GreaterOrEqual(c, apiServerMetric(c, cs, refused), before[refused]+n, "the anonymous requests are counted")
		assert.GreaterOrEqual(c, apiServerMetric(c, cs, none), before[none]+2*n, "and so are both, left out of the log")
	}, readyWithin, 200*time.Millisecond)

	// An admin's request after them: once it is logged, so would they be.
	const after = "authenticated-after-unauthenticated"
	_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, after, metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "%v", err)
	var events []auditEvent
	var data []byte
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		events, data = auditEvents(c, dir)
		assert.True(c, logged(events, adminUser, "get", "configmaps", after), "the admin's request is logged")
	}, readyWithin, 200*time.Millisecond)
	for _, e := range events {
		assert.NotContains(t, e.RequestURI, "unauthenticated-", "an unauthenticated request is not logged")
		assert.NotEmpty(t, e.User.Username, "nor one whose credentials failed")
		assert.NotEqual(t, "system:anonymous", e.User.Username, "nor an anonymous one")
	}
	assert.NotContains(t, string(data), bogusCfg.BearerToken)
}

// apiServerMetric is the value of series (a metric's name and labels as the API server's /metrics
// writes them) read with cs, an admin's clientset; 0 while the API server has no such series.
func apiServerMetric(c require.TestingT, cs kubernetes.Interface, series string) float64 {
	data, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	require.NoError(c, err)
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			require.NoError(c, err)
			return f
		}
	}
	return 0
}
