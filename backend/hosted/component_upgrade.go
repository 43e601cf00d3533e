package hosted

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend"
)

// upgradeComponent ends a roll: the turn of bounded rolling is given back once etcd and the API
// servers run their current templates, and an upgrade is done once every pod of etcd, the API
// servers and the controller managers runs the new image, ready, no old one still stops, and the
// API server answers the new version (rolledTo).
type upgradeComponent struct{}

func (upgradeComponent) name() string { return "upgrade" }

func (upgradeComponent) step(ctx context.Context, sc *scope) (result, error) {
	var r result
	kept := sc.etcdOut == workloadKept && sc.apiOut == workloadKept && !sc.apiGated
	if kept && rolledOutAll(ctx, sc.h, sc.s) {
		sc.b.endTurn(sc.cl.UID)
	}
	if sc.waitsTurn() {
		r.retry = rollRetry
	}
	ps := &sc.ps
	if ps.UpgradeFrom == "" || (sc.change != nil && sc.change.Refused) {
		return r, nil
	}
	why := "what was just written does not serve yet"
	if sc.etcdOut != workloadWritten && sc.apiOut != workloadWritten {
		why = rolledTo(ctx, sc.h, sc.s, sc.s.Image)
	}
	if why == "" && !(sc.st.Ready && backend.SameVersion(sc.st.Version, ps.Version)) {
		why = "the API server does not answer version " + ps.Version + " yet"
	}
	if why == "" {
		ps.UpgradeFrom = "" // done: every pod of etcd, the API servers and controller managers runs the new image, ready
		return r, nil
	}
	r.waiting = "upgrading from " + ps.UpgradeFrom + ": " + why
	r.retry = 5 * time.Second // a safety net besides the pods' watch
	return r, nil
}

// rollRetry is how soon a control plane waiting for its turn to roll is looked at again.
const rollRetry = 10 * time.Second

// rolledOutAll reports whether etcd's StatefulSet and the API server's Deployment of s run their
// current templates, ready.
func rolledOutAll(ctx context.Context, h *host, s *Spec) bool {
	sts, dep := &appsv1.StatefulSet{}, &appsv1.Deployment{}
	if h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts) != nil ||
		h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep) != nil {
		return false
	}
	return statefulSetDone(sts) && rolledOut(dep)
}

// takeTurn reports whether the control plane of uid may roll now: it rolls already, or fewer than
// MaxRolling do. A turn is held until its workloads are rolled out (endTurn).
func (b *Backend) takeTurn(uid types.UID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rolling[uid] {
		return true
	}
	if len(b.rolling) >= b.opts.MaxRolling {
		return false
	}
	b.rolling[uid] = true
	return true
}

// endTurn gives back the turn of uid, if it holds one.
func (b *Backend) endTurn(uid types.UID) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.rolling, uid)
}
