package accessrequest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// FieldManager is the server-side apply field manager of every object this provider writes.
const FieldManager = "cluster-provider"

// target is the cluster an AccessRequest grants access to, reached as the provider's admin.
type target struct {
	cs kubernetes.Interface
}

// grant makes the cluster hold exactly what p asks for: the access namespace and the
// ServiceAccount (token plans), the permissions' namespaces and the (Cluster)Roles and bindings, each written
// with one server-side apply. Unless fresh (nothing was ever made for this request), objects of
// the request that p no longer asks for are deleted. Errors the user must fix carry a reason.
func (t target) grant(ctx context.Context, p plan, fresh bool) error {
	if err := p.check(); err != nil {
		return err
	}
	if sa := p.serviceAccount; sa != nil {
		if err := t.ensureNamespace(ctx, sa.Namespace); err != nil {
			return err
		}
		if err := t.apply(ctx, "ServiceAccount", sa.Namespace, sa.Name, sa); err != nil {
			return fmt.Errorf("applying ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
		}
	}
	for _, ns := range p.namespaces {
		if err := t.ensureNamespace(ctx, ns); err != nil {
			return err
		}
	}
	for _, o := range p.objects {
		if o.userNamed {
			if err := t.checkName(ctx, p.id, kindOf(o.obj), o.meta.Namespace, o.meta.Name); err != nil {
				return err
			}
		}
		if err := t.apply(ctx, kindOf(o.obj), o.meta.Namespace, o.meta.Name, o.obj); err != nil {
			return explain(err, kindOf(o.obj), o.meta.Namespace, o.meta.Name)
		}
	}
	if fresh {
		return nil
	}
	return t.prune(ctx, p.id, p.wants)
}

// revoke deletes everything made for the request with id; the ServiceAccount's deletion
// invalidates its tokens.
func (t target) revoke(ctx context.Context, id string) error {
	if err := t.prune(ctx, id, func(string, string, string) bool { return false }); err != nil {
		return err
	}
	sel := metav1.ListOptions{LabelSelector: LabelRequestID + "=" + id}
	sas, err := t.cs.CoreV1().ServiceAccounts("").List(ctx, sel)
	if err != nil {
		return fmt.Errorf("listing the ServiceAccounts of the request: %w", err)
	}
	for _, sa := range sas.Items {
		if err := t.cs.CoreV1().ServiceAccounts(sa.Namespace).Delete(ctx, sa.Name, metav1.DeleteOptions{}); client404(err) != nil {
			return fmt.Errorf("deleting ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
		}
	}
	return nil
}

// prune deletes the (Cluster)Roles and bindings of the request with id that keep does not want.
func (t target) prune(ctx context.Context, id string, keep func(kind, namespace, name string) bool) error {
	sel := metav1.ListOptions{LabelSelector: LabelRequestID + "=" + id}
	rbac := t.cs.RbacV1()
	var errs []error
	del := func(kind, ns, name string, err error) {
		if err = client404(err); err != nil {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", kind, qualified(ns, name), err))
		}
	}
	bindings, err := rbac.RoleBindings("").List(ctx, sel)
	if err != nil {
		return fmt.Errorf("listing the RoleBindings of the request: %w", err)
	}
	for _, o := range bindings.Items {
		if !keep("RoleBinding", o.Namespace, o.Name) {
			del("RoleBinding", o.Namespace, o.Name, rbac.RoleBindings(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}))
		}
	}
	cbindings, err := rbac.ClusterRoleBindings().List(ctx, sel)
	if err != nil {
		return fmt.Errorf("listing the ClusterRoleBindings of the request: %w", err)
	}
	for _, o := range cbindings.Items {
		if !keep("ClusterRoleBinding", "", o.Name) {
			del("ClusterRoleBinding", "", o.Name, rbac.ClusterRoleBindings().Delete(ctx, o.Name, metav1.DeleteOptions{}))
		}
	}
	roles, err := rbac.Roles("").List(ctx, sel)
	if err != nil {
		return fmt.Errorf("listing the Roles of the request: %w", err)
	}
	for _, o := range roles.Items {
		if !keep("Role", o.Namespace, o.Name) {
			del("Role", o.Namespace, o.Name, rbac.Roles(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}))
		}
	}
	croles, err := rbac.ClusterRoles().List(ctx, sel)
	if err != nil {
		return fmt.Errorf("listing the ClusterRoles of the request: %w", err)
	}
	for _, o := range croles.Items {
		if !keep("ClusterRole", "", o.Name) {
			del("ClusterRole", "", o.Name, rbac.ClusterRoles().Delete(ctx, o.Name, metav1.DeleteOptions{}))
		}
	}
	return errors.Join(errs...)
}

// token asks the TokenRequest API for a token of sa valid for d. It returns the token and when
// it expires, as the API server says.
func (t target) token(ctx context.Context, sa *corev1.ServiceAccount, d time.Duration) (string, time.Time, error) {
	tr, err := t.cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(d / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, fmt.Errorf("requesting a token of ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	return tr.Status.Token, tr.Status.ExpirationTimestamp.Time, nil
}

func (t target) ensureNamespace(ctx context.Context, name string) error {
	_, err := t.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}},
		metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return explain(fmt.Errorf("creating namespace %s: %w", name, err), "Namespace", "", name)
	}
	return nil
}

// checkName fails with ReasonNameConflict if an object of kind named namespace/name exists that
// was not made for the request with id.
func (t target) checkName(ctx context.Context, id, kind, namespace, name string) error {
	var m metav1.Object
	var err error
	rbac := t.cs.RbacV1()
	switch kind {
	case "Role":
		m, err = rbac.Roles(namespace).Get(ctx, name, metav1.GetOptions{})
	case "RoleBinding":
		m, err = rbac.RoleBindings(namespace).Get(ctx, name, metav1.GetOptions{})
	case "ClusterRole":
		m, err = rbac.ClusterRoles().Get(ctx, name, metav1.GetOptions{})
	case "ClusterRoleBinding":
		m, err = rbac.ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{})
	}
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s %s: %w", kind, qualified(namespace, name), err)
	case m.GetLabels()[LabelRequestID] == id:
		return nil
	case m.GetAnnotations()[AnnotationRequestName] != "":
		return kit.Errorf(ReasonNameConflict, "%s %s exists in the cluster and belongs to AccessRequest %s; choose another name in spec.token.permissions",
			kind, qualified(namespace, name), m.GetAnnotations()[AnnotationRequestName])
	default:
		return kit.Errorf(ReasonNameConflict, "%s %s exists in the cluster and was not made by this provider; choose another name in spec.token.permissions, or leave the name empty to have one generated",
			kind, qualified(namespace, name))
	}
}

// apply writes obj with a forced server-side apply.
func (t target) apply(ctx context.Context, kind, namespace, name string, obj any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: ptr.To(true)}
	rbac := t.cs.RbacV1()
	switch kind {
	case "ServiceAccount":
		_, err = t.cs.CoreV1().ServiceAccounts(namespace).Patch(ctx, name, types.ApplyPatchType, data, opts)
	case "Role":
		_, err = rbac.Roles(namespace).Patch(ctx, name, types.ApplyPatchType, data, opts)
	case "RoleBinding":
		_, err = rbac.RoleBindings(namespace).Patch(ctx, name, types.ApplyPatchType, data, opts)
	case "ClusterRole":
		_, err = rbac.ClusterRoles().Patch(ctx, name, types.ApplyPatchType, data, opts)
	case "ClusterRoleBinding":
		_, err = rbac.ClusterRoleBindings().Patch(ctx, name, types.ApplyPatchType, data, opts)
	default:
		err = fmt.Errorf("cannot apply kind %s", kind)
	}
	return err
}

// missing says what of p the cluster no longer holds ("ServiceAccount openmcp-access/ar-x, ClusterRoleBinding y"),
// or "" when everything is there: a cluster restored from an older state, replaced, or tampered
// with. For a token plan, token is the token the request's Secret holds: a ServiceAccount of the
// same name made anew (another UID) counts as missing, since that token no longer authenticates.
func (t target) missing(ctx context.Context, p plan, token string) (string, error) {
	var gone []string
	check := func(kind, namespace, name string, get func() (metav1.Object, error)) error {
		obj, err := get()
		switch {
		case apierrors.IsNotFound(err):
			gone = append(gone, kind+" "+qualified(namespace, name))
		case err != nil:
			return fmt.Errorf("reading %s %s: %w", kind, qualified(namespace, name), err)
		case kind == "ServiceAccount" && token != "" && tokenUID(token) != "" && tokenUID(token) != string(obj.GetUID()):
			gone = append(gone, kind+" "+qualified(namespace, name)+" (made anew since the token was issued)")
		}
		return nil
	}
	if sa := p.serviceAccount; sa != nil {
		if err := check("ServiceAccount", sa.Namespace, sa.Name, func() (metav1.Object, error) {
			return t.cs.CoreV1().ServiceAccounts(sa.Namespace).Get(ctx, sa.Name, metav1.GetOptions{})
		}); err != nil {
			return "", err
		}
	}
	rbac := t.cs.RbacV1()
	for _, o := range p.objects {
		ns, name := o.meta.Namespace, o.meta.Name
		var get func() (metav1.Object, error)
		switch kindOf(o.obj) {
		case "Role":
			get = func() (metav1.Object, error) { return rbac.Roles(ns).Get(ctx, name, metav1.GetOptions{}) }
		case "RoleBinding":
			get = func() (metav1.Object, error) { return rbac.RoleBindings(ns).Get(ctx, name, metav1.GetOptions{}) }
		case "ClusterRole":
			get = func() (metav1.Object, error) { return rbac.ClusterRoles().Get(ctx, name, metav1.GetOptions{}) }
		case "ClusterRoleBinding":
			get = func() (metav1.Object, error) { return rbac.ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{}) }
		default:
			continue
		}
		if err := check(kindOf(o.obj), ns, name, get); err != nil {
			return "", err
		}
	}
	return strings.Join(gone, ", "), nil
}

// tokenUID is the ServiceAccount UID a service-account token names, or "" (it does not read).
// The token is not verified: it is the provider's own, read from its Secret.
func tokenUID(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		Kubernetes struct {
			ServiceAccount struct {
				UID string `json:"uid"`
			} `json:"serviceaccount"`
		} `json:"kubernetes.io"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return ""
	}
	return claims.Kubernetes.ServiceAccount.UID
}

// explain gives an error of the cluster's API server about an object of the request the reason
// the user must act on: an invalid object, or a namespace that does not exist.
func explain(err error, kind, namespace, name string) error {
	switch {
	case apierrors.IsInvalid(err) || apierrors.IsBadRequest(err):
		return kit.Errorf(ReasonInvalidPermissions, "the cluster rejected %s %s: %s; fix spec.token", kind, qualified(namespace, name), apiMessage(err))
	case apierrors.IsNotFound(err) && namespace != "":
		return kit.Errorf(ReasonNamespaceNotFound, "namespace %s does not exist in the cluster and its automatic creation is disabled (disableAutomaticNamespaceCreation); create it, or enable its creation", namespace)
	case apierrors.IsForbidden(err) && kind == "Namespace":
		return kit.Errorf(ReasonInvalidPermissions, "the cluster refused to create namespace %s: %s", name, apiMessage(err))
	}
	return fmt.Errorf("applying %s %s: %w", kind, qualified(namespace, name), err)
}

func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Message
	}
	return err.Error()
}

func qualified(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
