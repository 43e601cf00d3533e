package controlplane

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// TestAuditPolicy evaluates AuditPolicy with kube-apiserver's own policy checker: an authenticated
// user's requests are logged at Metadata level; one whose credentials failed (no user, as
// WithFailedAuthenticationAudit audits it) and an anonymous one are not, nor are health checks and
// the controller manager's lease renewals.
func TestAuditPolicy(t *testing.T) {
	p, err := policy.LoadPolicyFromBytes([]byte(AuditPolicy))
	require.NoError(t, err)
	eval := policy.NewPolicyRuleEvaluator(p)

	authenticated := func(name string, groups ...string) user.Info {
		return &user.DefaultInfo{Name: name, Groups: append(groups, user.AllAuthenticated)}
	}
	anonymous := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	getSecret := func(u user.Info) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: "get", Namespace: "default", APIVersion: "v1",
			Resource: "secrets", Name: "hidden", ResourceRequest: true, Path: "/api/v1/namespaces/default/secrets/hidden"}
	}
	path := func(u user.Info, p string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: "get", Path: p}
	}
	lease := func(u user.Info, verb string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{User: u, Verb: verb, Namespace: "kube-system", APIGroup: "coordination.k8s.io",
			APIVersion: "v1", Resource: "leases", Name: "kube-controller-manager", ResourceRequest: true}
	}
	kcm := authenticated("system:kube-controller-manager")
	tests := []struct {
		name  string
		attrs authorizer.AttributesRecord
		want  auditinternal.Level
	}{
		{"a ServiceAccount", getSecret(authenticated("system:serviceaccount:default:auditor", "system:serviceaccounts")), auditinternal.LevelMetadata},
		{"an admin", getSecret(authenticated("admin", "system:masters")), auditinternal.LevelMetadata},
		{"an authenticated non-resource request", path(authenticated("admin"), "/api"), auditinternal.LevelMetadata},
		{"the controller manager reading a Secret", getSecret(kcm), auditinternal.LevelMetadata},
		{"the controller manager creating its lease", lease(kcm, "create"), auditinternal.LevelMetadata},
		{"the controller manager renewing its lease", lease(kcm, "update"), auditinternal.LevelNone},
		{"failed credentials (no user)", getSecret(nil), auditinternal.LevelNone},
		{"failed credentials, a non-resource request", path(nil, "/metrics"), auditinternal.LevelNone},
		{"anonymous", getSecret(anonymous), auditinternal.LevelNone},
		{"anonymous, a non-resource request", path(anonymous, "/api"), auditinternal.LevelNone},
		{"a health check", path(authenticated("admin"), "/readyz"), auditinternal.LevelNone},
		{"an anonymous health check", path(anonymous, "/livez"), auditinternal.LevelNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := eval.EvaluatePolicyRule(tt.attrs)
			assert.Equal(t, tt.want, got.Level)
			if got.Level != auditinternal.LevelNone {
				assert.Contains(t, got.OmitStages, auditinternal.StageRequestReceived)
			}
		})
	}
}
