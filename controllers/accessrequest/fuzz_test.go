package accessrequest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// The fuzz targets below take the parts of an AccessRequest a user writes as JSON, as the API
// server would hand them over, and check the pure steps between that input and what is written
// into a cluster: no panic, every rejection carries a reason and names the field to fix, and
// what is accepted keeps every permission the user asked for. `make fuzz` runs them.

// tokenSeeds are spec.token values: valid, duplicate names, bad names and kinds.
var tokenSeeds = []string{
	`{"permissions":[{"rules":[{"apiGroups":[""],"resources":["namespaces"],"verbs":["get","list"]}]}]}`,
	`{"permissions":[{"name":"reader","namespace":"team","rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":["*"]}]}],"roleRefs":[{"kind":"ClusterRole","name":"view"}]}`,
	`{"permissions":[{"name":"r","namespace":"a","rules":[]},{"name":"r","namespace":"a","rules":[{"verbs":["get"]}]}]}`,
	`{"permissions":[{"name":"a/b"},{"namespace":"Not_A_Label"}]}`,
	`{"roleRefs":[{"kind":"Role","name":"edit"},{"kind":"Secret","name":"x","namespace":"n"},{"kind":"ClusterRole","name":""}]}`,
	`{"permissions":[{"name":".."},{"name":"%"}]}`,
}

func FuzzTokenPlan(f *testing.F) {
	for _, s := range tokenSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, spec []byte) {
		var tok clustersv1alpha1.TokenConfig
		if json.Unmarshal(spec, &tok) != nil {
			return
		}
		ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "fuzz"},
			Spec: clustersv1alpha1.AccessRequestSpec{Token: &tok}}
		id := RequestID("env", "provider", ar.Namespace, ar.Name)
		p := planToken(ar, id, "openmcp-access")
		if !requireChecked(t, p, "spec.token.", "openmcp:permission:", tok.Permissions) {
			return
		}
		for _, o := range p.objects {
			if o.meta.Labels[LabelRequestID] != id {
				t.Fatalf("%s %s lacks the request's ID label", kindOf(o.obj), o.meta.Name)
			}
		}
	})
}

// oidcSeeds are spec.oidc values.
var oidcSeeds = []string{
	`{"name":"idp","issuer":"https://idp.example.com","clientID":"c","roleBindings":[{"subjects":[{"kind":"User","name":"alice"}],"roleRefs":[{"kind":"ClusterRole","name":"r"}]}],"roles":[{"name":"r","rules":[{"verbs":["get"],"resources":["pods"],"apiGroups":[""]}]}]}`,
	`{"name":"system","issuer":"https://idp.example.com","clientID":"c"}`,
	`{"name":"idp","issuer":"http://idp.example.com","clientID":"c","usernamePrefix":"system:"}`,
	`{"name":"idp","issuer":"https://idp.example.com","clientID":"c","usernameClaim":"","groupsClaim":"a b","groupsPrefix":"-"}`,
	`{"name":"idp","issuer":"https://idp.example.com/other","clientID":"","roles":[{"name":"x","namespace":"n"},{"name":"x","namespace":"n"}]}`,
	`{"name":"i","issuer":"https://[::1]:99999","clientID":"c","roleBindings":[{"subjects":[{"kind":"Group","name":"system:masters"}],"roleRefs":[{"kind":"Role","name":"r"}]}]}`,
}

func FuzzOIDC(f *testing.F) {
	for _, s := range oidcSeeds {
		f.Add([]byte(s), "https://idp.example.com")
	}
	f.Fuzz(func(t *testing.T, spec []byte, allowed string) {
		var o clustersv1alpha1.OIDCConfig
		if json.Unmarshal(spec, &o) != nil {
			return
		}
		ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "fuzz"},
			Spec: clustersv1alpha1.AccessRequestSpec{OIDC: &o}}
		c := oidcConfig(ar)
		settings := &providersv1alpha1.OIDCSettings{AllowedIssuers: []string{allowed}}
		if err := checkOIDC(c, settings); err != nil {
			if r := kit.ReasonOf(err, ""); r != ReasonInvalidOIDC && r != ReasonIssuerNotAllowed {
				t.Fatalf("rejection without a user-facing reason (%q): %v", r, err)
			}
			return
		}
		for _, prefix := range []string{c.UsernamePrefix, c.GroupsPrefix} {
			if strings.HasPrefix(prefix, systemPrefix) {
				t.Fatalf("accepted prefix %q maps names into system:", prefix)
			}
		}
		if err := validateJWT(jwtAuthenticator(c, []string{c.ClientID}, "")); err != nil {
			requireRejection(t, err, ReasonInvalidOIDC, "the cluster's API server would reject spec.oidc")
			return
		}
		p := planOIDC(ar, c, RequestID("env", "provider", ar.Namespace, ar.Name))
		if !requireChecked(t, p, "spec.oidc.", "openmcp:oidc-role:", o.Roles) {
			return
		}
		for _, obj := range p.objects {
			var subjects []rbacv1.Subject
			switch b := obj.obj.(type) {
			case *rbacv1.RoleBinding:
				subjects = b.Subjects
			case *rbacv1.ClusterRoleBinding:
				subjects = b.Subjects
			}
			for _, s := range subjects {
				if (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) && strings.HasPrefix(s.Name, systemPrefix) {
					t.Fatalf("%s binds %s %q: OIDC subjects must never name Kubernetes' own users and groups", obj.field, s.Kind, s.Name)
				}
			}
		}
	})
}

// requireChecked checks p: a rejection must carry ReasonInvalidPermissions and start with field;
// an accepted plan must write no object twice and keep the rules of every permission (unnamed
// ones get generated+<id>:<index>). It reports whether p was accepted.
func requireChecked(t *testing.T, p plan, field, generated string, perms []clustersv1alpha1.PermissionsRequest) bool {
	t.Helper()
	if err := p.check(); err != nil {
		requireRejection(t, err, ReasonInvalidPermissions, field)
		return false
	}
	requireUnique(t, p)
	for i, perm := range perms {
		name := perm.Name
		if name == "" {
			name = fmt.Sprintf("%s%s:%d", generated, p.id, i)
		}
		requireRules(t, p, perm.Namespace, name, perm.Rules)
	}
	return true
}

// requireRejection fails unless err carries reason and its message starts with the field (or
// text) that tells the user what to fix.
func requireRejection(t *testing.T, err error, reason, prefix string) {
	t.Helper()
	if r := kit.ReasonOf(err, ""); r != reason {
		t.Fatalf("rejection with reason %q, want %q: %v", r, reason, err)
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("rejection %q does not start with %q: the user cannot tell what to fix", err, prefix)
	}
}

// requireUnique fails if two objects of p are the same object of the cluster.
func requireUnique(t *testing.T, p plan) {
	t.Helper()
	seen := map[string]bool{}
	for _, o := range p.objects {
		key := kindOf(o.obj) + "/" + o.meta.Namespace + "/" + o.meta.Name
		if seen[key] {
			t.Fatalf("accepted plan writes %s twice", key)
		}
		seen[key] = true
	}
}

// requireRules fails unless p has the role namespace/name with exactly rules.
func requireRules(t *testing.T, p plan, namespace, name string, rules []rbacv1.PolicyRule) {
	t.Helper()
	for _, o := range p.objects {
		if o.meta.Namespace != namespace || o.meta.Name != name {
			continue
		}
		switch r := o.obj.(type) {
		case *rbacv1.Role:
			if reflect.DeepEqual(r.Rules, rules) {
				return
			}
		case *rbacv1.ClusterRole:
			if reflect.DeepEqual(r.Rules, rules) {
				return
			}
		}
	}
	t.Fatalf("accepted plan lost the rules of %s/%s", namespace, name)
}

// TestPlanCheck: what check refuses, and how it says so.
func TestPlanCheck(t *testing.T) {
	tests := map[string]struct {
		token string
		want  string // "" for accepted
	}{
		"valid":              {tokenSeeds[1], ""},
		"generated names":    {tokenSeeds[0], ""},
		"duplicate name":     {tokenSeeds[2], "spec.token.permissions[1]: Role a/r is also made by spec.token.permissions[0]"},
		"bad name":           {`{"permissions":[{"name":"a/b"}]}`, `spec.token.permissions[0]: ClusterRole name "a/b" is not valid`},
		"bad namespace":      {`{"permissions":[{"name":"r","namespace":"Not_A_Label"}]}`, `spec.token.permissions[0]: namespace "Not_A_Label" is not valid`},
		"Role without ns":    {`{"roleRefs":[{"kind":"Role","name":"edit"}]}`, `spec.token.roleRefs[0]: Role "edit" needs a namespace`},
		"unknown kind":       {`{"roleRefs":[{"kind":"Secret","name":"x","namespace":"n"}]}`, `spec.token.roleRefs[0]: kind "Secret" cannot be bound`},
		"no role name":       {`{"roleRefs":[{"kind":"ClusterRole","name":""}]}`, `spec.token.roleRefs[0]: the ClusterRole to bind has no name`},
		"Role and binding":   {`{"permissions":[{"name":"x","namespace":"n"}],"roleRefs":[{"kind":"ClusterRole","name":"view","namespace":"n"}]}`, ""},
		"same name, two ns":  {`{"permissions":[{"name":"r","namespace":"a"},{"name":"r","namespace":"b"}]}`, ""},
		"same name, cluster": {`{"permissions":[{"name":"r"},{"name":"r","namespace":"b"}]}`, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var tok clustersv1alpha1.TokenConfig
			if err := json.Unmarshal([]byte(tt.token), &tok); err != nil {
				t.Fatal(err)
			}
			ar := &clustersv1alpha1.AccessRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "x"}, Spec: clustersv1alpha1.AccessRequestSpec{Token: &tok}}
			p := planToken(ar, "id", "openmcp-access")
			err := p.check()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want == "":
			case err == nil:
				t.Fatalf("accepted, want %q", tt.want)
			case !strings.HasPrefix(err.Error(), tt.want):
				t.Fatalf("got %q, want it to start with %q", err, tt.want)
			default:
				requireRejection(t, err, ReasonInvalidPermissions, "spec.token.")
			}
		})
	}
}
