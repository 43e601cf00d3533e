package scheduler

import (
	"crypto/sha3"
	"encoding/base32"
	"strings"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// hashEncoding is lowercase-able, unpadded base32 (alphabet a-z2-7 once lowercased).
var hashEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// RequestHash is the 8-character suffix openMCP's scheduler gives the Clusters it creates for one
// request: the lowercase, unpadded base32 of 5 bytes of SHAKE128 over "<namespace>/<name>" of the
// request. The same request always gets the same name, in either scheduler.
func RequestHash(namespace, name string) string {
	sum := sha3.SumSHAKE128([]byte(namespace+"/"+name), 5)
	return strings.ToLower(hashEncoding.EncodeToString(sum))
}

// ClusterName is the name of the Cluster the scheduler creates for the request namespace/name of
// purpose under pm: the template's name (else the purpose) for a Shared mapping with unlimited
// tenancy, one Cluster for everyone; otherwise a prefix (the template's generateName, else
// "<purpose>-") and RequestHash. randomize (the request's randomize-cluster-name label) leaves the
// name to the API server: name is empty and generateName the prefix.
func ClusterName(purpose string, pm *PurposeMapping, namespace, name string, randomize bool) (clusterName, generateName string) {
	t := pm.Template
	if t.Spec.Tenancy == clustersv1alpha1.TenancyShared && pm.TenancyCount == 0 {
		if t.Metadata.Name != "" {
			return t.Metadata.Name, ""
		}
		return purpose, ""
	}
	prefix := t.Metadata.GenerateName
	if prefix == "" {
		prefix = purpose + "-"
	}
	if randomize {
		return "", prefix
	}
	return prefix + RequestHash(namespace, name), ""
}
