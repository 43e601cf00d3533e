package accessrequest

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/tools/clientcmd"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

func TestRequestID(t *testing.T) {
	id := RequestID("default", "local", "ns", "name")
	assert.Len(t, id, 26)
	assert.Empty(t, validation.IsDNS1123Label("ar-"+id), "a valid ServiceAccount name")
	assert.Empty(t, validation.IsValidLabelValue(id))
	assert.Equal(t, id, RequestID("default", "local", "ns", "name"), "stable")
	for _, other := range [][4]string{{"prod", "local", "ns", "name"}, {"default", "kind", "ns", "name"}, {"default", "local", "ns2", "name"},
		{"default", "local", "ns", "name2"}, {"default", "local", "nsn", "ame"}} {
		assert.NotEqual(t, id, RequestID(other[0], other[1], other[2], other[3]), "%v", other)
	}
}

func TestSecretName(t *testing.T) {
	tests := []struct{ name, want string }{
		{"dev", "dev.kubeconfig"},
		{strings.Repeat("a", 242), strings.Repeat("a", 242) + ".kubeconfig"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, SecretName(tt.name))
	}
	long := strings.Repeat("b", 253)
	got := SecretName(long)
	assert.LessOrEqual(t, len(got), validation.DNS1123SubdomainMaxLength)
	assert.Empty(t, validation.IsDNS1123Subdomain(got))
	assert.True(t, strings.HasSuffix(got, ".kubeconfig"))
	assert.NotEqual(t, got, SecretName(strings.Repeat("b", 252)+"c"), "names differing at the end get different Secrets")
}

func TestPlanToken(t *testing.T) {
	ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "dev"}}
	ar.Spec.Token = &clustersv1alpha1.TokenConfig{
		Permissions: []clustersv1alpha1.PermissionsRequest{
			{Rules: []rbacv1.PolicyRule{{Verbs: []string{"get"}}}},
			{Name: "mine", Namespace: "a", Rules: []rbacv1.PolicyRule{{Verbs: []string{"list"}}}},
			{Namespace: "a"},
			{Namespace: "b", DisableAutomaticNamespaceCreation: true},
		},
		RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "view"}, {Kind: "Role", Name: "r", Namespace: "c"}},
	}
	p := planToken(ar, "id", "access")
	assert.Equal(t, "ar-id", p.serviceAccount.Name)
	assert.Equal(t, "access", p.serviceAccount.Namespace)
	assert.Equal(t, []string{"a"}, p.namespaces, "once each, and not b (opt-out)")
	var got []string
	for _, o := range p.objects {
		got = append(got, kindOf(o.obj)+" "+qualified(o.meta.Namespace, o.meta.Name))
		assert.Equal(t, "id", o.meta.Labels[LabelRequestID])
		assert.Equal(t, "ns/dev", o.meta.Annotations[AnnotationRequestName])
		assert.Equal(t, o.meta.Name == "mine", o.userNamed, o.meta.Name)
	}
	assert.Equal(t, []string{
		"ClusterRole openmcp:permission:id:0", "ClusterRoleBinding openmcp:permission:id:0",
		"Role a/mine", "RoleBinding a/mine",
		"Role a/openmcp:permission:id:2", "RoleBinding a/openmcp:permission:id:2",
		"Role b/openmcp:permission:id:3", "RoleBinding b/openmcp:permission:id:3",
		"ClusterRoleBinding openmcp:roleref:id:0", "RoleBinding c/openmcp:roleref:id:1",
	}, got)
	b := p.objects[3].obj.(*rbacv1.RoleBinding)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "mine"}, b.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ar-id", Namespace: "access"}}, b.Subjects)
	rr := p.objects[9].obj.(*rbacv1.RoleBinding)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "r"}, rr.RoleRef)
	assert.True(t, p.wants("RoleBinding", "c", "openmcp:roleref:id:1"))
	assert.False(t, p.wants("Role", "c", "openmcp:roleref:id:1"))
	assert.False(t, p.wants("ClusterRole", "", "openmcp:permission:id:7"))
}

func TestRequestLabelsLongName(t *testing.T) {
	ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: strings.Repeat("n", 100)}}
	l := requestLabels(ar, "theid")
	assert.Equal(t, "theid", l[LabelRequestName], "a name too long for a label value is replaced by the id")
	for k, v := range l {
		assert.Empty(t, validation.IsValidLabelValue(v), k)
	}
}

func TestSecretDataAndValidity(t *testing.T) {
	created := time.Unix(1_700_000_000, 0)
	a := tokenAccess{Host: "https://127.0.0.1:6443", CA: []byte("ca"), Token: "tok", Created: created, Expires: created.Add(time.Hour)}
	data, err := a.secretData("c1")
	require.NoError(t, err)
	cfg, err := clientcmd.Load(data[clustersv1alpha1.SecretKeyKubeconfig])
	require.NoError(t, err)
	assert.Equal(t, "c1", cfg.CurrentContext)
	assert.Equal(t, "https://127.0.0.1:6443", cfg.Clusters["c1"].Server)
	assert.Equal(t, []byte("ca"), cfg.Clusters["c1"].CertificateAuthorityData)
	assert.Equal(t, "tok", cfg.AuthInfos["c1"].Token)
	assert.Equal(t, "1700000000", string(data[clustersv1alpha1.SecretKeyCreationTimestamp]))
	assert.Equal(t, "1700003600", string(data[clustersv1alpha1.SecretKeyExpirationTimestamp]))

	secret := func(mutate func(s *corev1.Secret)) *corev1.Secret {
		d := map[string][]byte{}
		for k, v := range data {
			d[k] = v
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{AnnotationChecksum: checksum(d)}}, Data: d}
		if mutate != nil {
			mutate(s)
		}
		return s
	}
	tests := []struct {
		name   string
		secret *corev1.Secret
		host   string
		ca     string
		ok     bool
	}{
		{"as written", secret(nil), a.Host, "ca", true},
		{"missing", nil, a.Host, "ca", false},
		{"another cluster", secret(nil), "https://127.0.0.1:7443", "ca", false},
		{"the cluster created anew (a new CA)", secret(nil), a.Host, "new ca", false},
		{"a key edited", secret(func(s *corev1.Secret) { s.Data[clustersv1alpha1.SecretKeyToken] = []byte("x") }), a.Host, "ca", false},
		{"a key removed", secret(func(s *corev1.Secret) { delete(s.Data, clustersv1alpha1.SecretKeyKubeconfig) }), a.Host, "ca", false},
		{"a key added", secret(func(s *corev1.Secret) { s.Data["extra"] = nil }), a.Host, "ca", false},
		{"no checksum", secret(func(s *corev1.Secret) { s.Annotations = nil }), a.Host, "ca", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.ca != "ca" && tt.secret != nil, otherCA(tt.secret, []byte(tt.ca)), "otherCA")
			c, e, ok := validity(tt.secret, tt.host, []byte(tt.ca))
			assert.Equal(t, tt.ok, ok)
			if tt.ok {
				assert.True(t, c.Equal(created))
				assert.True(t, e.Equal(created.Add(time.Hour)))
			}
		})
	}
}

func TestRotationAndValidity(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	assert.Equal(t, now.Add(48*time.Minute), rotateAt(now, now.Add(time.Hour)))
	assert.Equal(t, now.Add(576*time.Hour), rotateAt(now, now.Add(720*time.Hour)))

	in := func(d time.Duration) *time.Time { t := now.Add(d); return &t }
	tests := []struct {
		name     string
		validity time.Duration
		ttlEnd   *time.Time
		want     time.Duration
	}{
		{"no TTL", 720 * time.Hour, nil, 720 * time.Hour},
		{"TTL later than the validity", time.Hour, in(2 * time.Hour), time.Hour},
		{"TTL sooner", 720 * time.Hour, in(8 * time.Hour), 8 * time.Hour},
		{"TTL sooner than the API's minimum", 720 * time.Hour, in(time.Minute), 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tokenValidity(now, tt.validity, tt.ttlEnd))
		})
	}
	ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(now)}}
	assert.Nil(t, ttlEnd(ar))
	ar.Spec.TTL = &metav1.Duration{Duration: time.Hour}
	assert.Equal(t, now.Add(time.Hour), *ttlEnd(ar))
}

func TestExplain(t *testing.T) {
	gr := schema.GroupResource{Group: rbacv1.GroupName, Resource: "roles"}
	invalid := apierrors.NewInvalid(schema.GroupKind{Group: rbacv1.GroupName, Kind: "Role"}, "r",
		field.ErrorList{field.Invalid(field.NewPath("rules"), "x", "bad rule")})
	tests := []struct {
		name, kind, namespace string
		err                   error
		reason                string
	}{
		{"invalid", "Role", "a", invalid, ReasonInvalidPermissions},
		{"namespace missing", "Role", "a", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "a"), ReasonNamespaceNotFound},
		{"unavailable: retried", "Role", "a", apierrors.NewServiceUnavailable("later"), ""},
		{"conflict: retried", "ClusterRole", "", apierrors.NewConflict(gr, "r", errors.New("x")), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := explain(tt.err, tt.kind, tt.namespace, "r")
			assert.Equal(t, tt.reason, kit.ReasonOf(err, ""), err.Error())
		})
	}
}

func TestTokenUID(t *testing.T) {
	enc := func(payload string) string {
		return "eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".sig"
	}
	for name, tt := range map[string]struct{ token, want string }{
		"a service-account token": {enc(`{"kubernetes.io":{"serviceaccount":{"name":"ar-x","uid":"6c1f7d1e"}}}`), "6c1f7d1e"},
		"no uid claim":            {enc(`{"sub":"system:serviceaccount:a:b"}`), ""},
		"not JSON":                {enc(`not json`), ""},
		"not base64":              {"a.!!!.c", ""},
		"not a JWT":               {"opaque", ""},
	} {
		t.Run(name, func(t *testing.T) { assert.Equal(t, tt.want, tokenUID(tt.token)) })
	}
}
