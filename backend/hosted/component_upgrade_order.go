package hosted

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The order of an upgrade (or an image refresh) on the hosted backend, read from the host's cache
// only (no request in the steady state): etcd first, every member on the new image and ready
// (etcdRolledTo: the API servers wait for it); then the API servers, every replica on the new
// image and ready; then the controller manager (heldControllerManager); and the upgrade is done
// only when every pod of the three runs the new image, ready, and no old one still stops
// (rolledTo).

// controllerManagerImage is the controller manager's image of s.
func (s *Spec) controllerManagerImage() string {
	if s.ControllerManagerImage != "" {
		return s.ControllerManagerImage
	}
	return s.Image
}

// heldControllerManager is the image the controller manager of dep (the API server's Deployment)
// keeps while the API servers roll to s.Image: its current one until every API server runs
// s.Image, ready (apiServersWait); then "" (s.Image).
func heldControllerManager(ctx context.Context, h *host, s *Spec, dep *appsv1.Deployment) string {
	cur := containerImage(dep.Spec.Template.Spec, containerKCM)
	if cur == "" || cur == s.Image || apiServersWait(ctx, h, s, dep, s.Image) == "" {
		return ""
	}
	return cur
}

// containerImage is the image of the container (or init container) name of pod.
func containerImage(pod corev1.PodSpec, name string) string {
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		if c.Name == name {
			return c.Image
		}
	}
	return ""
}

// apiServersWait says why not every API server of dep runs image, ready ("": they do): its
// template runs image, it is rolled out with every replica ready, and no API server pod in the
// cache runs another kube-apiserver or still stops.
func apiServersWait(ctx context.Context, h *host, s *Spec, dep *appsv1.Deployment, image string) string {
	want := s.replicas(ComponentAPIServer)
	switch {
	case apiServerImage(dep) != image:
		return fmt.Sprintf("the API servers are to run %s", image)
	case !rolledOut(dep) || dep.Status.ReadyReplicas < want:
		return fmt.Sprintf("the API servers roll to %s (%d of %d replicas updated, %d ready)", image, dep.Status.UpdatedReplicas, want, dep.Status.ReadyReplicas)
	}
	return podsWait(ctx, h, s, ComponentAPIServer, containerAPIServer, image)
}

// podsWait says which pod of component in s's namespace (in the cache) runs another image than
// image in its container name, or still stops ("": none).
func podsWait(ctx context.Context, h *host, s *Spec, component, name, image string) string {
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels{LabelComponent: component}); err != nil {
		return fmt.Sprintf("the %s pods are not known yet (%v)", component, err)
	}
	for _, p := range pods.Items {
		switch got := containerImage(p.Spec, name); {
		case p.DeletionTimestamp != nil:
			return fmt.Sprintf("pod %s still stops", p.Name)
		case got != image:
			return fmt.Sprintf("pod %s runs %s %s", p.Name, name, got)
		}
	}
	return ""
}

// rolledTo says what of s does not run image yet ("": every pod of etcd, the API servers and the
// controller managers does, ready, and no other one still stops): when an upgrade is done.
func rolledTo(ctx context.Context, h *host, s *Spec, image string) string {
	if !etcdRolledTo(ctx, h, s, image) {
		return fmt.Sprintf("etcd rolls to %s", image)
	}
	if why := podsWait(ctx, h, s, ComponentEtcd, containerEtcd, image); why != "" {
		return why
	}
	dep := &appsv1.Deployment{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep); err != nil {
		return fmt.Sprintf("the API servers' Deployment is not known yet (%v)", err)
	}
	if why := apiServersWait(ctx, h, s, dep, image); why != "" {
		return why
	}
	if got := containerImage(dep.Spec.Template.Spec, containerKCM); got != image {
		return fmt.Sprintf("the controller manager is to run %s, after the API servers", image)
	}
	return podsWait(ctx, h, s, ComponentAPIServer, containerKCM, image)
}
