package manager

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestWatch maps ConfigMap events to the AccessRequests they name (profile and name in the
// ConfigMap's data): mapped targets reach the running profile's reconciler, targets of a profile
// that does not run reach nobody, and the watch's predicates filter before Map.
func TestWatch(t *testing.T) {
	e := startEngine(t, nil, Options{Watches: []Watch{{
		Name:   "configmap-to-accessrequest",
		Object: &corev1.ConfigMap{},
		Kind:   "accessrequest",
		Predicates: []predicate.Predicate{predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectNew.GetLabels()["mapped"] == "yes"
		}}},
		Map: func(_ context.Context, o client.Object) []Target {
			cm := o.(*corev1.ConfigMap)
			if cm.Data["profile"] == "" {
				return nil
			}
			return []Target{{Profile: cm.Data["profile"], Request: reconcile.Request{NamespacedName: types.NamespacedName{Namespace: cm.Namespace, Name: cm.Data["name"]}}}}
		},
	}}})
	ctx := context.Background()
	ns := env.Namespace(t)
	p, stopped := uniqueProfile("watched"), uniqueProfile("not-running")
	rec := newRecorder("P")
	require.NoError(t, e.StartProfile(ctx, profileOf(p, "1", nil, rec)))

	toStopped := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "to-stopped"}, Data: map[string]string{"profile": stopped, "name": "nobody"}}
	require.NoError(t, env.Client.Create(ctx, toStopped))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm"}, Data: map[string]string{"profile": p, "name": "created"}}
	require.NoError(t, env.Client.Create(ctx, cm))
	waitSeen(t, rec, types.NamespacedName{Namespace: ns, Name: "created"})

	// An update the predicate filters is not mapped; one it passes is.
	cm.Data["name"] = "filtered"
	require.NoError(t, env.Client.Update(ctx, cm))
	cm.Data["name"], cm.Labels = "updated", map[string]string{"mapped": "yes"}
	require.NoError(t, env.Client.Update(ctx, cm))
	waitSeen(t, rec, types.NamespacedName{Namespace: ns, Name: "updated"})
	assert.Zero(t, rec.count(types.NamespacedName{Namespace: ns, Name: "filtered"}))

	updated := types.NamespacedName{Namespace: ns, Name: "updated"}
	before := rec.count(updated)
	require.NoError(t, env.Client.Delete(ctx, cm))
	require.Eventually(t, func() bool { return rec.count(updated) > before }, 30*time.Second, 5*time.Millisecond, "the deletion is mapped")
	assert.Zero(t, rec.count(types.NamespacedName{Namespace: ns, Name: "nobody"}), "a profile that does not run gets nothing")
}

func TestWatchValidation(t *testing.T) {
	ctx := context.Background()
	c, err := cache.New(env.Config, cache.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	for name, w := range map[string]Watch{
		"no Map":       {Name: "w", Object: &corev1.ConfigMap{}, Kind: "cluster"},
		"unknown kind": {Name: "w", Object: &corev1.ConfigMap{}, Kind: "nope", Map: func(context.Context, client.Object) []Target { return nil }},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(ctx, c, Options{Scheme: testenv.Scheme, Kinds: testKinds(), Watches: []Watch{w}})
			assert.ErrorContains(t, err, "Watches[0] (w)")
		})
	}
}
