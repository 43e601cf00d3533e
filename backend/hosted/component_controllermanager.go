package hosted

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend"
)

// controllerManagerComponent reports the controller manager (a container of the API server's
// pods, made by apiServerComponent): running once a container has passed its startup probe
// while the API server serves.
type controllerManagerComponent struct{}

func (controllerManagerComponent) name() string { return "controller-manager" }

func (controllerManagerComponent) step(ctx context.Context, sc *scope) (result, error) {
	part := backend.Part{Type: backend.PartControllerManager, Reason: backend.ReasonStarting, Message: "kube-controller-manager has not started yet"}
	sc.st.SetPart(part)
	if !sc.apiServes {
		return result{waiting: part.Message}, nil
	}
	pods := &corev1.PodList{}
	if err := sc.h.cache.List(ctx, pods, client.InNamespace(sc.s.Namespace)); err != nil {
		return result{}, err
	}
	if !kcmReady(pods.Items) {
		return result{waiting: part.Message}, nil
	}
	part.Ready, part.Reason, part.Message = true, backend.ReasonRunning, "kube-controller-manager runs"
	sc.st.SetPart(part)
	return result{}, nil
}

// kcmReady reports whether a kube-controller-manager container runs and has passed its startup probe.
func kcmReady(pods []corev1.Pod) bool {
	for _, p := range pods {
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == containerKCM && c.Ready && p.DeletionTimestamp == nil {
				return true
			}
		}
	}
	return false
}
