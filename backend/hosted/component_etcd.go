package hosted

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// etcdComponent applies etcd's StatefulSet (a change rolls it in its turn, bounded rolling) and
// reports whether etcd is healthy at the planned image: what the API servers wait for.
type etcdComponent struct{}

func (etcdComponent) name() string { return "etcd" }

func (etcdComponent) step(ctx context.Context, sc *scope) (result, error) {
	out, err := sc.h.applyPlanned(ctx, sc.s.EtcdStatefulSet(), sc.turn)
	if err != nil {
		return result{}, err
	}
	sc.etcdOut = out
	if out == workloadWaits {
		return result{waiting: "etcd waits for its turn to roll", retry: rollRetry}, nil
	}
	if !etcdReady(ctx, sc.h, sc.s) {
		return result{waiting: fmt.Sprintf("etcd (StatefulSet %s/%s) is not ready", sc.s.Namespace, NameEtcd)}, nil
	}
	return result{}, nil
}

// turn reports whether the control plane may roll now (takeTurn): a restore rolls at once, it is
// not one of a fleet's changes.
func (sc *scope) turn() bool {
	return sc.ps.Restore != nil || sc.b.takeTurn(sc.cl.UID)
}

// etcdReady reports whether etcd's StatefulSet has a ready replica.
func etcdReady(ctx context.Context, h *host, s *Spec) bool {
	sts := &appsv1.StatefulSet{}
	return h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts) == nil && sts.Status.ReadyReplicas > 0
}

// etcdRolledTo reports whether every etcd member of s runs image, rolled out and ready: an
// upgrade's API servers roll only then.
func etcdRolledTo(ctx context.Context, h *host, s *Spec, image string) bool {
	sts := &appsv1.StatefulSet{}
	if h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts) != nil {
		return false
	}
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == containerEtcd && c.Image != image {
			return false
		}
	}
	return statefulSetDone(sts)
}

// statefulSetDone reports whether sts runs its current template on every replica, ready.
func statefulSetDone(sts *appsv1.StatefulSet) bool {
	want := int32(1)
	if sts.Spec.Replicas != nil {
		want = *sts.Spec.Replicas
	}
	return sts.Status.ObservedGeneration >= sts.Generation && sts.Status.ReadyReplicas >= want &&
		(sts.Status.UpdateRevision == "" || sts.Status.UpdateRevision == sts.Status.CurrentRevision)
}
