package kit

import "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"

// Finalizer is the finalizer this operator puts on the objects it cleans up after (Clusters,
// ProviderConfigs). It names the provider, so two instances of this operator with different
// --provider-name values never remove each other's finalizers.
func Finalizer(providerName string) string {
	return v1alpha1.GroupVersion.Group + "/" + providerName
}
