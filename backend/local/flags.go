package local

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"

	"github.com/openmcp-local/cluster-provider/backend/controlplane"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// The service range of a local cluster (see controlplane.DefaultServiceCIDR). Clusters created
// before the range was recorded (meta.ServiceCIDR) have LegacyServiceCIDR.
const (
	DefaultServiceCIDR = controlplane.DefaultServiceCIDR
	LegacyServiceCIDR  = "10.96.0.0/16"
)

// ValidServiceCIDR checks a service range (controlplane.ValidServiceCIDR).
func ValidServiceCIDR(cidr string) error { return controlplane.ValidServiceCIDR(cidr) }

// kubernetesServiceIP is the address of the kubernetes Service in cidr.
func kubernetesServiceIP(cidr string) net.IP { return controlplane.KubernetesServiceIP(cidr) }

// Tuning of the processes. Measured in docs/benchmarks.md ("Local clusters").
type Tuning struct {
	// APIServerGOMEMLIMIT, EtcdGOMEMLIMIT and ControllerManagerGOMEMLIMIT set the Go runtime's
	// soft memory limit of each process (e.g. "150MiB"); empty leaves it unset.
	APIServerGOMEMLIMIT, EtcdGOMEMLIMIT, ControllerManagerGOMEMLIMIT string
	// GOGC of every process; empty leaves the Go default (100).
	GOGC string
	// APIServerGOGC, when set, is kube-apiserver's GOGC instead of GOGC.
	APIServerGOGC string
	// WatchCache keeps kube-apiserver's watch cache on (more memory, fewer etcd reads).
	WatchCache bool
	// ConcurrentSyncs, when not zero, sets every --concurrent-*-syncs flag of the controller
	// manager to this number of workers (its defaults are 1 to 20 per controller).
	ConcurrentSyncs int
	// EtcdQuotaBytes is etcd's --quota-backend-bytes: past it etcd raises its NOSPACE alarm and
	// takes no more writes (etcdhealth.go). Zero is DefaultEtcdQuota.
	EtcdQuotaBytes int64
	// EtcdArgs, APIServerArgs and ControllerManagerArgs are appended to each process's flags
	// (a flag given twice takes the last value): variants of BenchmarkIdleRSS, diagnosis.
	EtcdArgs, APIServerArgs, ControllerManagerArgs []string
}

// DefaultEtcdQuota is the quota of a cluster's etcd: a small cluster needs neither the default
// 2 GiB's headroom nor more of the pod's disk.
const DefaultEtcdQuota int64 = 1 << 30

// etcdQuota is t's quota of etcd.
func (t Tuning) etcdQuota() int64 {
	if t.EtcdQuotaBytes > 0 {
		return t.EtcdQuotaBytes
	}
	return DefaultEtcdQuota
}

// DefaultTuning is what the operator runs with. kube-apiserver collects garbage rarely while it
// starts (GOGC 200: a quarter of a start's CPU went to the collector at 50) and is held to 150 MiB
// once it serves, where its memory limit rather than GOGC sets when it collects: a wake 1.3 s
// instead of 1.7 s, and less memory idle than GOGC 50 under 160 MiB (docs/benchmarks.md "A faster
// API server start"). The environment is a process's at its start: the clusters of an upgraded
// operator take it when it starts them again.
var DefaultTuning = Tuning{APIServerGOMEMLIMIT: "150MiB", EtcdGOMEMLIMIT: "48MiB", ControllerManagerGOMEMLIMIT: "64MiB", GOGC: "50", APIServerGOGC: "200"}

// env returns the environment entries of a process with the memory limit memLimit and GOGC gogc
// (t.GOGC when empty).
func (t Tuning) env(memLimit, gogc string) []string {
	var env []string
	if memLimit != "" {
		env = append(env, "GOMEMLIMIT="+memLimit)
	}
	if gogc == "" {
		gogc = t.GOGC
	}
	if gogc != "" {
		env = append(env, "GOGC="+gogc)
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
func etcdArgs(dir string, quota int64) []string {
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
		"--quota-backend-bytes=" + strconv.FormatInt(quota, 10),
		"--auto-compaction-mode=periodic",
		"--auto-compaction-retention=1h",
	}
}

// apiServerArgs are the flags of a cluster's kube-apiserver.
func apiServerArgs(dir, advertiseHost, serviceCIDR string, p ports, t Tuning, audit bool) []string {
	pki := filepath.Join(dir, pkiDir)
	args := append(controlplane.APIServerArgs(controlplane.APIServerFiles{
		ServingCert: filepath.Join(pki, servingCertFile), ServingKey: filepath.Join(pki, servingKeyFile),
		ClientCA: filepath.Join(pki, caBundleFile), ServiceAccountKey: filepath.Join(pki, saPubFile),
		ServiceAccountSigningKey: filepath.Join(pki, saKeyFile), AuthenticationConfig: filepath.Join(dir, authConfigFile),
		EncryptionConfig: filepath.Join(dir, encryption.ConfigFile),
	}, serviceCIDR),
		"--etcd-servers=unix://"+etcdSocket, // relative to the cluster's folder, its working directory
		"--bind-address="+bindAddress(advertiseHost),
		"--secure-port="+strconv.Itoa(p.Internal),
		"--watch-cache="+strconv.FormatBool(t.WatchCache),
	)
	if audit {
		args = append(args, controlplane.AuditArgs(filepath.Join(dir, auditPolicyFile), filepath.Join(dir, logDir, auditLogFile))...)
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
	return append(args, t.APIServerArgs...)
}

// controllerManagerArgs are the flags of a cluster's kube-controller-manager: its own client
// certificate (kubeconfig in the folder), a service-account credential per controller, the
// cluster CA to sign approved CSRs, the service-account key to sign tokens, no leader election (one
// per cluster), and its health and metrics port on the loopback only.
func controllerManagerArgs(dir, serviceCIDR string, p ports, t Tuning) []string {
	pki := filepath.Join(dir, pkiDir)
	args := append(controlplane.ControllerManagerArgs(controlplane.ControllerManagerFiles{
		Kubeconfig: filepath.Join(dir, kcmKubeconfig), CACert: filepath.Join(pki, caCertFile),
		CAKey: filepath.Join(pki, caKeyFile), ServiceAccountKey: filepath.Join(pki, saKeyFile),
		RootCA: filepath.Join(pki, caBundleFile),
	}, serviceCIDR),
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(p.ControllerManager),
		"--tls-cert-file="+filepath.Join(pki, kcmServingCertFile),
		"--tls-private-key-file="+filepath.Join(pki, kcmServingKeyFile),
	)
	if n := t.ConcurrentSyncs; n > 0 {
		for _, f := range kcmConcurrencyFlags {
			args = append(args, fmt.Sprintf("--%s=%d", f, n))
		}
	}
	return append(args, t.ControllerManagerArgs...)
}

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

// dialHost is the host the operator dials the cluster's processes on: the bind address, or the
// loopback where they bind every address.
func dialHost(advertiseHost string) string {
	if h := bindAddress(advertiseHost); h != "0.0.0.0" {
		return h
	}
	return "127.0.0.1"
}

// endpoint is the https URL clients use.
func endpoint(advertiseHost string, port int) string {
	return fmt.Sprintf("https://%s", net.JoinHostPort(advertiseHost, strconv.Itoa(port)))
}
