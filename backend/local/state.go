package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
)

// The layout of a cluster's folder, <state-dir>/<Cluster UID>/. The folder is 0700: only the
// operator's user reaches what is in it, etcd's sockets included.
const (
	metaFile       = "cluster.json"      // meta, written atomically
	pkiDir         = "pki"               // certificates and keys (pki.go)
	etcdDataDir    = "etcd"              // etcd's data
	authConfigFile = authconfig.FileName // the structured authentication config
	// etcdSocket and etcdPeerSocket are etcd's client and peer listeners: unix sockets, named
	// relative to the folder (every process of the cluster runs in it), so the length limit of a
	// socket path (108 bytes) binds only the operator's own health check (maxStateDirLen). The
	// ":0" is part of the file's name: etcd 3.5 and 3.6 require every advertised URL, unix ones
	// too, to be "host:port" (etcd 3.7 no longer does), and listen on, and clients dial, the
	// socket file named by the URL's host:port, so "unix://etcd.sock:0" works with all three.
	etcdSocket     = "etcd.sock:0"
	etcdPeerSocket = "etcd-peer.sock:0"
	kcmKubeconfig  = "kube-controller-manager.kubeconfig" // its credentials, 0600
	logDir         = "logs"                               // one log file per process
	etcdLogFile    = "etcd.log"
	apiLogFile     = "kube-apiserver.log"
	kcmLogFile     = "kube-controller-manager.log"
	// auditPolicyFile is the API server's audit policy (controlplane.AuditPolicy); its audit log
	// is auditLogFile in logDir, rotated beside it (controlplane.AuditMaxBackups).
	auditPolicyFile = "audit-policy.yaml"
	auditLogFile    = "audit.log"
)

// meta is what a cluster's folder records about it, so that the cluster can be adopted again after
// a restart of the operator: same ports, same version.
type meta struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Profile   string    `json:"profile"`
	// Version is the Kubernetes version the cluster was created with.
	Version string `json:"version"`
	Ports   ports  `json:"ports"`
	// DataLost, when set, is when the cluster was created anew because its folder was gone
	// although the Cluster had run before (a lost volume).
	DataLost *time.Time `json:"dataLost,omitempty"`
	// LostPart is what was gone when DataLost was set: empty for the whole folder, lostEtcd for
	// the etcd data folder alone.
	LostPart string `json:"lostPart,omitempty"`
	// ServiceCIDR is the cluster's service range, fixed when it is created (--local-service-cidr
	// then); empty in the records of clusters made before it was recorded: LegacyServiceCIDR.
	ServiceCIDR string `json:"serviceCIDR,omitempty"`
	// Restoring is the snapshot a restore puts in place, while it does (backup.go).
	Restoring *backend.Snapshot `json:"restoring,omitempty"`
	// Restored is the last restore from a snapshot, done or failed.
	Restored *backend.Restored `json:"restored,omitempty"`
	// NoAudit: the ProviderConfig turned the audit logs off (spec.audit.disabled); absent in the
	// records of clusters made before audit logs, which get them.
	NoAudit bool `json:"noAudit,omitempty"`
	// Hibernated, when set, says the cluster is hibernated (hibernate.go): no process runs, and a
	// restarted operator keeps it so.
	Hibernated *hibernated `json:"hibernated,omitempty"`
	// Demanded is the value of the Cluster's hibernate annotation the cluster was last hibernated
	// for ("true" or "pinned"), or empty: a demand is carried out once.
	Demanded string `json:"demanded,omitempty"`
	// Spare, when set, is the profile a spare cluster is kept for (pool.go): it belongs to no
	// Cluster yet, and its folder is <state-dir>/<UID> with a UID of spareDirPrefix.
	Spare string `json:"spare,omitempty"`
}

// serviceCIDR is the cluster's service range.
func (m meta) serviceCIDR() string {
	if m.ServiceCIDR == "" {
		return LegacyServiceCIDR
	}
	return m.ServiceCIDR
}

// lostEtcd is meta.LostPart when only the etcd data folder was gone.
const lostEtcd = "etcd"

// ports are a cluster's TCP ports: its endpoint's (APIServer, the front door: frontdoor.go) and
// the API server's own (Internal) on the advertise host, the controller manager's (health and
// metrics) on the loopback. etcd has none: it listens on unix sockets. Records of clusters made
// before the front door have no Internal port: one is given when they start.
type ports struct {
	APIServer         int `json:"apiServer"`
	Internal          int `json:"internal,omitempty"`
	ControllerManager int `json:"controllerManager"`
}

func readMeta(dir string) (meta, error) {
	var m meta
	data, err := os.ReadFile(filepath.Join(dir, metaFile))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("%s: %w", filepath.Join(dir, metaFile), err)
	}
	if m.UID == "" || m.Version == "" {
		return m, fmt.Errorf("%s: uid or version missing", filepath.Join(dir, metaFile))
	}
	return m, nil
}

func writeMeta(dir string, m meta) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, metaFile), data, 0o600)
}

// portAllocator hands out free TCP ports. Ports are checked by binding them, so a port taken by
// any other process is never handed out; taken ports are remembered until released, so that two
// clusters starting at once never get the same one.
type portAllocator struct {
	host  string
	taken map[int]bool
}

// free reports whether port can be bound on the allocator's host now.
func (a *portAllocator) free(port int) bool {
	if port <= 0 {
		return false
	}
	l, err := net.Listen("tcp", net.JoinHostPort(a.host, strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// allocate returns a port the kernel considers free and nobody here holds.
func (a *portAllocator) allocate() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(a.host, "0"))
		if err != nil {
			return 0, fmt.Errorf("finding a free port on %s: %w", a.host, err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !a.taken[port] {
			a.taken[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no free port found in 100 tries")
}

// keep reuses port if nobody holds it, else allocates another. changed reports a new port.
func (a *portAllocator) keep(port int) (p int, changed bool, err error) {
	if port > 0 && !a.taken[port] && a.free(port) {
		a.taken[port] = true
		return port, false, nil
	}
	p, err = a.allocate()
	return p, err == nil, err
}

func (a *portAllocator) release(ps ports) {
	delete(a.taken, ps.Internal)
	delete(a.taken, ps.ControllerManager)
}
