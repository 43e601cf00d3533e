package local

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
)

// The service network of every local cluster. There is no kube-proxy or controller-manager, but
// the API server needs a range to allocate the kubernetes Service from.
const (
	serviceCIDR = "10.96.0.0/16"
	serviceIP   = "10.96.0.1"
	// serviceAccountIssuer is the iss of service-account tokens. It does not name a port, so
	// tokens stay valid when the API server's port changes.
	serviceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
)

// Tuning of the processes. Measured in docs/benchmarks.md ("Local clusters").
type Tuning struct {
	// APIServerGOMEMLIMIT and EtcdGOMEMLIMIT set the Go runtime's soft memory limit of each
	// process (e.g. "150MiB"); empty leaves it unset.
	APIServerGOMEMLIMIT, EtcdGOMEMLIMIT string
	// GOGC of both processes; empty leaves the Go default (100).
	GOGC string
	// WatchCache keeps kube-apiserver's watch cache on (more memory, fewer etcd reads).
	WatchCache bool
}

// DefaultTuning is what the operator runs with.
var DefaultTuning = Tuning{APIServerGOMEMLIMIT: "160MiB", EtcdGOMEMLIMIT: "48MiB", GOGC: "50"}

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

// etcdArgs are the flags of a cluster's etcd: one member listening on the loopback only, data
// in the cluster's folder, fsync on (the data is the user's).
func etcdArgs(dir string, p ports) []string {
	client := "http://127.0.0.1:" + strconv.Itoa(p.Etcd)
	peer := "http://127.0.0.1:" + strconv.Itoa(p.EtcdPeer)
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
func apiServerArgs(dir, advertiseHost string, p ports, t Tuning) []string {
	pki := filepath.Join(dir, pkiDir)
	args := []string{
		"--etcd-servers=http://127.0.0.1:" + strconv.Itoa(p.Etcd),
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
		"--enable-priority-and-fairness=false",
		"--watch-cache=" + strconv.FormatBool(t.WatchCache),
		// The loopback cannot be a kubernetes Service endpoint, and nothing in the cluster needs one.
		"--endpoint-reconciler-type=none",
		"--v=0",
	}
	if ip := net.ParseIP(advertiseHost); ip != nil {
		args = append(args, "--advertise-address="+advertiseHost)
	} else {
		args = append(args, "--advertise-address=127.0.0.1")
	}
	return args
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
