package kit

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// Finalizer is the finalizer this operator puts on the objects it cleans up after (Clusters,
// ProviderConfigs). It names the provider, so two instances of this operator with different
// --provider-name values never remove each other's finalizers.
func Finalizer(providerName string) string {
	return v1alpha1.GroupVersion.Group + "/" + providerName
}

// AddFinalizer adds finalizer to obj with an optimistically locked merge patch, unless it is
// there already. obj is updated in place.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) error {
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	base := obj.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, LockedMergeFrom(base)); err != nil {
		return fmt.Errorf("adding finalizer %s: %w", finalizer, err)
	}
	return nil
}

// RemoveFinalizer removes finalizer from obj with an optimistically locked merge patch, if it is
// there. An object that is already gone is not an error.
func RemoveFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) error {
	if !controllerutil.ContainsFinalizer(obj, finalizer) {
		return nil
	}
	base := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, LockedMergeFrom(base)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("removing finalizer %s: %w", finalizer, err)
	}
	return nil
}
