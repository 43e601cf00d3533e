// Package controlplane holds what the local and hosted backends' control planes share: the
// service range, and the flags of kube-apiserver and kube-controller-manager that do not depend
// on where the processes run (files, listeners and etcd are each backend's own).
package controlplane

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	netutils "k8s.io/utils/net"

	"github.com/openmcp-local/cluster-provider/backend"
)

// The service network of a cluster. Nothing routes it (no kube-proxy, no nodes), but the API
// server allocates Services' addresses from it, and it calls a webhook or an APIService that names
// a Service at that Service's address: from the operator's pod (local) or its own pod (hosted). A
// range the platform uses would send those calls to the platform's own Services, so the default
// is 198.18.0.0/16, part of the range reserved for benchmarking (RFC 2544), which no platform or
// cloud network hands out (kubeadm and kind 10.96.0.0/12, EKS 10.100.0.0/16 and 172.20.0.0/16,
// OpenShift 172.30.0.0/16, Gardener 100.64.0.0/13, Docker 172.17.0.0/16, most pod ranges in
// 10.0.0.0/8). A cluster keeps the range it was created with: changing it under existing data
// would move the kubernetes Service.
const DefaultServiceCIDR = "198.18.0.0/16"

// ValidServiceCIDR checks a service range as kube-apiserver will: one IPv4 or IPv6 CIDR, at
// most a /12 (IPv4) or /108 (IPv6) as kube-apiserver allows, and with room for the kubernetes
// Service (at least 8 addresses).
func ValidServiceCIDR(cidr string) error {
	ip, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return fmt.Errorf("%q is not a CIDR such as %s", cidr, DefaultServiceCIDR)
	}
	if !ip.Equal(n.IP) {
		return fmt.Errorf("%q has host bits set: write %s", cidr, n)
	}
	ones, bits := n.Mask.Size()
	minOnes := 12
	if bits == 128 {
		minOnes = 108
	}
	if ones < minOnes || bits-ones < 3 {
		return fmt.Errorf("%q: the prefix must be from /%d to /%d", cidr, minOnes, bits-3)
	}
	return nil
}

// KubernetesServiceIP is the address of the kubernetes Service in cidr: its first host address.
func KubernetesServiceIP(cidr string) net.IP {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil
	}
	ip, err := netutils.GetIndexedIP(n, 1)
	if err != nil {
		return nil
	}
	return ip
}

// The in-flight request limits of a cluster's API server.
const (
	MaxRequestsInflight         = 80
	MaxMutatingRequestsInflight = 40
)

// APIServerFiles are the files kube-apiserver reads.
type APIServerFiles struct {
	ServingCert, ServingKey, ClientCA           string
	ServiceAccountKey, ServiceAccountSigningKey string
	AuthenticationConfig                        string
	// EncryptionConfig is the EncryptionConfiguration of the encryption at rest (backend/encryption);
	// "" for none.
	EncryptionConfig string
}

// APIServerArgs are the flags of a cluster's kube-apiserver that every backend sets alike.
func APIServerArgs(f APIServerFiles, serviceCIDR string) []string {
	args := []string{
		"--tls-cert-file=" + f.ServingCert,
		"--tls-private-key-file=" + f.ServingKey,
		"--client-ca-file=" + f.ClientCA,
		"--service-account-issuer=" + backend.ServiceAccountIssuer,
		"--service-account-key-file=" + f.ServiceAccountKey,
		"--service-account-signing-key-file=" + f.ServiceAccountSigningKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=RBAC",
		"--authentication-config=" + f.AuthenticationConfig,
		"--profiling=false",
	}
	if f.EncryptionConfig != "" {
		args = append(args, "--encryption-provider-config="+f.EncryptionConfig)
	}
	return append(args,
		// API Priority and Fairness shares the in-flight limits between flows (users, service
		// accounts), so one client listing large objects in a loop queues behind its own share
		// instead of starving the controller manager and the cluster's other users. The limits are
		// a fifth of kube-apiserver's defaults (400 and 200): a workerless cluster has no kubelets
		// or nodes calling in, and every request in flight holds memory
		// (docs/benchmarks.md, "Noisy neighbour").
		"--enable-priority-and-fairness=true",
		"--max-requests-inflight="+strconv.Itoa(MaxRequestsInflight),
		"--max-mutating-requests-inflight="+strconv.Itoa(MaxMutatingRequestsInflight),
		"--v=0",
	)
}

// The controllers of a cluster's kube-controller-manager: what a workerless Gardener shoot runs
// (every default controller, plus the bootstrap-token signer and cleaner), without those that
// serve only nodes or the volumes and Pods on them. See backend/local's package doc for the
// reasons.
var (
	KCMExtraControllers    = []string{"bootstrap-signer-controller", "token-cleaner-controller"}
	KCMDisabledControllers = []string{
		"node-ipam-controller",                      // assigns Pod CIDRs to nodes
		"node-lifecycle-controller",                 // taints and evicts unhealthy nodes
		"taint-eviction-controller",                 // evicts Pods from tainted nodes
		"device-taint-eviction-controller",          // evicts Pods from tainted devices
		"ttl-controller",                            // annotates nodes with a cache TTL
		"persistentvolume-attach-detach-controller", // attaches volumes to nodes
		"persistentvolume-binder-controller",        // binds and provisions volumes for Pods
		"persistentvolume-expander-controller",      // grows volumes on nodes
	}
)

// The controller manager's client rate limit (its default: 20/s, burst 30).
const (
	KCMAPIQPS   = 100
	KCMAPIBurst = 200
)

// ControllerManagerFiles are the files kube-controller-manager reads.
type ControllerManagerFiles struct {
	Kubeconfig, CACert, CAKey, ServiceAccountKey string
	// RootCA, when set, is the trust bundle the controller manager publishes to every namespace
	// (kube-root-ca.crt) instead of CACert: during a CA rotation, the old and the new CA.
	RootCA string
}

// ControllerManagerArgs are the flags of a cluster's kube-controller-manager that every backend
// sets alike: its own client certificate (the kubeconfig), a service-account credential per
// controller, the cluster CA to sign approved CSRs, the service-account key to sign tokens.
func ControllerManagerArgs(f ControllerManagerFiles, serviceCIDR string) []string {
	controllers := append(append([]string{"*"}, KCMExtraControllers...), prefixed("-", KCMDisabledControllers)...)
	rootCA := f.RootCA
	if rootCA == "" {
		rootCA = f.CACert
	}
	return []string{
		"--kubeconfig=" + f.Kubeconfig,
		"--authentication-kubeconfig=" + f.Kubeconfig,
		"--authorization-kubeconfig=" + f.Kubeconfig,
		"--use-service-account-credentials=true",
		"--root-ca-file=" + rootCA,
		"--cluster-signing-cert-file=" + f.CACert,
		"--cluster-signing-key-file=" + f.CAKey,
		"--service-account-private-key-file=" + f.ServiceAccountKey,
		"--service-cluster-ip-range=" + serviceCIDR,
		"--controllers=" + strings.Join(controllers, ","),
		// With service-account credentials, building each controller costs its own client three
		// requests (get, namespace check, create its ServiceAccount); at the default client limit
		// (20/s, burst 30) the forty controllers take 4 s longer to start than the requests need.
		"--kube-api-qps=" + strconv.Itoa(KCMAPIQPS),
		"--kube-api-burst=" + strconv.Itoa(KCMAPIBurst),
		"--profiling=false",
		"--v=0",
	}
}

func prefixed(prefix string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = prefix + s
	}
	return out
}

// AuditPolicy is the audit policy of every cluster's API server: who did what, at Metadata level
// (user, groups, verb, resource, namespace, name, source address, response code), never a
// request's or response's body, so no Secret's data, token or kubeconfig is ever logged. Health
// checks and the controller manager's leader-election lease renewals (every few seconds) are left
// out.
//
// Only authenticated requests are logged (the group system:authenticated, which the API server
// gives every user it authenticated but the anonymous one), so that whoever reaches the endpoint
// without credentials cannot flush the log (AuditMaxSizeMB, AuditMaxBackups) with requests of
// their own. The last rule drops the others: a request whose credentials failed (401; the API
// server audits it with no user at all, which no rule naming users or groups matches) and an
// anonymous one (system:anonymous, group system:unauthenticated). A credential that names the
// group system:unauthenticated itself (a client certificate only the cluster's CA could sign;
// OIDC groups carry a prefix) is not logged either. They are counted instead, by the API server's
// metrics (/metrics, read with the admin's credentials): authentication_attempts{result="error"}
// counts requests with credentials that did not authenticate (result="failure": no credentials
// with anonymous requests turned off), authorization_attempts_total{result="no-opinion"} the
// requests refused (403: RBAC does not deny, it does not allow), an anonymous one among them, and
// apiserver_audit_level_total{level="None"} every request this policy leaves out.
// apiserver_request_total counts neither: the API server refuses them before it counts a request.
const AuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  nonResourceURLs: ["/healthz*", "/livez*", "/readyz*", "/version"]
- level: None
  users: ["system:kube-controller-manager"]
  verbs: [get, update]
  resources: [{group: coordination.k8s.io, resources: [leases]}]
- level: Metadata
  userGroups: ["system:authenticated"]
- level: None
`

// The size cap of an API server's audit log: AuditMaxSizeMB per file, AuditMaxBackups rotated
// files kept besides the current one.
const (
	AuditMaxSizeMB  = 50
	AuditMaxBackups = 4
)

// AuditArgs are kube-apiserver's audit flags: policyFile (AuditPolicy) and a JSON log at
// logFile, rotated at AuditMaxSizeMB, AuditMaxBackups kept.
func AuditArgs(policyFile, logFile string) []string {
	return []string{
		"--audit-policy-file=" + policyFile,
		"--audit-log-path=" + logFile,
		"--audit-log-format=json",
		"--audit-log-maxsize=" + strconv.Itoa(AuditMaxSizeMB),
		"--audit-log-maxbackup=" + strconv.Itoa(AuditMaxBackups),
		"--audit-log-compress=false",
	}
}
