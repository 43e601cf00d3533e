package v1alpha1

// Labels and annotations of the clusters API.
const (
	// ProviderLabel holds the name of the ClusterProvider responsible for an AccessRequest or
	// Cluster.
	ProviderLabel = "clusters.openmcp.cloud/provider"
	// ProfileLabel holds the name of the ClusterProfile of an AccessRequest's cluster.
	ProfileLabel = "clusters.openmcp.cloud/profile"
	// K8sVersionLabel holds a Cluster's actual Kubernetes version.
	K8sVersionLabel = "clusters.openmcp.cloud/k8sversion"
	// ProviderInfoAnnotation holds provider-specific information on a Cluster, shown by
	// `kubectl get -o wide`.
	ProviderInfoAnnotation = "clusters.openmcp.cloud/providerinfo"
)

// Keys of the Secret an AccessRequest's status.secretRef names.
const (
	// SecretKeyKubeconfig holds the kubeconfig granting the access.
	SecretKeyKubeconfig = "kubeconfig"
	// SecretKeyExpirationTimestamp holds when the access expires, as Unix seconds.
	SecretKeyExpirationTimestamp = "expirationTimestamp"
	// SecretKeyCreationTimestamp holds when the access was granted, as Unix seconds.
	SecretKeyCreationTimestamp = "creationTimestamp"
	// SecretKeyClientID holds the OIDC client ID of an OIDC access.
	SecretKeyClientID = "clientID"
	// SecretKeyHost holds the URL of the cluster's API server.
	SecretKeyHost = "host"
	// SecretKeyCACert holds the PEM bundle that verifies the API server's serving certificate.
	SecretKeyCACert = "ca.crt"
	// SecretKeyToken holds the bearer token of a token access.
	SecretKeyToken = "token"
)

// Names of a Cluster's status.endpoints.
const (
	// APIServerEndpointExternal is the API server's URL for clients outside the cluster.
	APIServerEndpointExternal = "apiserver-external"
	// APIServerEndpointInternal is the API server's URL for clients inside the cluster's network.
	APIServerEndpointInternal = "apiserver-internal"
)

// PlatformClusterLabel marks the CRDs of the platform cluster (openMCP's convention:
// openmcp.cloud/cluster: platform).
const PlatformClusterLabel = "openmcp.cloud/cluster"
