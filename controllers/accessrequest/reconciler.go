package accessrequest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/keymutex"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=accessrequests,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=clusters.openmcp.cloud,resources=accessrequests/status,verbs=get;patch;update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;patch;update;delete

// retryNamespace is how soon a request waiting for a namespace in the cluster (which the
// provider cannot watch) is looked at again.
const retryNamespace = 30 * time.Second

// Reconciler reconciles the AccessRequests of one ClusterProfile.
type Reconciler struct {
	kit.ProfileScope
	// Options are shared by every profile; set them WithDefaults.
	Options Options

	discoveryOnce sync.Once
	issuers       *discoveryCache

	// trustLocks serialize, per Cluster, the computing and writing of its trusted issuers: with
	// several workers, two requests of one Cluster must not write the file from different views.
	trustLocksOnce sync.Once
	trustLocks     keymutex.KeyMutex
}

// Reconcile answers one prepared AccessRequest; a lost optimistic-lock race is retried quietly.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return kit.QuietConflict(r.reconcile(ctx, req))
}

func (r *Reconciler) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ar := &clustersv1alpha1.AccessRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, ar); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if r.Profile == "" || ProfileOf(ar, r.ProviderName) != r.Profile || !handles(ar) {
		return reconcile.Result{}, nil
	}
	full := kit.OperationOf(ar) == kit.OperationReconcile
	if stop, err := kit.HandleOperation(ctx, r.Client, ar); stop || err != nil {
		return reconcile.Result{}, err
	}
	if !ar.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, ar)
	}
	return r.reconcileNormal(ctx, ar, full)
}

// reconcileNormal grants ar, or says why it is not granted: the checks every request shares, then
// grantToken or grantOIDC. A Granted request whose spec did not change is not granted again;
// full (the reconcile annotation) applies everything again.
func (r *Reconciler) reconcileNormal(ctx context.Context, ar *clustersv1alpha1.AccessRequest, full bool) (reconcile.Result, error) {
	base := ar.DeepCopy()
	now := r.Options.Clock.Now()
	if end := ttlEnd(ar); end != nil && !now.Before(*end) {
		return r.deny(ctx, ar, base, ReasonExpired, fmt.Sprintf("spec.ttl ended at %s; the AccessRequest is deleted", end.UTC().Format(time.RFC3339)))
	}
	cl, err := r.cluster(ctx, ar)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case cl == nil || !cl.DeletionTimestamp.IsZero():
		return r.deny(ctx, ar, base, ReasonClusterGone, fmt.Sprintf("Cluster %s does not exist or is being deleted", clusterKey(ar)))
	case cl.Spec.Profile != r.Profile:
		// The labels are the user's to set too: they never decide which profile's rules
		// (allowedIssuers, the trust of the Cluster's API server) apply to a Cluster.
		return r.deny(ctx, ar, base, ReasonProfileMismatch, fmt.Sprintf(
			"the request is labelled for profile %s, but Cluster %s belongs to profile %s; remove the labels %s and %s and the labeller sets them right",
			r.Profile, clusterKey(ar), cl.Spec.Profile, clustersv1alpha1.ProviderLabel, clustersv1alpha1.ProfileLabel))
	case cl.Status.Phase != common.PhaseReady && grantedForGeneration(ar):
		// A granted access outlives a restart of the cluster's processes; the Cluster watch
		// brings the request back when the Cluster is Ready again.
		return reconcile.Result{}, nil
	case cl.Status.Phase != common.PhaseReady:
		// The Cluster watch brings the request back when the Cluster becomes Ready.
		return r.pending(ctx, ar, base, ReasonClusterNotReady, fmt.Sprintf("waiting for Cluster %s to be Ready (phase %q)", clusterKey(ar), cl.Status.Phase))
	case r.Backend == nil:
		return r.pending(ctx, ar, base, ReasonBackendUnavailable, fmt.Sprintf("backend %q of profile %s does not run in this operator", r.BackendName, r.Profile))
	}

	g := &grant{ar: ar, cl: cl, now: now, fresh: !controllerutil.ContainsFinalizer(ar, kit.Finalizer(r.ProviderName)),
		id: RequestID(r.Options.Environment, r.ProviderName, ar.Namespace, ar.Name)}
	// The Secret is checked first: one the request does not control is never written, and nothing
	// is made in the cluster for a request that cannot have its Secret.
	if g.secret, err = r.secret(ctx, ar); err != nil {
		return reconcile.Result{}, err
	}
	if res, stop, err := r.checkSecretOwner(ctx, ar, base, g.secret); stop {
		return res, err
	}
	if err := kit.AddFinalizer(ctx, r.Client, ar, kit.Finalizer(r.ProviderName)); err != nil {
		return reconcile.Result{}, err
	}
	g.base = ar.DeepCopy()
	if g.cfg, err = r.Backend.AdminConfig(ctx, cl); err != nil {
		return r.retry(ctx, ar, g.base, fmt.Errorf("reaching the cluster: %w", err))
	}
	g.host = clientHost(cl, g.cfg)
	if g.secret, err = r.confirmSecret(ctx, g.secret, g.host, g.cfg.CAData); err != nil {
		return reconcile.Result{}, err
	}
	// The Secret records the generation it was granted for, and is written before the status: a
	// reconcile that reads a Secret the informer delivered, but a request from before the status
	// write, does not grant a second time, and a grant cut off between the two writes is finished
	// by writing the status.
	recreated := otherCA(g.secret, g.cfg.CAData)
	if recreated {
		log.FromContext(ctx).Info("The Cluster's cluster was created anew (its data was lost); granting the access again", "cluster", clusterKey(ar))
		r.Event(ar, corev1.EventTypeWarning, ReasonClusterRecreated, "Grant",
			"Cluster %s was created anew, empty (its data was lost): the access is granted again and Secret %s gets a new kubeconfig; the old one no longer works",
			clusterKey(ar), SecretName(ar.Name))
	}
	g.granted = !full && !recreated && (grantedForGeneration(ar) ||
		intact(g.secret, g.host, g.cfg.CAData) && g.secret.Annotations[AnnotationGeneration] == strconv.FormatInt(ar.Generation, 10))
	if ar.Spec.OIDC != nil {
		return r.grantOIDC(ctx, g)
	}
	return r.grantToken(ctx, g)
}

// grant is one pass of reconcileNormal past the shared checks.
type grant struct {
	ar, base *clustersv1alpha1.AccessRequest
	cl       *clustersv1alpha1.Cluster
	now      time.Time
	// id is the request's RequestID.
	id string
	// fresh: nothing was ever made for the request (it had no finalizer).
	fresh bool
	// cfg reaches the cluster as the provider's admin. Never logged.
	cfg *rest.Config
	// host is the API server URL the request's kubeconfig names (clientHost).
	host string
	// secret is the request's kubeconfig Secret, or nil.
	secret *corev1.Secret
	// granted: the request's current spec is granted already; only the Secret may need work.
	granted bool
}

// clientHost is the API server URL for the users of a Cluster: its status.apiServer (a backend's
// external endpoint), or where the provider itself reaches it when the status has none yet. The
// two differ where the provider reaches the API server on an internal address (hosted: the
// Service inside the host cluster) that users outside cannot.
func clientHost(cl *clustersv1alpha1.Cluster, admin *rest.Config) string {
	if cl.Status.APIServer != "" {
		return cl.Status.APIServer
	}
	return admin.Host
}

// stillGranted reports whether the cluster holds everything of p, made for the granted request of
// g (token: the one its Secret holds). Where it does not, it says what is gone (an Event) and
// marks g not granted: the caller grants it again.
func (r *Reconciler) stillGranted(ctx context.Context, g *grant, p plan, token string) (bool, error) {
	t, err := r.target(g.cfg)
	if err != nil {
		return false, err
	}
	gone, err := t.missing(ctx, p, token)
	if err != nil || gone == "" {
		return err == nil, err
	}
	log.FromContext(ctx).Info("What was granted is gone from the cluster; granting it again", "cluster", clusterKey(g.ar), "gone", gone)
	r.Event(g.ar, corev1.EventTypeWarning, ReasonGrantLost, "Grant",
		"%s gone from Cluster %s (restored, replaced or changed by hand): the access is granted again; Secret %s gets a new kubeconfig if its old one no longer works",
		gone, clusterKey(g.ar), SecretName(g.ar.Name))
	g.granted = false
	return false, nil
}

// granted writes the Granted status (and, on a change of phase, its Event).
func (r *Reconciler) granted(ctx context.Context, g *grant, message string) (reconcile.Result, error) {
	return r.writeStatus(ctx, g.ar, g.base, func() { setGranted(g.ar, SecretName(g.ar.Name), message) })
}

func grantedMessage(ar *clustersv1alpha1.AccessRequest, expires time.Time) string {
	return fmt.Sprintf("Secret %s holds a kubeconfig for Cluster %s, valid until %s", SecretName(ar.Name), clusterKey(ar), expires.UTC().Format(time.RFC3339))
}

// reconcileDelete revokes the access in the cluster (the ServiceAccount's deletion invalidates its
// tokens), deletes the Secret and removes the finalizer. A Cluster that is gone or being deleted
// takes everything with it: the finalizer goes without waiting.
func (r *Reconciler) reconcileDelete(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (reconcile.Result, error) {
	finalizer := kit.Finalizer(r.ProviderName)
	if !controllerutil.ContainsFinalizer(ar, finalizer) {
		return reconcile.Result{}, nil
	}
	cl, err := r.cluster(ctx, ar)
	if err != nil {
		return reconcile.Result{}, err
	}
	// A Cluster that is gone or being deleted takes the access with it: nothing is left to revoke.
	// Otherwise the access is revoked before the finalizer goes, however long the cluster is
	// unreachable: the request says why it waits and is looked at again every retryRevoke (and
	// at once when the Cluster becomes Ready); deleting the Cluster releases it.
	if cl != nil && cl.DeletionTimestamp.IsZero() {
		switch {
		case r.Backend == nil:
			return r.revokeLater(ctx, ar, ReasonBackendUnavailable, fmt.Sprintf(
				"backend %q of profile %s does not run in this operator: the access to Cluster %s cannot be revoked yet", r.BackendName, r.Profile, clusterKey(ar)))
		case cl.Status.Phase != common.PhaseReady:
			return r.revokeLater(ctx, ar, ReasonRevoking, fmt.Sprintf(
				"waiting for Cluster %s to be Ready (phase %q) to revoke the access", clusterKey(ar), cl.Status.Phase))
		}
		cfg, err := r.Backend.AdminConfig(ctx, cl)
		if err != nil {
			return r.revokeLater(ctx, ar, ReasonRevoking, fmt.Sprintf("reaching Cluster %s to revoke the access: %v", clusterKey(ar), err))
		}
		t, err := r.target(cfg)
		if err != nil {
			return reconcile.Result{}, err
		}
		if err := t.revoke(ctx, RequestID(r.Options.Environment, r.ProviderName, ar.Namespace, ar.Name)); err != nil {
			return reconcile.Result{}, fmt.Errorf("revoking the access: %w", err)
		}
		if ar.Spec.OIDC != nil {
			applied, err := r.revokeOIDC(ctx, cl, ar)
			if err != nil {
				return reconcile.Result{}, fmt.Errorf("revoking the trust in issuer %s: %w", ar.Spec.OIDC.Issuer, err)
			}
			if !applied {
				res, err := r.pending(ctx, ar, ar.DeepCopy(), ReasonRevoking, fmt.Sprintf("the API server of Cluster %s is loading its authentication configuration without this request", clusterKey(ar)))
				res.RequeueAfter = retryAuthConfig
				return res, err
			}
		}
	}
	// Only the request's own Secret goes; one of that name it does not control is left alone.
	secret, err := r.secret(ctx, ar)
	if err != nil {
		return reconcile.Result{}, err
	}
	if secret != nil && metav1.IsControlledBy(secret, ar) {
		err := r.Client.Delete(ctx, secret, client.Preconditions{UID: &secret.UID})
		if client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting Secret %s: %w", secret.Name, err)
		}
	}
	if err := kit.RemoveFinalizer(ctx, r.Client, ar, finalizer); err != nil {
		return reconcile.Result{}, err
	}
	log.FromContext(ctx).Info("Revoked the access", "cluster", clusterKey(ar))
	r.Event(ar, corev1.EventTypeNormal, "Revoked", "Revoke", "The access to Cluster %s is revoked", clusterKey(ar))
	return reconcile.Result{}, nil
}

// retryRevoke is how often a deleted request whose access cannot be revoked yet is looked at
// again.
const retryRevoke = 30 * time.Second

// revokeLater keeps the deleted request ar, and its finalizer, with a Pending status that says why
// its access is not revoked yet and how it is released, and looks at it again after retryRevoke.
func (r *Reconciler) revokeLater(ctx context.Context, ar *clustersv1alpha1.AccessRequest, reason, why string) (reconcile.Result, error) {
	res, err := r.pending(ctx, ar, ar.DeepCopy(), reason, why+fmt.Sprintf("; retried every %s, and deleting the Cluster releases the request", retryRevoke))
	if err == nil {
		res.RequeueAfter = retryRevoke
	}
	return res, err
}

// grantFailed reports an error of granting: one the user must fix denies the request (a missing
// namespace or an issuer that does not answer keeps it Pending and looks again later); any other
// is retried with backoff.
func (r *Reconciler) grantFailed(ctx context.Context, ar, base *clustersv1alpha1.AccessRequest, err error) (reconcile.Result, error) {
	switch reason := kit.ReasonOf(err, ""); reason {
	case ReasonNamespaceNotFound:
		res, serr := r.pending(ctx, ar, base, reason, err.Error())
		res.RequeueAfter = retryNamespace
		return res, serr
	case ReasonIssuerUnreachable:
		res, serr := r.pending(ctx, ar, base, reason, err.Error())
		res.RequeueAfter = retryIssuer
		return res, serr
	case "":
		return r.retry(ctx, ar, base, err)
	default:
		return r.deny(ctx, ar, base, reason, err.Error())
	}
}

// retry keeps ar Pending with ReasonGrantFailed and returns err for a retry with backoff.
func (r *Reconciler) retry(ctx context.Context, ar, base *clustersv1alpha1.AccessRequest, err error) (reconcile.Result, error) {
	_, serr := r.writeStatus(ctx, ar, base, func() { setPending(ar, ReasonGrantFailed, err.Error()) })
	return reconcile.Result{}, errors.Join(err, serr)
}

func (r *Reconciler) pending(ctx context.Context, ar, base *clustersv1alpha1.AccessRequest, reason, message string) (reconcile.Result, error) {
	return r.writeStatus(ctx, ar, base, func() { setPending(ar, reason, message) })
}

func (r *Reconciler) deny(ctx context.Context, ar, base *clustersv1alpha1.AccessRequest, reason, message string) (reconcile.Result, error) {
	return r.writeStatus(ctx, ar, base, func() { setDenied(ar, reason, message) })
}

// writeStatus applies set to ar, emits an Event when the phase changes and writes the status
// with one locked patch against base.
func (r *Reconciler) writeStatus(ctx context.Context, ar, base *clustersv1alpha1.AccessRequest, set func()) (reconcile.Result, error) {
	set()
	if ar.Status.Phase != base.Status.Phase {
		access := "token"
		if ar.Spec.OIDC != nil {
			access = "oidc"
		}
		metricAnswers.WithLabelValues(access, ar.Status.Phase, grantedCondition(ar).Reason).Inc()
		switch c := grantedCondition(ar); ar.Status.Phase {
		case common.PhaseGranted:
			r.Event(ar, corev1.EventTypeNormal, ReasonGranted, "Grant", "%s", c.Message)
		case common.PhaseDenied:
			r.Event(ar, corev1.EventTypeWarning, c.Reason, "Grant", "Denied: %s", c.Message)
		}
	}
	if err := kit.PatchStatusIfChanged(ctx, r.Client, base, ar, statusOf); err != nil {
		return reconcile.Result{}, fmt.Errorf("writing the status: %w", err)
	}
	return reconcile.Result{}, nil
}

// grantedCondition is ar's Granted condition (the zero condition if it has none).
func grantedCondition(ar *clustersv1alpha1.AccessRequest) metav1.Condition {
	if c := meta.FindStatusCondition(ar.Status.Conditions, ConditionGranted); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// cluster returns ar's Cluster from the cache, or nil if it does not exist.
func (r *Reconciler) cluster(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (*clustersv1alpha1.Cluster, error) {
	if ar.Spec.ClusterRef == nil {
		return nil, nil
	}
	cl := &clustersv1alpha1.Cluster{}
	if err := r.Client.Get(ctx, ClusterKeyOf(ar), cl); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading Cluster %s: %w", clusterKey(ar), err)
	}
	return cl, nil
}

// secret returns ar's kubeconfig Secret, from the cache or else (Options.SecretReader) the API
// server, or nil.
func (r *Reconciler) secret(ctx context.Context, ar *clustersv1alpha1.AccessRequest) (*corev1.Secret, error) {
	key := client.ObjectKey{Namespace: ar.Namespace, Name: SecretName(ar.Name)}
	s := &corev1.Secret{}
	err := r.Client.Get(ctx, key, s)
	if apierrors.IsNotFound(err) && r.Options.SecretReader != nil {
		err = r.Options.SecretReader.Get(ctx, key, s) // an unlabelled Secret is not in the cache
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s: %w", SecretName(ar.Name), err)
	}
	return s, nil
}

// confirmSecret returns the API server's version of s when the cache's is not intact (edited, or
// written for another cluster): the cache may not have delivered the provider's own last write
// yet, and a grant that rewrote that stale version would issue a token twice. An intact Secret,
// or no SecretReader, returns s as it is; nil when the Secret is gone.
func (r *Reconciler) confirmSecret(ctx context.Context, s *corev1.Secret, host string, ca []byte) (*corev1.Secret, error) {
	if s == nil || r.Options.SecretReader == nil || intact(s, host, ca) {
		return s, nil
	}
	fresh := &corev1.Secret{}
	err := r.Options.SecretReader.Get(ctx, client.ObjectKeyFromObject(s), fresh)
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s: %w", s.Name, err)
	}
	return fresh, nil
}

// retrySecretOfPrevious is how soon a request looks again at a Secret of its name left by an
// earlier AccessRequest of the same name, which the garbage collector is about to delete.
const retrySecretOfPrevious = 5 * time.Second

// checkSecretOwner stops the grant (stop true, with the result to return) when ar's kubeconfig
// Secret exists and is not controlled by ar: one left by a deleted AccessRequest of the same name
// (its owner reference names it, with another UID) keeps ar Pending until the garbage collector
// deletes it; any other is someone else's, never written or deleted, and ar is Denied with a
// reason that names it.
func (r *Reconciler) checkSecretOwner(ctx context.Context, ar, base *clustersv1alpha1.AccessRequest, s *corev1.Secret) (res reconcile.Result, stop bool, err error) {
	if s == nil || metav1.IsControlledBy(s, ar) {
		return reconcile.Result{}, false, nil
	}
	if owner := metav1.GetControllerOf(s); owner != nil && owner.Kind == "AccessRequest" && owner.Name == ar.Name && owner.UID != ar.UID &&
		strings.HasPrefix(owner.APIVersion, clustersv1alpha1.GroupVersion.Group+"/") {
		res, err = r.pending(ctx, ar, base, ReasonSecretConflict, fmt.Sprintf(
			"Secret %s/%s belongs to an earlier AccessRequest %s (UID %s); waiting for the garbage collector to delete it", s.Namespace, s.Name, ar.Name, owner.UID))
		res.RequeueAfter = retrySecretOfPrevious
		return res, true, err
	}
	log.FromContext(ctx).Info("Not granting: the kubeconfig Secret's name is taken by a Secret this request does not control", "secret", s.Namespace+"/"+s.Name)
	res, err = r.deny(ctx, ar, base, ReasonSecretConflict, fmt.Sprintf(
		"Secret %s/%s exists and was not made for this AccessRequest; it is left untouched. Delete or rename that Secret, then change the request's spec or create it again",
		s.Namespace, s.Name))
	return res, true, err
}

// writeSecret writes data into ar's kubeconfig Secret with one server-side apply, owned by ar and
// marked with its checksum and ar's generation.
func (r *Reconciler) writeSecret(ctx context.Context, ar *clustersv1alpha1.AccessRequest, data map[string][]byte) error {
	gvk := clustersv1alpha1.GroupVersion.WithKind("AccessRequest")
	ac := corev1ac.Secret(SecretName(ar.Name), ar.Namespace).
		WithLabels(map[string]string{LabelManagedBy: ManagedByValue, clustersv1alpha1.ProviderLabel: r.ProviderName}).
		WithAnnotations(map[string]string{AnnotationChecksum: checksum(data), AnnotationGeneration: strconv.FormatInt(ar.Generation, 10)}).
		WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(gvk.GroupVersion().String()).WithKind(gvk.Kind).
			WithName(ar.Name).WithUID(ar.UID).WithController(true)).
		WithType(corev1.SecretTypeOpaque).
		WithData(data)
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("writing Secret %s: %w", SecretName(ar.Name), err)
	}
	return nil
}

// ClusterKeyOf is the key of ar's Cluster: spec.clusterRef, in ar's namespace when it names none.
func ClusterKeyOf(ar *clustersv1alpha1.AccessRequest) client.ObjectKey {
	if ar.Spec.ClusterRef == nil {
		return client.ObjectKey{}
	}
	return ar.Spec.ClusterRef.Key(ar.Namespace)
}

func clusterKey(ar *clustersv1alpha1.AccessRequest) string { return ClusterKeyOf(ar).String() }

// ProfileOf returns the profile an AccessRequest was prepared for, if the central labeller
// assigned it to providerName (provider label equal to providerName and a profile label set);
// else "". Only such AccessRequests are this provider's to answer.
func ProfileOf(ar client.Object, providerName string) string {
	l := ar.GetLabels()
	if l[clustersv1alpha1.ProviderLabel] != providerName {
		return ""
	}
	return l[clustersv1alpha1.ProfileLabel]
}

func statusOf(ar *clustersv1alpha1.AccessRequest) any { return ar.Status }
