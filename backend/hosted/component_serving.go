package hosted

import (
	"context"
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// servingComponent reports whether the control plane serves: etcd has a quorum, the API server's
// Deployment is rolled out, the external endpoint is known and the API server's /readyz answers
// the operator. It starts the State (sc.st).
type servingComponent struct{}

func (servingComponent) name() string { return "serving" }

func (servingComponent) step(ctx context.Context, sc *scope) (result, error) {
	st, err := sc.b.observe(ctx, sc)
	sc.st = st
	if err != nil || st.Ready {
		return result{}, err
	}
	return result{waiting: st.Message}, nil
}

// baseState is the State of a control plane that does not serve yet: its endpoints, CA and info.
func (sc *scope) baseState() backend.State {
	s := sc.s
	st := backend.State{
		Endpoint: sc.external, Endpoints: map[string]string{clustersv1alpha1.APIServerEndpointInternal: internalURL(s.Namespace)},
		Info: fmt.Sprintf("hosted in namespace %s", s.Namespace), Reason: backend.ReasonStarting, RetryAfter: 10 * time.Second,
	}
	if sc.external != "" {
		st.Endpoints[backend.EndpointAPIServerExternal] = sc.external
	}
	if sc.ps.Seed != "" {
		st.Info += " of seed " + sc.ps.Seed
	}
	if sc.admin != nil {
		st.CABundle = sc.admin.CAData
	}
	return st
}

// observe reports the state of the workloads and probes the API server.
func (b *Backend) observe(ctx context.Context, sc *scope) (backend.State, error) {
	h, s, cfg := sc.h, sc.s, sc.admin
	st := sc.baseState()
	sts := &appsv1.StatefulSet{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts); err != nil {
		st.Message = fmt.Sprintf("etcd (StatefulSet %s/%s) is being made", s.Namespace, NameEtcd)
		return st, client.IgnoreNotFound(err)
	}
	dep := &appsv1.Deployment{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep); client.IgnoreNotFound(err) != nil {
		return st, err
	}
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods, client.InNamespace(s.Namespace)); err != nil {
		return st, err
	}
	members := s.replicas(ComponentEtcd)
	switch {
	case sts.Status.ObservedGeneration < sts.Generation || sts.Status.ReadyReplicas < members/2+1:
		st.Message = fmt.Sprintf("etcd (StatefulSet %s/%s) is not ready%s", s.Namespace, NameEtcd, podProblem(pods.Items, ComponentEtcd))
		if members > 1 {
			st.Message = fmt.Sprintf("etcd (StatefulSet %s/%s) has no quorum: %d of %d members ready%s", s.Namespace, NameEtcd,
				sts.Status.ReadyReplicas, members, podProblem(pods.Items, ComponentEtcd))
		}
		return st, nil
	case !serves(dep):
		st.Message = fmt.Sprintf("the API server (Deployment %s/%s) is not rolled out%s", s.Namespace, NameAPIServer, podProblem(pods.Items, ComponentAPIServer))
		return st, nil
	case sc.waiting != "":
		st.Message = sc.waiting
		return st, nil
	}
	sc.apiServes = true
	if cfg == nil {
		st.Message = "the operator has no credentials for the API server yet"
		return st, nil
	}
	if err := b.opts.Probe(ctx, cfg); err != nil {
		st.Message = fmt.Sprintf("the API server does not answer the operator on %s: %v", cfg.Host, err)
		st.RetryAfter = 5 * time.Second
		return st, nil
	}
	st.Ready, st.Reason, st.RetryAfter = true, backend.ReasonRunning, 0
	st.Message = fmt.Sprintf("the control plane in namespace %s serves on %s", s.Namespace, sc.external)
	if apis := s.replicas(ComponentAPIServer); sts.Status.ReadyReplicas < members || dep.Status.AvailableReplicas < apis {
		// Serving, but one more loss away from an outage: say so (a drained node, a pod starting).
		st.Message += fmt.Sprintf(", degraded: %d of %d etcd members and %d of %d API servers ready%s", sts.Status.ReadyReplicas, members,
			dep.Status.AvailableReplicas, apis, podProblem(pods.Items, ComponentEtcd)+podProblem(pods.Items, ComponentAPIServer))
		st.RetryAfter = 30 * time.Second
	}
	if v, err := b.opts.Version(ctx, cfg); err == nil {
		st.Version = v
	}
	return st, nil
}

// podProblem says why a component's pods do not run, from their conditions and container states.
func podProblem(pods []corev1.Pod, component string) string {
	for _, p := range pods {
		if p.Labels[LabelComponent] != component {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return fmt.Sprintf(": pod %s is not scheduled: %s", p.Name, c.Message)
			}
		}
		for _, c := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			if w := c.State.Waiting; w != nil && w.Reason != "" {
				return fmt.Sprintf(": container %s of pod %s waits: %s", c.Name, p.Name, w.Reason)
			}
			if c.LastTerminationState.Terminated != nil && !c.Ready {
				return fmt.Sprintf(": container %s of pod %s restarted %d times (last exit %d)", c.Name, p.Name, c.RestartCount, c.LastTerminationState.Terminated.ExitCode)
			}
		}
		if p.Status.Phase == corev1.PodPending {
			return fmt.Sprintf(": pod %s is Pending", p.Name)
		}
	}
	return ""
}
