package e2e

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
)

// orderWatch observes a hosted control plane's pods and its Cluster while it upgrades from image
// prev to image cur (TestHostedUpgradeOnKind), every orderEvery, and keeps what breaks the order
// of an upgrade: a controller manager on the new image while an etcd or API server pod (even one
// that stops) runs the old one; the upgrade declared done (VersionUpToDate True at the new
// version) while a pod runs the old image.
type orderWatch struct {
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}

	mu sync.Mutex
	// broken are the observations that break the order (the first few).
	broken []string
	// looks counts the observations; held those in which an API server ran the new image
	// beside a controller manager of the old one (the order's middle step, seen).
	looks, held int
}

const orderEvery = 100 * time.Millisecond

// watchUpgradeOrder starts an orderWatch of cl's control plane, whose Cluster's version label
// moves to cur.
func watchUpgradeOrder(c client.Client, cl *clustersv1alpha1.Cluster, prev, cur, curVersion string) *orderWatch {
	w := &orderWatch{stop: make(chan struct{}), done: make(chan struct{})}
	ns, key := hosted.NamespaceFor(cl.UID), client.ObjectKeyFromObject(cl)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(orderEvery)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			pods := &corev1.PodList{}
			seen := &clustersv1alpha1.Cluster{}
			// The Cluster first, then its pods: a Cluster seen done while pods seen after it still
			// run the old image is a broken order, never a race of the two reads.
			cerr := c.Get(ctx, key, seen)
			perr := c.List(ctx, pods, client.InNamespace(ns))
			cancel()
			if perr == nil && cerr == nil {
				// Done: VersionUpToDate True at the new version. The version label alone says what
				// the API server answers, which is the new version once one new API server serves.
				done := seen.Labels[clustersv1alpha1.K8sVersionLabel] == curVersion &&
					meta.IsStatusConditionTrue(seen.Status.Conditions, cluster.ConditionVersionUpToDate)
				w.look(pods.Items, done, prev, cur)
			}
		}
	}()
	return w
}

// look checks one observation of the pods; moved: the Cluster says the upgrade is done
// (VersionUpToDate True at the new version).
func (w *orderWatch) look(pods []corev1.Pod, moved bool, prev, cur string) {
	var oldCore, newKCM, oldAny, newAPI, oldKCM []string
	for _, p := range pods {
		images := map[string]string{}
		for _, ctr := range append(p.Spec.InitContainers, p.Spec.Containers...) {
			images[ctr.Name] = ctr.Image
		}
		if images["etcd"] == prev || images["kube-apiserver"] == prev {
			oldCore = append(oldCore, p.Name)
		}
		for _, image := range images {
			if image == prev {
				oldAny = append(oldAny, p.Name)
				break
			}
		}
		switch {
		case images["kube-controller-manager"] == cur:
			newKCM = append(newKCM, p.Name)
		case images["kube-controller-manager"] == prev:
			oldKCM = append(oldKCM, p.Name)
		}
		if images["kube-apiserver"] == cur {
			newAPI = append(newAPI, p.Name)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.looks++
	if len(newAPI) > 0 && len(oldKCM) > 0 {
		w.held++
	}
	if len(newKCM) > 0 && len(oldCore) > 0 {
		w.note(fmt.Sprintf("controller manager on %s in %v while %v run etcd or kube-apiserver %s", cur, newKCM, oldCore, prev))
	}
	if moved && len(oldAny) > 0 {
		w.note(fmt.Sprintf("the Cluster says the upgrade is done while %v run %s", oldAny, prev))
	}
}

func (w *orderWatch) note(s string) {
	if len(w.broken) < 10 {
		w.broken = append(w.broken, s)
	}
}

// end stops the watch and returns what it saw.
func (w *orderWatch) end() (broken []string, looks, held int) {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.broken, w.looks, w.held
}
