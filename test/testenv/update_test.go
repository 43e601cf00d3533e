package testenv

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestUpdateRetriesOnConflict: a write of another party between the helper's read and its update
// makes the update conflict; the change is made again on the latest version, whose map entries are
// those the server has (none left over from the stale object passed in).
func TestUpdateRetriesOnConflict(t *testing.T) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"a": "1"}}
	other := fake.NewClientBuilder().WithObjects(cm.DeepCopy()).Build()
	raced := false
	c := interceptor.NewClient(other.(client.WithWatch), interceptor.Funcs{
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if !raced { // a controller writes first
				raced = true
				cur := &corev1.ConfigMap{}
				require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(obj), cur))
				cur.Data = map[string]string{"b": "2"}
				require.NoError(t, c.Update(ctx, cur))
			}
			return c.Update(ctx, obj, opts...)
		},
	})

	stale := cm.DeepCopy()
	stale.Data["gone"] = "x"
	calls := 0
	Update(ctx, t, c, stale, func(cm *corev1.ConfigMap) {
		calls++
		cm.Data["c"] = "3"
	})
	assert.Equal(t, 2, calls, "mutated again after the conflict")
	got := &corev1.ConfigMap{}
	require.NoError(t, other.Get(ctx, client.ObjectKeyFromObject(cm), got))
	assert.Equal(t, map[string]string{"b": "2", "c": "3"}, got.Data)
	assert.Equal(t, got.ResourceVersion, stale.ResourceVersion, "obj ends as written")
}
