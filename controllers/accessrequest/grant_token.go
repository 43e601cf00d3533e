package accessrequest

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// grantToken grants a spec.token request: the RBAC plan (unless granted already), then a token
// into the Secret when it is missing, edited or due for rotation.
func (r *Reconciler) grantToken(ctx context.Context, g *grant) (reconcile.Result, error) {
	ar := g.ar
	created, expires, valid := validity(g.secret, g.host, g.cfg.CAData)
	pl := planToken(ar, g.id, r.Options.Namespace)
	if g.granted && valid && g.now.Before(rotateAt(created, expires)) {
		if Hibernated(g.cl) {
			// Nothing changes in a cluster while no process of it runs: checked when it wakes
			// (its status changes), rotated when due (that wakes it).
			res, err := r.granted(ctx, g, grantedMessage(ar, expires))
			res.RequeueAfter = rotateAt(created, expires).Sub(g.now)
			return res, err
		}
		still, err := r.stillGranted(ctx, g, pl, string(g.secret.Data[clustersv1alpha1.SecretKeyToken]))
		if err != nil {
			return r.retry(ctx, ar, g.base, err)
		}
		if still {
			res, err := r.granted(ctx, g, grantedMessage(ar, expires))
			res.RequeueAfter = min(rotateAt(created, expires).Sub(g.now), r.Options.GrantCheck)
			return res, err
		}
		valid = false // a new token: the old one names a ServiceAccount that is gone
	}
	t, err := r.target(g.cfg)
	if err != nil {
		return r.retry(ctx, ar, g.base, err)
	}
	if !g.granted {
		if err := t.grant(ctx, pl, g.fresh); err != nil {
			return r.grantFailed(ctx, ar, g.base, err)
		}
	}
	a := tokenAccess{Host: g.host, CA: g.cfg.CAData, Created: g.now}
	token, exp, err := t.token(ctx, pl.serviceAccount, tokenValidity(g.now, r.Options.TokenValidity, ttlEnd(ar)))
	if err != nil {
		return r.retry(ctx, ar, g.base, err)
	}
	a.Token, a.Expires = token, exp
	if end := ttlEnd(ar); end != nil && end.Before(exp) {
		a.Expires = *end
	}
	data, err := a.secretData(ar.Spec.ClusterRef.Name)
	if err == nil {
		err = r.writeSecret(ctx, ar, data)
	}
	if err != nil {
		return r.retry(ctx, ar, g.base, err)
	}
	switch {
	case !g.granted:
		metricTokens.WithLabelValues("grant").Inc()
		log.FromContext(ctx).Info("Granted token access", "cluster", clusterKey(ar), "serviceAccount", pl.serviceAccount.Namespace+"/"+pl.serviceAccount.Name, "expires", a.Expires)
	case valid:
		metricTokens.WithLabelValues("rotation").Inc()
		log.FromContext(ctx).Info("Rotated the token", "expires", a.Expires)
		r.Event(ar, corev1.EventTypeNormal, "TokenRotated", "Rotate", "A new token valid until %s replaced the old one in Secret %s", a.Expires.UTC().Format(time.RFC3339), SecretName(ar.Name))
	default:
		metricTokens.WithLabelValues("restore").Inc()
		r.secretRestored(ctx, ar)
	}
	res, err := r.granted(ctx, g, grantedMessage(ar, a.Expires))
	res.RequeueAfter = min(rotateAt(a.Created, a.Expires).Sub(g.now), r.Options.GrantCheck)
	return res, err
}

func (r *Reconciler) secretRestored(ctx context.Context, ar *clustersv1alpha1.AccessRequest) {
	log.FromContext(ctx).Info("Restored the kubeconfig Secret", "secret", SecretName(ar.Name))
	r.Event(ar, corev1.EventTypeNormal, "SecretRestored", "Restore", "Secret %s was missing or edited; it is written anew", SecretName(ar.Name))
}
