package manager

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// routerFixture is an engine with profiles "a" and "b" routed for the cluster kind, without
// workers, so the tests can look into the queues.
func routerFixture(preds ...predicate.Predicate) (*router, map[string]*controller) {
	k := testKinds()[0]
	k.Predicates = preds
	e := &Engine{routes: map[string]map[string]*controller{k.Name: {}}}
	ctrls := map[string]*controller{}
	for _, p := range []string{"a", "b"} {
		c := newController(p, k.Name, nil, workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](), logr.Discard())
		ctrls[p] = c
		e.routes[k.Name][p] = c
	}
	return &router{engine: e, kind: &k}, ctrls
}

func cluster(name, profile string, generation int64) *clustersv1alpha1.Cluster {
	return &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: generation},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile},
	}
}

func TestRouter(t *testing.T) {
	tests := []struct {
		name  string
		preds []predicate.Predicate
		event func(r *router)
		want  map[string]int // queue length per profile
	}{
		{
			name:  "add goes to the owner only",
			event: func(r *router) { r.OnAdd(cluster("x", "a", 1), false) },
			want:  map[string]int{"a": 1, "b": 0},
		},
		{
			name:  "add of an unknown profile goes nowhere",
			event: func(r *router) { r.OnAdd(cluster("x", "zzz", 1), false) },
			want:  map[string]int{"a": 0, "b": 0},
		},
		{
			name:  "add with an empty key goes nowhere",
			event: func(r *router) { r.OnAdd(cluster("x", "", 1), false) },
			want:  map[string]int{"a": 0, "b": 0},
		},
		{
			name:  "update within one profile",
			event: func(r *router) { r.OnUpdate(cluster("x", "b", 1), cluster("x", "b", 2)) },
			want:  map[string]int{"a": 0, "b": 1},
		},
		{
			name:  "update filtered by a predicate",
			preds: []predicate.Predicate{predicate.GenerationChangedPredicate{}},
			event: func(r *router) { r.OnUpdate(cluster("x", "b", 1), cluster("x", "b", 1)) },
			want:  map[string]int{"a": 0, "b": 0},
		},
		{
			name:  "key move reaches new and old owner, even past predicates",
			preds: []predicate.Predicate{predicate.GenerationChangedPredicate{}},
			event: func(r *router) { r.OnUpdate(cluster("x", "a", 1), cluster("x", "b", 1)) },
			want:  map[string]int{"a": 1, "b": 1},
		},
		{
			name:  "key appears",
			event: func(r *router) { r.OnUpdate(cluster("x", "", 1), cluster("x", "a", 1)) },
			want:  map[string]int{"a": 1, "b": 0},
		},
		{
			name:  "delete",
			event: func(r *router) { r.OnDelete(cluster("x", "a", 1)) },
			want:  map[string]int{"a": 1, "b": 0},
		},
		{
			name: "delete seen only as a tombstone",
			event: func(r *router) {
				r.OnDelete(toolscache.DeletedFinalStateUnknown{Key: "ns/x", Obj: cluster("x", "b", 1)})
			},
			want: map[string]int{"a": 0, "b": 1},
		},
		{
			name:  "objects that are no client.Object are ignored",
			event: func(r *router) { r.OnAdd("not an object", false); r.OnDelete(42) },
			want:  map[string]int{"a": 0, "b": 0},
		},
		{
			name: "repeated events of one object are merged by the queue",
			event: func(r *router) {
				r.OnAdd(cluster("x", "a", 1), false)
				r.OnUpdate(cluster("x", "a", 1), cluster("x", "a", 2))
			},
			want: map[string]int{"a": 1, "b": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, ctrls := routerFixture(tt.preds...)
			tt.event(r)
			for p, n := range tt.want {
				assert.Equal(t, n, ctrls[p].queue.Len(), "queue of profile %s", p)
			}
		})
	}
}

func TestKeyedMutex(t *testing.T) {
	var k keyedMutex
	unlockA := k.lock("a")
	// Another key does not wait.
	unlockB := k.lock("b")
	unlockB()
	done := make(chan struct{})
	go func() {
		unlock := k.lock("a")
		unlock()
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a second lock of the same key did not wait")
	default:
	}
	unlockA()
	<-done
	k.mu.Lock()
	defer k.mu.Unlock()
	assert.Empty(t, k.locks, "released keys are forgotten")
}
