package accessrequest

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Labels and annotations on the objects this provider creates in a cluster for an AccessRequest.
// The ID label finds them again (spec changes, deletion); namespace and name say whose they are.
const (
	// LabelRequestID holds RequestID of the AccessRequest.
	LabelRequestID = "accessrequest.clusters.openmcp.cloud/id"
	// LabelRequestNamespace holds the AccessRequest's namespace.
	LabelRequestNamespace = "accessrequest.clusters.openmcp.cloud/namespace"
	// LabelRequestName holds the AccessRequest's name, or its hash when it is longer than a label
	// value may be; AnnotationRequestName always holds it whole.
	LabelRequestName = "accessrequest.clusters.openmcp.cloud/name"
	// LabelRequestUID holds the AccessRequest's UID: an object of a request deleted and made
	// again under the same name (a restore can bring it back) is told from the new one's. Objects
	// made before the label existed have none.
	LabelRequestUID = "accessrequest.clusters.openmcp.cloud/uid"
	// AnnotationRequestName holds the AccessRequest's namespace/name.
	AnnotationRequestName = "accessrequest.clusters.openmcp.cloud/request"
	// LabelManagedBy marks the objects of this operator: in clusters, and the kubeconfig Secrets
	// in the platform cluster (the operator caches only Secrets with this label).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedByValue is LabelManagedBy's value.
	ManagedByValue = "cluster-provider.openmcp.cloud"
)

// RequestID is a stable name part for an AccessRequest: a hash of the environment, the provider
// and the request's namespace and name, 26 lower-case letters and digits. The same request of
// the same provider always gets the same objects, so a grant interrupted and done again neither
// duplicates nor orphans anything.
func RequestID(environment, provider, namespace, name string) string {
	sum := sha256.Sum256([]byte(environment + "\x00" + provider + "\x00" + namespace + "\x00" + name))
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:16]))
}

// plan is what a request asks for in the cluster: the objects, labelled with its RequestID.
type plan struct {
	// id is the RequestID.
	id string
	// labels go on every object.
	labels map[string]string
	// annotations go on every object.
	annotations map[string]string
	// serviceAccount is the identity the token belongs to; nil in OIDC plans.
	serviceAccount *corev1.ServiceAccount
	// namespaces are the permissions' namespaces to create if missing.
	namespaces []string
	// objects are the (Cluster)Roles and (Cluster)RoleBindings, roles before their bindings.
	objects []object
}

// object is one object a plan makes the cluster hold (render): typed, with its TypeMeta set.
// userNamed objects carry a name the user chose: such a name may already be taken by an object
// of someone else.
type object struct {
	obj       client.Object // *rbacv1.Role, *rbacv1.ClusterRole, *rbacv1.RoleBinding, *rbacv1.ClusterRoleBinding, *corev1.ServiceAccount, *corev1.Namespace
	meta      *metav1.ObjectMeta
	userNamed bool
	// field is the part of the spec the object comes from, e.g. spec.token.permissions[1]; empty
	// for the namespaces and the ServiceAccount.
	field string
}

// planToken builds the plan of ar's spec.token for the ServiceAccount in accessNamespace.
func planToken(ar *clustersv1alpha1.AccessRequest, id, accessNamespace string) plan {
	p := plan{id: id, labels: requestLabels(ar, id), annotations: map[string]string{AnnotationRequestName: ar.Namespace + "/" + ar.Name}}
	p.serviceAccount = &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: p.meta("ar-"+id, accessNamespace),
	}
	subjects := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: p.serviceAccount.Name, Namespace: accessNamespace}}
	tok := ar.Spec.Token
	for i, perm := range tok.Permissions {
		name := perm.Name
		if name == "" {
			name = fmt.Sprintf("openmcp:permission:%s:%d", id, i)
		}
		f := fmt.Sprintf("spec.token.permissions[%d]", i)
		p.role(f, name, perm, perm.Name != "")
		kind := "ClusterRole"
		if perm.Namespace != "" {
			kind = "Role"
		}
		p.bind(f, name, perm.Namespace, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: name}, subjects, perm.Name != "")
	}
	for i, ref := range tok.RoleRefs {
		p.bind(fmt.Sprintf("spec.token.roleRefs[%d]", i), fmt.Sprintf("openmcp:roleref:%s:%d", id, i), ref.Namespace, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: ref.Kind, Name: ref.Name}, subjects, false)
	}
	return p
}

// role adds the (Cluster)Role named name of perm: a Role in perm's namespace (which is created
// unless perm opts out), a ClusterRole without one.
func (p *plan) role(field, name string, perm clustersv1alpha1.PermissionsRequest, userNamed bool) {
	if perm.Namespace == "" {
		r := &rbacv1.ClusterRole{TypeMeta: typeMeta("ClusterRole"), ObjectMeta: p.meta(name, ""), Rules: perm.Rules}
		p.add(field, r, &r.ObjectMeta, userNamed)
		return
	}
	if !perm.DisableAutomaticNamespaceCreation && !slices.Contains(p.namespaces, perm.Namespace) {
		p.namespaces = append(p.namespaces, perm.Namespace)
	}
	r := &rbacv1.Role{TypeMeta: typeMeta("Role"), ObjectMeta: p.meta(name, perm.Namespace), Rules: perm.Rules}
	p.add(field, r, &r.ObjectMeta, userNamed)
}

// bind adds a binding named name of roleRef to subjects: a RoleBinding in namespace, a
// ClusterRoleBinding without one.
func (p *plan) bind(field, name, namespace string, roleRef rbacv1.RoleRef, subjects []rbacv1.Subject, userNamed bool) {
	if namespace == "" {
		b := &rbacv1.ClusterRoleBinding{TypeMeta: typeMeta("ClusterRoleBinding"), ObjectMeta: p.meta(name, ""), Subjects: subjects, RoleRef: roleRef}
		p.add(field, b, &b.ObjectMeta, userNamed)
		return
	}
	b := &rbacv1.RoleBinding{TypeMeta: typeMeta("RoleBinding"), ObjectMeta: p.meta(name, namespace), Subjects: subjects, RoleRef: roleRef}
	p.add(field, b, &b.ObjectMeta, userNamed)
}

func (p *plan) add(field string, obj client.Object, m *metav1.ObjectMeta, userNamed bool) {
	p.objects = append(p.objects, object{obj: obj, meta: m, userNamed: userNamed, field: field})
}

// check returns, with ReasonInvalidPermissions, what the user must fix before any of the plan is
// written: a name or namespace the cluster would refuse, a binding to a kind that cannot be bound
// there, or two parts of the spec that would make the same object (the second would silently
// replace the first's rules). It names the fields.
func (p *plan) check() error {
	seen := map[string]string{} // kind/namespace/name -> field
	for _, o := range p.objects {
		kind, ns, name := kindOf(o.obj), o.meta.Namespace, o.meta.Name
		if msgs := path.IsValidPathSegmentName(name); len(msgs) > 0 {
			return kit.Errorf(ReasonInvalidPermissions, "%s: %s name %q is not valid: %s", o.field, kind, name, strings.Join(msgs, "; "))
		}
		if ns != "" {
			if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
				return kit.Errorf(ReasonInvalidPermissions, "%s: namespace %q is not valid: %s", o.field, ns, strings.Join(msgs, "; "))
			}
		}
		if ref := roleRefOf(o.obj); ref != nil {
			switch {
			case ref.Kind != "ClusterRole" && ref.Kind != "Role":
				return kit.Errorf(ReasonInvalidPermissions, "%s: kind %q cannot be bound; use Role or ClusterRole", o.field, ref.Kind)
			case ref.Kind == "Role" && ns == "":
				return kit.Errorf(ReasonInvalidPermissions, "%s: Role %q needs a namespace (a Role is bound in its own namespace); set namespace, or use a ClusterRole", o.field, ref.Name)
			}
			if ref.Name == "" {
				return kit.Errorf(ReasonInvalidPermissions, "%s: the %s to bind has no name", o.field, ref.Kind)
			}
			if msgs := path.IsValidPathSegmentName(ref.Name); len(msgs) > 0 {
				return kit.Errorf(ReasonInvalidPermissions, "%s: %s name %q is not valid: %s", o.field, ref.Kind, ref.Name, strings.Join(msgs, "; "))
			}
		}
		key := kind + "/" + qualified(ns, name)
		if first, dup := seen[key]; dup {
			return kit.Errorf(ReasonInvalidPermissions, "%s: %s %s is also made by %s, and one would replace the other; give each its own name or namespace", o.field, kind, qualified(ns, name), first)
		}
		seen[key] = o.field
	}
	return nil
}

// roleRefOf is the role a binding binds; nil for other objects.
func roleRefOf(obj client.Object) *rbacv1.RoleRef {
	switch b := obj.(type) {
	case *rbacv1.RoleBinding:
		return &b.RoleRef
	case *rbacv1.ClusterRoleBinding:
		return &b.RoleRef
	}
	return nil
}

func (p *plan) meta(name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: p.labels, Annotations: p.annotations}
}

// render is everything the plan makes the cluster hold, as one list in the order it is written:
// the namespaces (the ServiceAccount's, then the permissions', each once), the ServiceAccount,
// then the roles and their bindings.
func (p plan) render() []object {
	var list []object
	namespace := func(name string) {
		if slices.ContainsFunc(list, func(o object) bool { return o.meta.Name == name }) {
			return
		}
		ns := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: name}}
		list = append(list, object{obj: ns, meta: &ns.ObjectMeta})
	}
	sa := p.serviceAccount
	if sa != nil {
		namespace(sa.Namespace)
	}
	for _, ns := range p.namespaces {
		namespace(ns)
	}
	if sa != nil {
		list = append(list, object{obj: sa, meta: &sa.ObjectMeta})
	}
	return append(list, p.objects...)
}

// wants reports whether the plan renders an object of kind named namespace/name.
func (p *plan) wants(kind, namespace, name string) bool {
	return slices.ContainsFunc(p.render(), func(o object) bool {
		return kindOf(o.obj) == kind && o.meta.Namespace == namespace && o.meta.Name == name
	})
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
}

// kindOf is obj's kind, as its TypeMeta says.
func kindOf(obj client.Object) string { return obj.GetObjectKind().GroupVersionKind().Kind }

// requestLabels are the labels of every object made for ar.
func requestLabels(ar *clustersv1alpha1.AccessRequest, id string) map[string]string {
	name := ar.Name
	if len(validation.IsValidLabelValue(name)) > 0 {
		name = id // longer than 63 characters: the annotation holds it
	}
	l := map[string]string{
		LabelManagedBy:        ManagedByValue,
		LabelRequestID:        id,
		LabelRequestNamespace: ar.Namespace,
		LabelRequestName:      name,
	}
	if ar.UID != "" {
		l[LabelRequestUID] = string(ar.UID)
	}
	return l
}

// SecretName is the name of the kubeconfig Secret of the AccessRequest named name:
// "<name>.kubeconfig", shortened with a hash of name when that is longer than a Secret name may be.
func SecretName(name string) string {
	const suffix = ".kubeconfig"
	if len(name)+len(suffix) <= validation.DNS1123SubdomainMaxLength {
		return name + suffix
	}
	sum := sha256.Sum256([]byte(name))
	hash := strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:5]))
	keep := validation.DNS1123SubdomainMaxLength - len(suffix) - len(hash) - 1
	return strings.TrimRight(name[:keep], ".-") + "-" + hash + suffix
}
