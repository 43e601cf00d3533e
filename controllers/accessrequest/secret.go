package accessrequest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// AnnotationChecksum holds a hash of a kubeconfig Secret's data as this provider wrote it; a
// Secret whose data no longer matches was edited and is written again.
const AnnotationChecksum = "accessrequest.clusters.openmcp.cloud/checksum"

// AnnotationGeneration holds the AccessRequest generation a kubeconfig Secret was granted for.
const AnnotationGeneration = "accessrequest.clusters.openmcp.cloud/generation"

// rotateFraction is the share of a token's validity after which a new token replaces it.
const rotateFraction = 0.8

// tokenAccess is a granted token access: what the kubeconfig Secret holds.
type tokenAccess struct {
	// Host is the cluster's API server URL; CA verifies its serving certificate.
	Host string
	CA   []byte
	// Token is the ServiceAccount token. Never logged.
	Token string
	// Created and Expires bound the token's validity.
	Created, Expires time.Time
}

// secretData returns the Secret data of a: the kubeconfig and the separate keys openMCP names.
func (a tokenAccess) secretData(contextName string) (map[string][]byte, error) {
	kubeconfig, err := writeKubeconfig(contextName, a.Host, a.CA, &clientcmdapi.AuthInfo{Token: a.Token})
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		clustersv1alpha1.SecretKeyKubeconfig:          kubeconfig,
		clustersv1alpha1.SecretKeyHost:                []byte(a.Host),
		clustersv1alpha1.SecretKeyCACert:              a.CA,
		clustersv1alpha1.SecretKeyToken:               []byte(a.Token),
		clustersv1alpha1.SecretKeyCreationTimestamp:   []byte(strconv.FormatInt(a.Created.Unix(), 10)),
		clustersv1alpha1.SecretKeyExpirationTimestamp: []byte(strconv.FormatInt(a.Expires.Unix(), 10)),
	}, nil
}

// oidcAccess is a granted OIDC access: the cluster trusts Issuer for ClientID; users get their
// tokens with the kubelogin plugin (kubectl oidc-login).
type oidcAccess struct {
	Host        string
	CA          []byte
	Issuer      string
	ClientID    string
	ExtraScopes []string
	Created     time.Time
	// Expires is the end of the request's TTL, if it has one.
	Expires *time.Time
}

// secretData returns the Secret data of a: a kubeconfig that runs kubelogin, and the keys
// openMCP names (no token: the user's identity provider issues those).
func (a oidcAccess) secretData(contextName string) (map[string][]byte, error) {
	args := []string{"oidc-login", "get-token", "--oidc-issuer-url=" + a.Issuer, "--oidc-client-id=" + a.ClientID}
	for _, s := range a.ExtraScopes {
		args = append(args, "--oidc-extra-scope="+s)
	}
	kubeconfig, err := writeKubeconfig(contextName, a.Host, a.CA, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion:      "client.authentication.k8s.io/v1beta1",
		Command:         "kubectl",
		Args:            args,
		InteractiveMode: clientcmdapi.IfAvailableExecInteractiveMode,
	}})
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{
		clustersv1alpha1.SecretKeyKubeconfig:        kubeconfig,
		clustersv1alpha1.SecretKeyHost:              []byte(a.Host),
		clustersv1alpha1.SecretKeyCACert:            a.CA,
		clustersv1alpha1.SecretKeyClientID:          []byte(a.ClientID),
		clustersv1alpha1.SecretKeyCreationTimestamp: []byte(strconv.FormatInt(a.Created.Unix(), 10)),
	}
	if a.Expires != nil {
		data[clustersv1alpha1.SecretKeyExpirationTimestamp] = []byte(strconv.FormatInt(a.Expires.Unix(), 10))
	}
	return data, nil
}

// writeKubeconfig is a kubeconfig with one context, named contextName, for the cluster at host.
func writeKubeconfig(contextName, host string, ca []byte, user *clientcmdapi.AuthInfo) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos[contextName] = user
	cfg.Contexts[contextName] = &clientcmdapi.Context{Cluster: contextName, AuthInfo: contextName}
	cfg.CurrentContext = contextName
	kubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return kubeconfig, nil
}

// checksum is a hash over data's keys and values, in key order.
func checksum(data map[string][]byte) string {
	h := sha256.New()
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s:%d:", len(k), k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// intact reports whether s is a kubeconfig Secret this provider wrote for the cluster at host,
// verified by ca, and nobody edited since (its data matches the checksum). A cluster created anew
// (its data lost) has a new CA: its old Secrets are not intact.
func intact(s *corev1.Secret, host string, ca []byte) bool {
	return s != nil && s.Annotations[AnnotationChecksum] == checksum(s.Data) && string(s.Data[clustersv1alpha1.SecretKeyHost]) == host &&
		bytes.Equal(s.Data[clustersv1alpha1.SecretKeyCACert], ca)
}

// otherCA reports whether s holds the CA of another cluster than the one ca verifies: the cluster
// behind the same Cluster resource was created anew, and nothing granted in the old one is left.
// A bundle that shares a certificate with ca is the same cluster's during or after a rotation of
// its CA (the old CA and the new one side by side): the Secret is written anew with ca (it is not
// intact), the grant stays.
func otherCA(s *corev1.Secret, ca []byte) bool {
	if s == nil {
		return false
	}
	held := s.Data[clustersv1alpha1.SecretKeyCACert]
	return len(held) > 0 && !bytes.Equal(held, ca) && !sharesCertificate(held, ca)
}

// sharesCertificate reports whether the PEM bundles a and b hold a certificate in common.
func sharesCertificate(a, b []byte) bool {
	held := map[string]bool{}
	for _, der := range pemCertificates(a) {
		held[string(der)] = true
	}
	return slices.ContainsFunc(pemCertificates(b), func(der []byte) bool { return held[string(der)] })
}

// pemCertificates are the DER bytes of the certificates of a PEM bundle.
func pemCertificates(bundle []byte) [][]byte {
	var out [][]byte
	for {
		var block *pem.Block
		if block, bundle = pem.Decode(bundle); block == nil {
			return out
		}
		if block.Type == "CERTIFICATE" {
			out = append(out, block.Bytes)
		}
	}
}

// validity reads the token validity of a kubeconfig Secret this provider wrote for the cluster at
// host, verified by ca. ok is false when the Secret is not intact or lacks the timestamps: it must then be
// written anew.
func validity(s *corev1.Secret, host string, ca []byte) (created, expires time.Time, ok bool) {
	if !intact(s, host, ca) {
		return time.Time{}, time.Time{}, false
	}
	c, err1 := strconv.ParseInt(string(s.Data[clustersv1alpha1.SecretKeyCreationTimestamp]), 10, 64)
	e, err2 := strconv.ParseInt(string(s.Data[clustersv1alpha1.SecretKeyExpirationTimestamp]), 10, 64)
	if err1 != nil || err2 != nil || e <= c {
		return time.Time{}, time.Time{}, false
	}
	return time.Unix(c, 0), time.Unix(e, 0), true
}

// rotateAt is when a token valid from created to expires is replaced.
func rotateAt(created, expires time.Time) time.Time {
	return created.Add(time.Duration(rotateFraction * float64(expires.Sub(created))))
}

// minTokenValidity is the shortest validity the TokenRequest API grants.
const minTokenValidity = 10 * time.Minute

// tokenValidity is how long a token issued now is asked to be valid: validity, or until the
// request's TTL ends if that is sooner, but at least what the TokenRequest API accepts. The
// request's deletion at its TTL end deletes the ServiceAccount, which invalidates the token.
func tokenValidity(now time.Time, validity time.Duration, ttlEnd *time.Time) time.Duration {
	d := validity
	if ttlEnd != nil && ttlEnd.Sub(now) < d {
		d = ttlEnd.Sub(now)
	}
	return max(d, minTokenValidity)
}

// ttlEnd is when ar's spec.ttl ends, or nil without a TTL.
func ttlEnd(ar *clustersv1alpha1.AccessRequest) *time.Time {
	if ar.Spec.TTL == nil {
		return nil
	}
	t := ar.CreationTimestamp.Add(ar.Spec.TTL.Duration)
	return &t
}
