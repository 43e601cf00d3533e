package hosted

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// apiServerComponent applies the API server's Deployment (kube-apiserver, the controller manager
// and the audit sidecar). It depends on etcd: a new Deployment is made once etcd serves (started
// before, the API server gives up on etcd after 20 s and the kubelet's crash-loop backoff, up to
// 5 minutes, would delay it long after etcd is up), and a new image (an upgrade, an image
// refresh) rolls only once every etcd member runs the new image, ready: etcd first. Any other
// change (certificates, keys, resources) applies whatever etcd does.
type apiServerComponent struct{}

func (apiServerComponent) name() string { return "apiserver" }

func (apiServerComponent) step(ctx context.Context, sc *scope) (result, error) {
	h, s := sc.h, sc.s
	dep := &appsv1.Deployment{}
	err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep)
	switch {
	case apierrors.IsNotFound(err):
		if !etcdReady(ctx, h, s) {
			sc.apiGated = true
			return result{waiting: "the API server waits for etcd"}, nil
		}
	case err != nil:
		return result{}, err
	case apiServerImage(dep) != s.Image && !etcdRolledTo(ctx, h, s, s.Image):
		sc.apiGated = true
		return result{waiting: fmt.Sprintf("the API server waits for etcd to run %s", s.Image)}, nil
	}
	out, err := h.applyPlanned(ctx, s.APIServerDeployment(), sc.turn)
	if err != nil {
		return result{}, err
	}
	sc.apiOut = out
	return result{}, nil
}

// apiServerImage is the image of the kube-apiserver container of dep.
func apiServerImage(dep *appsv1.Deployment) string {
	for _, c := range append(dep.Spec.Template.Spec.InitContainers, dep.Spec.Template.Spec.Containers...) {
		if c.Name == containerAPIServer {
			return c.Image
		}
	}
	return ""
}

// rolledOut reports whether every replica of dep runs its current template and one is available.
func rolledOut(dep *appsv1.Deployment) bool {
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	return dep.Status.ObservedGeneration >= dep.Generation && dep.Status.UpdatedReplicas >= want &&
		dep.Status.AvailableReplicas >= want && dep.Status.Replicas == dep.Status.UpdatedReplicas
}

// serves reports whether dep runs its current template only, with an API server available: a
// highly available control plane that lost one serves while its replacement starts.
func serves(dep *appsv1.Deployment) bool {
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	return dep.Status.ObservedGeneration >= dep.Generation && dep.Status.UpdatedReplicas >= want &&
		dep.Status.AvailableReplicas >= 1 && dep.Status.Replicas == dep.Status.UpdatedReplicas
}

// oldAPIServers reports whether an API server pod of s is still terminating: it serves its
// shutdown delay (and its version) after the rollout has counted it out.
func oldAPIServers(ctx context.Context, h *host, s *Spec) bool {
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels{LabelComponent: ComponentAPIServer}); err != nil {
		return true
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			return true
		}
	}
	return false
}
