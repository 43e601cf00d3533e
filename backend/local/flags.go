package local

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	netutils "k8s.io/utils/net"

	"github.com/openmcp-local/cluster-provider/backend"
)

// The service network of a local cluster. Nothing routes it (no kube-proxy, no nodes), but the
// API server allocates Services' addresses from it, and it calls a webhook or an APIService that
// names a Service at that Service's address: from the operator's pod. A range the platform uses
// would send those calls to the platform's own Services, so the default is 198.18.0.0/16, part of
// the range reserved for benchmarking (RFC 2544), which no platform or cloud network hands out
// (kubeadm and kind 10.96.0.0/12, EKS 10.100.0.0/16 and 172.20.0.0/16, OpenShift 172.30.0.0/16,
// Gardener 100.64.0.0/13, Docker 172.17.0.0/16, most pod ranges in 10.0.0.0/8). A cluster keeps
// the range it was created with (meta.ServiceCIDR): changing it under existing data would move
// the kubernetes Service. Clusters created before the range was recorded have LegacyServiceCIDR.
const (
	DefaultServiceCIDR = "198.18.0.0/16"
	LegacyServiceCIDR  = "10.96.0.0/16"
	// serviceAccountIssuer is the iss of service-account tokens. It does not name a port, so
	// tokens stay valid when the API server's port changes.
	serviceAccountIssuer = backend.ServiceAccountIssuer
)

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

// kubernetesServiceIP is the address of the kubernetes Service in cidr: its first host address.
func kubernetesServiceIP(cidr string) net.IP {
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

// Tuning of the processes. Measured in docs/benchmarks.md ("Local clusters").
type Tuning struct {
	// APIServerGOMEMLIMIT, EtcdGOMEMLIMIT and ControllerManagerGOMEMLIMIT set the Go runtime's
	// soft memory limit of each process (e.g. "150MiB"); empty leaves it unset.
	APIServerGOMEMLIMIT, EtcdGOMEMLIMIT, ControllerManagerGOMEMLIMIT string
	// GOGC of every process; empty leaves the Go default (100).
	GOGC string
	// WatchCache keeps kube-apiserver's watch cache on (more memory, fewer etcd reads).
	WatchCache bool
	// ConcurrentSyncs, when not zero, sets every --concurrent-*-syncs flag of the controller
	// manager to this number of workers (its defaults are 1 to 20 per controller).
	ConcurrentSyncs int
}

// DefaultTuning is what the operator runs with.
var DefaultTuning = Tuning{APIServerGOMEMLIMIT: "160MiB", EtcdGOMEMLIMIT: "48MiB", ControllerManagerGOMEMLIMIT: "64MiB", GOGC: "50"}

// env returns the environment entries of a process of the given kind.
func (t Tuning) env(memLimit string) []string {
	var env []string
	if memLimit != "" {
		env = append(env, "GOMEMLIMIT="+memLimit)
	}
	if t.GOGC != "" {
		env = append(env, "GOGC="+t.GOGC)
	}
	return env
}

// etcdArgs are the flags of a cluster's etcd: one member whose client and peer listeners are unix
// sockets in the cluster's 0700 folder (no TCP port: nobody but the operator's user, and so the
// cluster's own API server, reaches its data), data in the folder, fsync on (the data is the
// user's). etcd runs with the folder as its working directory: the socket names are relative.
// They end in ":0" (etcdSocket) so that etcd 3.5 and 3.6, which want every URL "host:port", take
// the same flags as 3.7: one set of flags for every etcd line, no version detection. A peer on a
// loopback TCP port instead, though a one-member cluster never dials it, would be a listener
// every process in the pod's network namespace reaches.
func etcdArgs(dir string) []string {
	client := "unix://" + etcdSocket
	peer := "unix://" + etcdPeerSocket
	return []string{
		"--name=default",
		"--data-dir=" + filepath.Join(dir, etcdDataDir),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		"--listen-metrics-urls=",
		"--log-level=warn",
		// A small cluster needs neither the default 2 GiB quota's headroom nor frequent
		// snapshots to stay small.
		"--quota-backend-bytes=" + strconv.Itoa(1<<30),
		"--auto-compaction-mode=periodic",
		"--auto-compaction-retention=1h",
	}
}

// apiServerArgs are the flags of a cluster's kube-apiserver.
func apiServerArgs(dir, advertiseHost, serviceCIDR string, p ports, t Tuning) []string {
	pki := filepath.Join(dir, pkiDir)
	args := []string{
		"--etcd-servers=unix://" + etcdSocket, // relative to the cluster's folder, its working directory
		"--bind-address=" + bindAddress(advertiseHost),
		"--secure-port=" + strconv.Itoa(p.APIServer),
		"--tls-cert-file=" + filepath.Join(pki, servingCertFile),
		"--tls-private-key-file=" + filepath.Join(pki, servingKeyFile),
		"--client-ca-file=" + filepath.Join(pki, caCertFile),
		"--service-account-issuer=" + serviceAccountIssuer,
		"--service-account-key-file=" + filepath.Join(pki, saPubFile),
		"--service-account-signing-key-file=" + filepath.Join(pki, saKeyFile),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=RBAC",
		"--authentication-config=" + filepath.Join(dir, authConfigFile),
		"--profiling=false",
		// API Priority and Fairness shares the in-flight limits between flows (users, service
		// accounts), so one client listing large objects in a loop queues behind its own share
		// instead of starving the controller manager and the cluster's other users. The limits are
		// a fifth of kube-apiserver's defaults (400 and 200): a workerless cluster has no kubelets
		// or nodes calling in, and every request in flight holds memory of the operator's pod,
		// which all local clusters share (docs/benchmarks.md, "Noisy neighbour").
		"--enable-priority-and-fairness=true",
		"--max-requests-inflight=" + strconv.Itoa(maxRequestsInflight),
		"--max-mutating-requests-inflight=" + strconv.Itoa(maxMutatingRequestsInflight),
		"--watch-cache=" + strconv.FormatBool(t.WatchCache),
		"--v=0",
	}
	// The kubernetes Service's Endpoints name the advertise address: a real one (the pod's IP in
	// deploy/default) is kept there by the lease reconciler; a loopback address may not be an
	// endpoint, so a cluster advertised on the loopback (or by name) has none.
	if ip := net.ParseIP(advertiseHost); ip != nil && !ip.IsLoopback() {
		args = append(args, "--advertise-address="+advertiseHost, "--endpoint-reconciler-type=lease")
	} else if ip != nil {
		args = append(args, "--advertise-address="+advertiseHost, "--endpoint-reconciler-type=none")
	} else {
		args = append(args, "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none")
	}
	return args
}

// The controllers of a local cluster's kube-controller-manager: what a workerless Gardener shoot
// runs (every default controller, plus the bootstrap-token signer and cleaner), without those that
// serve only nodes or the volumes and Pods on them. See the package doc for the reasons.
var (
	kcmExtraControllers    = []string{"bootstrap-signer-controller", "token-cleaner-controller"}
	kcmDisabledControllers = []string{
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

// controllerManagerArgs are the flags of a cluster's kube-controller-manager: its own client
// certificate (kubeconfig in the folder), a service-account credential per controller, the
// cluster CA to sign approved CSRs, the service-account key to sign tokens, no leader election (one
// per cluster), and its health and metrics port on the loopback only.
func controllerManagerArgs(dir, serviceCIDR string, p ports, t Tuning) []string {
	pki := filepath.Join(dir, pkiDir)
	kubeconfig := filepath.Join(dir, kcmKubeconfig)
	controllers := append(append([]string{"*"}, kcmExtraControllers...), prefixed("-", kcmDisabledControllers)...)
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--use-service-account-credentials=true",
		"--root-ca-file=" + filepath.Join(pki, caCertFile),
		"--cluster-signing-cert-file=" + filepath.Join(pki, caCertFile),
		"--cluster-signing-key-file=" + filepath.Join(pki, caKeyFile),
		"--service-account-private-key-file=" + filepath.Join(pki, saKeyFile),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--controllers=" + strings.Join(controllers, ","),
		"--leader-elect=false",
		// With service-account credentials, building each controller costs its own client three
		// requests (get, namespace check, create its ServiceAccount); at the default client limit
		// (20/s, burst 30) the forty controllers take 4 s longer to start than the requests need.
		"--kube-api-qps=" + strconv.Itoa(kcmAPIQPS),
		"--kube-api-burst=" + strconv.Itoa(kcmAPIBurst),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(p.ControllerManager),
		"--tls-cert-file=" + filepath.Join(pki, kcmServingCertFile),
		"--tls-private-key-file=" + filepath.Join(pki, kcmServingKeyFile),
		"--profiling=false",
		"--v=0",
	}
	if n := t.ConcurrentSyncs; n > 0 {
		for _, f := range kcmConcurrencyFlags {
			args = append(args, fmt.Sprintf("--%s=%d", f, n))
		}
	}
	return args
}

// The in-flight request limits of a cluster's API server (apiServerArgs).
const (
	maxRequestsInflight         = 80
	maxMutatingRequestsInflight = 40
)

// The controller manager's client rate limit (its default: 20/s, burst 30).
const (
	kcmAPIQPS   = 100
	kcmAPIBurst = 200
)

// kcmConcurrencyFlags are the worker counts of the controllers a local cluster runs.
var kcmConcurrencyFlags = []string{
	"concurrent-cron-job-syncs", "concurrent-daemonset-syncs", "concurrent-deployment-syncs",
	"concurrent-endpoint-syncs", "concurrent-ephemeralvolume-syncs", "concurrent-gc-syncs",
	"concurrent-horizontal-pod-autoscaler-syncs", "concurrent-job-syncs", "concurrent-namespace-syncs",
	"concurrent-rc-syncs", "concurrent-replicaset-syncs", "concurrent-resource-quota-syncs",
	"concurrent-service-endpoint-syncs", "concurrent-serviceaccount-token-syncs",
	"concurrent-statefulset-syncs", "concurrent-ttl-after-finished-syncs",
	"concurrent-validating-admission-policy-status-syncs",
}

func prefixed(prefix string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = prefix + s
	}
	return out
}

// bindAddress is where the API server listens: the advertised loopback address itself when it is
// advertised on one (127.0.0.1 for "localhost"), else every interface.
func bindAddress(advertiseHost string) string {
	if advertiseHost == "localhost" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(advertiseHost); ip != nil && ip.IsLoopback() {
		return advertiseHost
	}
	return "0.0.0.0"
}

// endpoint is the https URL clients use.
func endpoint(advertiseHost string, port int) string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(advertiseHost, strconv.Itoa(port)))
}
