package v1alpha1

// BackupObjectStore is an S3-compatible object store that keeps the profile's etcd snapshots
// outside the failure domain of their clusters: every verified snapshot is encrypted with the
// key of the credentials Secret before it is uploaded, and the store's list of a Cluster's
// snapshots is its catalog (docs/backups.md, "Backups in an object store"). Objects are laid out
// as <prefix>/<Cluster namespace>/<Cluster UID>/<snapshot>.{db.enc,keys.enc,json}.
//
// +kubebuilder:validation:XValidation:rule="!self.endpoint.startsWith('http://') || (has(self.insecure) && self.insecure)",message="objectStore.endpoint speaks plain http: set insecure: true (tests only) or use https"
// +kubebuilder:validation:XValidation:rule="!(has(self.insecure) && self.insecure) || !has(self.caBundle)",message="objectStore.caBundle has no use with insecure: true (plain http)"
type BackupObjectStore struct {
	// Endpoint is the store's host[:port] (https), or its URL without a path:
	// s3.eu-central-1.amazonaws.com, https://minio.example.com:9000.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!self.contains('://') || (isURL(self) && url(self).getScheme() in ['http', 'https'] && url(self).getEscapedPath() in ['', '/'])",message="objectStore.endpoint must be a host[:port] or an http(s) URL without a path, e.g. https://s3.example.com"
	// +kubebuilder:validation:XValidation:rule="self.contains('://') || !self.contains('/')",message="objectStore.endpoint must be a host[:port] or an http(s) URL without a path, e.g. https://s3.example.com"
	Endpoint string `json:"endpoint"`

	// Bucket holds the snapshots; it must exist. The operator writes, lists, reads and deletes
	// objects below Prefix in it.
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	Bucket string `json:"bucket"`

	// Prefix is put before every key, e.g. "cluster-provider/prod"; empty for none. Several
	// ProviderConfigs, or operators, may share a bucket with prefixes of their own.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('/') && !self.endsWith('/') && !self.contains('//') && !self.split('/').exists(s, s == '.' || s == '..')",message="objectStore.prefix must be path segments separated by '/', without a leading or trailing '/', '.' or '..', e.g. cluster-provider/prod"
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// Region of the bucket; empty lets the client ask the store (or use us-east-1).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Region string `json:"region,omitempty"`

	// Insecure speaks plain http to the endpoint: credentials and requests are readable on the
	// way (the snapshots stay encrypted). For tests against a local server only.
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// CABundle is the PEM of the CAs trusted for the store's serving certificate, instead of the
	// system's.
	// +kubebuilder:validation:MaxLength=65536
	// +kubebuilder:validation:XValidation:rule="self.contains('-----BEGIN CERTIFICATE-----')",message="objectStore.caBundle must hold PEM certificates (-----BEGIN CERTIFICATE-----)"
	// +optional
	CABundle string `json:"caBundle,omitempty"`

	// PathStyle puts the bucket in the path of requests (https://host/bucket/key), as most
	// S3-compatible stores (MinIO, SeaweedFS, Ceph) need; unset lets the client choose (virtual
	// hosts for AWS, the path elsewhere).
	// +optional
	PathStyle bool `json:"pathStyle,omitempty"`

	// CredentialsSecretRef names a Secret in the operator's namespace (the ProviderConfig is
	// cluster-scoped; a Secret of the operator's namespace is one only its administrators
	// write) with keys accessKeyID, secretAccessKey and encryptionKey (the base64 of 32 random
	// bytes: `openssl rand -base64 32`). Lose the encryptionKey and the snapshots are lost.
	CredentialsSecretRef ObjectStoreSecretRef `json:"credentialsSecretRef"`
}

// ObjectStoreSecretRef names a Secret in the operator's namespace.
type ObjectStoreSecretRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// The keys of the object store's credentials Secret.
const (
	ObjectStoreAccessKeyID     = "accessKeyID"
	ObjectStoreSecretAccessKey = "secretAccessKey"
	ObjectStoreEncryptionKey   = "encryptionKey"
)
