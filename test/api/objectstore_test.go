package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
)

// TestObjectStoreValidation: spec.backup.objectStore is accepted as documented (host, https URL,
// a prefix, http with insecure for tests) and refused, with a message saying what to fix, for an
// endpoint with a path, http without insecure, a CA bundle with insecure or that is no PEM, a
// prefix with a leading slash or '..', and a bucket that is no bucket name.
func TestObjectStoreValidation(t *testing.T) {
	valid := func() *providersv1alpha1.BackupObjectStore {
		return &providersv1alpha1.BackupObjectStore{Endpoint: "s3.eu-central-1.amazonaws.com", Bucket: "my-etcd-backups",
			CredentialsSecretRef: providersv1alpha1.ObjectStoreSecretRef{Name: "backup-store"}}
	}
	for _, tc := range []struct {
		name    string
		mutate  func(*providersv1alpha1.BackupObjectStore)
		message string // empty: accepted
	}{
		{name: "a host", mutate: func(*providersv1alpha1.BackupObjectStore) {}},
		{name: "an https URL with a port, a prefix, a CA bundle", mutate: func(s *providersv1alpha1.BackupObjectStore) {
			s.Endpoint, s.Prefix, s.PathStyle = "https://minio.example.com:9000", "cluster-provider/prod", true
			s.CABundle = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
		}},
		{name: "http with insecure", mutate: func(s *providersv1alpha1.BackupObjectStore) {
			s.Endpoint, s.Insecure = "http://127.0.0.1:8333", true
		}},
		{name: "http without insecure", message: "objectStore.endpoint speaks plain http: set insecure: true (tests only) or use https",
			mutate: func(s *providersv1alpha1.BackupObjectStore) { s.Endpoint = "http://127.0.0.1:8333" }},
		{name: "a URL with a path", message: "objectStore.endpoint must be a host[:port] or an http(s) URL without a path",
			mutate: func(s *providersv1alpha1.BackupObjectStore) { s.Endpoint = "https://s3.example.com/bucket" }},
		{name: "a host with a path", message: "objectStore.endpoint must be a host[:port] or an http(s) URL without a path",
			mutate: func(s *providersv1alpha1.BackupObjectStore) { s.Endpoint = "s3.example.com/bucket" }},
		{name: "a CA bundle with insecure", message: "objectStore.caBundle has no use with insecure: true",
			mutate: func(s *providersv1alpha1.BackupObjectStore) {
				s.Endpoint, s.Insecure, s.CABundle = "http://127.0.0.1:8333", true, "-----BEGIN CERTIFICATE-----\n"
			}},
		{name: "a CA bundle that is no PEM", message: "objectStore.caBundle must hold PEM certificates",
			mutate: func(s *providersv1alpha1.BackupObjectStore) { s.CABundle = "not a certificate" }},
		{name: "a prefix with a leading slash", message: "objectStore.prefix must be path segments separated by '/'",
			mutate: func(s *providersv1alpha1.BackupObjectStore) { s.Prefix = "/backups" }},
		{name: "a prefix with ..", message: "objectStore.prefix must be path segments separated by '/'",
			mutate: func(s *providersv1alpha1.BackupObjectStore) { s.Prefix = "a/../b" }},
		{name: "a bucket in capitals", message: "spec.backup.objectStore.bucket in body should match",
			mutate: func(s *providersv1alpha1.BackupObjectStore) { s.Bucket = "My_Bucket" }},
		{name: "no Secret", message: "spec.backup.objectStore.credentialsSecretRef.name in body should be at least 1 chars long",
			mutate: func(s *providersv1alpha1.BackupObjectStore) { s.CredentialsSecretRef.Name = "" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := fromYAML(t, validProviderConfig, &providersv1alpha1.ProviderConfig{})
			store := valid()
			tc.mutate(store)
			pc.Spec.Backup = &providersv1alpha1.BackupPolicy{ObjectStore: store}
			err := env.Client.Create(context.Background(), pc, client.DryRunAll)
			if tc.message == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.message)
		})
	}
}
