package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/backend/controlplane"
)

// Name is the ProviderConfig spec.backend value of this backend.
const Name = "local"

// maxStateDirLen is the longest --state-dir whose etcd sockets (<state-dir>/<UID>/etcd-peer.sock)
// fit in a unix socket address (107 bytes and a NUL).
const maxStateDirLen = 107 - len("/6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a/") - len(etcdPeerSocket)

// Options configure a Backend. Zero values take the defaults named.
type Options struct {
	// Binaries are the --local-binaries folders (LoadBinaries). At least one.
	Binaries []Binaries
	// StateDir holds one folder per Cluster (--state-dir). Required.
	StateDir string
	// AdvertiseHost is the host in endpoints and the serving certificate (--local-advertise-host).
	// Default 127.0.0.1.
	AdvertiseHost string
	// MaxClusters is how many clusters may run at once (--local-max-clusters). Default 20.
	MaxClusters int
	// ServiceCIDR is the service range of new clusters (--local-service-cidr); a cluster keeps
	// the one it was created with. Default DefaultServiceCIDR.
	ServiceCIDR string
	// Tuning of the processes. Default DefaultTuning.
	Tuning *Tuning
	// StopGrace is how long a process may take to stop after SIGTERM. Default 10s.
	StopGrace time.Duration
	// HealthInterval is how often a complete cluster's controller manager is asked whether it is
	// alive; after healthFailures answers missing in a row it is restarted. Default 10s.
	HealthInterval time.Duration
	// StateRetry is how soon a cluster whose folder is damaged (StateDamaged) or cannot be written
	// (StateDirFull) is tried again. Default 30s.
	StateRetry time.Duration
	// Certificates is the lifetime of the clusters' leaf certificates. Default: a year, issued
	// anew 30 days before their end.
	Certificates certs.Lifetime
	// Notify is told when a cluster's state changes by itself. Optional.
	Notify backend.Notify
	// ListClusters lists every Cluster of the platform cluster; Start uses it to adopt the
	// folders of existing Clusters and remove the others. Required.
	ListClusters func(ctx context.Context) ([]clustersv1alpha1.Cluster, error)
	// Logger logs starts, stops, crashes and adoption. Default: discard.
	Logger logr.Logger
}

// Backend runs each Cluster as a kube-apiserver and an etcd, child processes of the operator. It
// is a leader-election runnable: only the elected replica runs clusters; when it stops (shutdown,
// lost lease) every cluster stops and its data stays for the next leader.
type Backend struct {
	opts Options
	log  logr.Logger

	mu        sync.Mutex
	started   bool
	lockedBy  string // while Start waits for the lock of --state-dir: who holds it
	instances map[types.UID]*instance
	deleting  map[types.UID]bool
	// waiting are the Clusters refused for capacity; they are notified when a place frees
	// (capacity.go).
	waiting map[types.UID]waiter
	waited  uint64 // how many waiters came: the rank of the last
	// upgrades are the clusters moving to another version, until their new API server serves.
	upgrades map[types.UID]*upgrade
	// restores are the clusters whose etcd data a snapshot replaces, until they serve again;
	// restoreErrs the clusters whose making from a snapshot failed, for their next Ensure.
	restores    map[types.UID]*restore
	restoreErrs map[types.UID]error
	ports       portAllocator
	// backupMu serializes snapshots: one at a time, whatever the cluster (disk and CPU of the pod).
	backupMu sync.Mutex
}

var (
	_ backend.Backend                = &Backend{}
	_ manager.LeaderElectionRunnable = &Backend{}
)

// New checks opts and returns a Backend. Nothing runs before Start.
func New(opts Options) (*Backend, error) {
	switch {
	case len(opts.Binaries) == 0:
		return nil, errors.New("local backend: no --local-binaries folder")
	case opts.StateDir == "":
		return nil, errors.New("local backend: --state-dir is empty")
	case opts.ListClusters == nil:
		return nil, errors.New("local backend: Options.ListClusters is nil")
	case opts.MaxClusters < 0:
		return nil, fmt.Errorf("local backend: --local-max-clusters %d is negative", opts.MaxClusters)
	}
	if opts.AdvertiseHost == "" {
		opts.AdvertiseHost = "127.0.0.1"
	}
	if opts.MaxClusters == 0 {
		opts.MaxClusters = 20
	}
	if opts.ServiceCIDR == "" {
		opts.ServiceCIDR = DefaultServiceCIDR
	}
	if err := ValidServiceCIDR(opts.ServiceCIDR); err != nil {
		return nil, fmt.Errorf("local backend: --local-service-cidr %w", err)
	}
	if opts.Tuning == nil {
		t := DefaultTuning
		opts.Tuning = &t
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 10 * time.Second
	}
	if opts.StateRetry <= 0 {
		opts.StateRetry = 30 * time.Second
	}
	if opts.HealthInterval <= 0 {
		opts.HealthInterval = 10 * time.Second
	}
	if opts.Logger.GetSink() == nil {
		opts.Logger = logr.Discard()
	}
	dir, err := filepath.Abs(opts.StateDir)
	if err != nil {
		return nil, err
	}
	if len(dir) > maxStateDirLen {
		return nil, fmt.Errorf("local backend: --state-dir %s is %d bytes long; the unix sockets of etcd inside it need it to be at most %d: choose a shorter path",
			dir, len(dir), maxStateDirLen)
	}
	opts.StateDir = dir
	return &Backend{
		opts:        opts,
		log:         opts.Logger,
		instances:   map[types.UID]*instance{},
		deleting:    map[types.UID]bool{},
		waiting:     map[types.UID]waiter{},
		upgrades:    map[types.UID]*upgrade{},
		restores:    map[types.UID]*restore{},
		restoreErrs: map[types.UID]error{},
		ports:       portAllocator{host: bindAddress(opts.AdvertiseHost), taken: map[int]bool{}},
	}, nil
}

// Name returns "local".
func (b *Backend) Name() string { return Name }

// Versions returns the versions of the binaries, newest first.
func (b *Backend) Versions() []string {
	vs := make([]string, len(b.opts.Binaries))
	for i, bin := range b.opts.Binaries {
		vs[i] = bin.Version
	}
	backend.SortNewestFirst(vs)
	return vs
}

// NeedLeaderElection is true: only the leader runs clusters.
func (b *Backend) NeedLeaderElection() bool { return true }

// Start adopts the folders of existing Clusters (same ports, same data), moves aside the folders
// of Clusters that are gone, and removes the kept encryption keys no snapshot of a gone Cluster
// needs (settleGoneKeys); then it runs until ctx ends and stops every cluster, keeping their
// data. A backups folder that holds the wrapping key is refused (checkWrappingKeyApart).
func (b *Backend) Start(ctx context.Context) error {
	if err := os.MkdirAll(b.opts.StateDir, 0o700); err != nil {
		return fmt.Errorf("local backend: --state-dir: %w", err)
	}
	if err := b.checkWrappingKeyApart(); err != nil {
		return err
	}
	lock, err := lockStateDir(ctx, b.opts.StateDir, func(holder string) {
		b.log.Info("Waiting for the lock of --state-dir: another process runs its clusters", "holder", holder)
		b.mu.Lock()
		b.lockedBy = holder
		b.mu.Unlock()
	})
	if err != nil || lock == nil {
		return err
	}
	defer lock.Close() // after stopAll: the next process may run the clusters
	// The folders are read before the Clusters are listed: a folder whose Cluster is missing from
	// the later list belongs to a deleted Cluster (UIDs are never reused).
	entries, err := os.ReadDir(b.opts.StateDir)
	if err != nil {
		return fmt.Errorf("local backend: reading --state-dir: %w", err)
	}
	clusters, err := b.opts.ListClusters(ctx)
	if err != nil {
		return fmt.Errorf("local backend: listing Clusters to adopt their folders (no folder is moved or deleted): %w", err)
	}
	byUID := map[types.UID]*clustersv1alpha1.Cluster{}
	for i := range clusters {
		byUID[clusters[i].UID] = &clusters[i]
	}

	b.settleGoneKeys(byUID)

	b.mu.Lock()
	for _, e := range entries {
		if !e.IsDir() || uuid.Validate(e.Name()) != nil {
			continue // not a Cluster's folder (the lock, the kind backend's folder)
		}
		dir := filepath.Join(b.opts.StateDir, e.Name())
		cl := byUID[types.UID(e.Name())]
		if cl == nil {
			// Never deleted: the Cluster may be there and not seen (QuarantineDir says how to
			// restore or purge it).
			to, err := quarantine(b.opts.StateDir, e.Name(), time.Now())
			if err != nil {
				b.log.Error(err, "No Cluster has the UID of a cluster folder, and moving it aside failed; it stays where it is", "dir", dir)
				continue
			}
			metricQuarantined.Inc()
			b.log.Error(nil, "No Cluster has the UID of a cluster folder: moved it aside, not deleted. Restore it by moving it back under the UID of its Cluster, or delete it",
				"dir", dir, "movedTo", to, "uid", e.Name())
			continue
		}
		m, err := readMeta(dir)
		if err != nil {
			b.log.Error(err, "Not adopting a cluster folder; the Cluster's next reconcile starts it anew with its data", "dir", dir)
			continue
		}
		if finishRestore(dir, &m) {
			continue // a restore to do again: the Cluster's next reconcile does it
		}
		if etcdLost(dir, &m, cl) {
			b.log.Error(nil, "The etcd data of a cluster that ran is gone: starting it EMPTY", "dir", dir)
		}
		if _, err := b.runLocked(dir, m); err != nil {
			b.log.Error(err, "Adopting a cluster folder failed", "dir", dir)
			continue
		}
		b.log.Info("Adopted a cluster", "cluster", m.Namespace+"/"+m.Name, "version", m.Version, "apiServerPort", m.Ports.APIServer)
	}
	b.started = true
	b.lockedBy = ""
	b.mu.Unlock()

	<-ctx.Done()
	b.stopAll()
	return nil
}

// stopAll stops every cluster gracefully, in parallel, and forgets them.
func (b *Backend) stopAll() {
	b.mu.Lock()
	b.started = false
	all := b.instances
	b.instances = map[types.UID]*instance{}
	b.ports.taken = map[int]bool{}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range all {
		wg.Go(func() { in.stop(false) })
	}
	wg.Wait()
	b.log.Info("Stopped every local cluster; their data stays", "clusters", len(all))
}

// Ensure starts cl's cluster if it does not run and returns its state. The version follows the
// contract of backend.Backend: a new cluster runs want.Version, an existing one the version of its
// record; an allowed change stops the cluster and starts it again with the new version's
// binaries in the same folder, on the same ports (upgrade).
func (b *Backend) Ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started {
		msg := "The local backend is starting (adopting the clusters of an earlier run) or this replica is not the leader."
		if b.lockedBy != "" {
			msg = fmt.Sprintf("The local backend waits for the lock of --state-dir %s, held by %s: the process that ran these clusters before has not ended yet.",
				b.opts.StateDir, b.lockedBy)
		}
		return backend.State{Reason: backend.ReasonBackendStarting, RetryAfter: time.Second, Message: msg}, nil
	}
	if b.deleting[cl.UID] {
		return backend.State{}, fmt.Errorf("cluster %s/%s is being deleted", cl.Namespace, cl.Name)
	}
	in := b.instances[cl.UID]
	if up := b.upgrades[cl.UID]; up != nil {
		return b.upgradeStateLocked(cl.UID, in, up), nil
	}
	if r := b.restores[cl.UID]; r != nil {
		return b.restoreStateLocked(cl.UID, in, r), nil
	}
	if err := b.restoreErrs[cl.UID]; err != nil {
		delete(b.restoreErrs, cl.UID) // reported once; the next Ensure tries again
		return backend.State{}, err
	}
	repaired := ""
	var change *backend.VersionChange
	if in == nil {
		if _, err := os.Stat(filepath.Join(b.dir(cl.UID), metaFile)); want.NotOffered != nil && errors.Is(err, os.ErrNotExist) {
			if _, ran := localStatus(cl); !ran {
				return backend.State{}, want.NotOffered // never made: nothing to keep running
			}
		}
		if b.usedLocked() >= b.opts.MaxClusters {
			return backend.State{}, b.refuseLocked(cl.UID, backend.RefOf(cl)) // started once a place frees
		}
		delete(b.waiting, cl.UID)
		dir := b.dir(cl.UID)
		m, err := readMeta(dir)
		running := m.Version // "" for a cluster not made yet
		switch {
		case errors.Is(err, os.ErrNotExist):
			m = meta{UID: cl.UID, Version: want.Version, ServiceCIDR: b.opts.ServiceCIDR}
			running = ""
			if lost, ps := folderLost(dir, cl); lost != nil {
				m.DataLost, m.Ports = lost, ps // the same ports, if free: the endpoint stays
				b.log.Error(nil, "The folder of a cluster that ran is gone: creating it anew, EMPTY", "cluster", cl.Namespace+"/"+cl.Name, "dir", dir)
			} else if _, ran := localStatus(cl); ran {
				// The folder is there but its record is not (removed by hand, or kept aside by a
				// repair whose start then failed): rebuilt like a garbled one.
				m, repaired = b.repairMeta(dir, cl, want.Version, err)
				running = m.Version
			}
		case err != nil:
			m, repaired = b.repairMeta(dir, cl, want.Version, err)
			running = m.Version
		}
		target, ch, err := backend.Resolve(running, want)
		if err != nil {
			return backend.State{}, err
		}
		m.Version, change = target, b.checkChangeLocked(ch)
		if change != nil && change.Refused {
			m.Version = change.From // refused here: the cluster starts as it ran
		}
		if change != nil && !change.Refused {
			// The cluster does not run: it starts with the new version's binaries at once.
			b.upgrades[cl.UID] = &upgrade{change: change}
		}
		m.Namespace, m.Name, m.Profile = cl.Namespace, cl.Name, cl.Spec.Profile
		m.NoAudit = !want.Audit
		pending := finishRestore(dir, &m)
		if pending || (running == "" && m.DataLost == nil && cl.Annotations[backend.AnnotationRestoreFrom] != "") {
			return b.restoreNewLocked(ctx, cl, dir, m)
		}
		if etcdLost(dir, &m, cl) {
			b.log.Error(nil, "The etcd data of a cluster that ran is gone: starting it EMPTY", "cluster", cl.Namespace+"/"+cl.Name, "dir", dir)
		}
		if in, err = b.runLocked(dir, m); err != nil {
			delete(b.upgrades, cl.UID)
			return backend.State{}, b.stateError(err)
		}
		in.mu.Lock()
		port := in.meta.Ports.APIServer
		in.mu.Unlock()
		b.log.Info("Starting a cluster", "cluster", m.Namespace+"/"+m.Name, "version", m.Version, "apiServerPort", port)
	} else {
		in.mu.Lock()
		running := in.meta.Version
		in.mu.Unlock()
		_, ch, err := backend.Resolve(running, want)
		if err != nil {
			return backend.State{}, err
		}
		if change = b.checkChangeLocked(ch); change != nil && !change.Refused {
			up := &upgrade{change: change, old: in}
			b.upgrades[cl.UID] = up
			go b.upgrade(in, up)
		}
	}
	if up := b.upgrades[cl.UID]; up != nil {
		return b.upgradeStateLocked(cl.UID, in, up), nil
	}
	in.setRotation(cl.Annotations[backend.AnnotationRotateEncryptionKey])
	if err := in.setAudit(want.Audit); err != nil {
		return backend.State{}, err
	}
	s := in.state()
	s.Repaired = repaired
	s.VersionChange = change // refused, or nil
	return s, nil
}

// upgrade is a cluster moving in place to another version.
type upgrade struct {
	change *backend.VersionChange
	// old is the instance of the version it moves from while it stops; nil once the new
	// version's processes were started.
	old *instance
}

// checkChangeLocked adds the local backend's refusals to an allowed change: a version no
// --local-binaries folder serves, and an etcd that would skip or go back a release line.
func (b *Backend) checkChangeLocked(c *backend.VersionChange) *backend.VersionChange {
	if c == nil || c.Refused {
		return c
	}
	to, ok := b.binaries(c.To)
	if !ok {
		return backend.Refuse(c.From, c.To, fmt.Sprintf(
			"upgrade from %s to %s is refused: no --local-binaries folder serves Kubernetes %s (served: %s); add one, or set spec.kubernetes.version back to %s",
			c.From, c.To, c.To, strings.Join(b.Versions(), ", "), c.From))
	}
	fromLine, _ := backend.EtcdLine(c.From)
	if from, ok := b.binaries(c.From); ok {
		fromLine = from.EtcdLine()
	}
	switch toLine := to.EtcdLine(); {
	case toLine < fromLine:
		return backend.Refuse(c.From, c.To, fmt.Sprintf(
			"change from %s to %s is refused: it would move etcd back from 3.%d to 3.%d, which etcd cannot do with the cluster's data; set spec.kubernetes.version back to %s",
			c.From, c.To, fromLine, toLine, c.From))
	case toLine > fromLine+1:
		return backend.Refuse(c.From, c.To, fmt.Sprintf(
			"upgrade from %s to %s is refused: it would move etcd from 3.%d to 3.%d, and etcd moves one release line at a time; upgrade through a version whose etcd is 3.%d first",
			c.From, c.To, fromLine, toLine, fromLine+1))
	}
	return c
}

// upgrade stops the cluster of old gracefully (kube-apiserver and kube-controller-manager, then
// etcd), records the new version and starts the cluster again in the same folder on the same
// ports: etcd first, then kube-apiserver, then kube-controller-manager. Data, CA, certificates
// and every issued kubeconfig stay. A Delete or a stop of the backend meanwhile wins.
func (b *Backend) upgrade(old *instance, up *upgrade) {
	old.log.Info("Upgrading a cluster in place", "from", up.change.From, "to", up.change.To)
	old.stop(false)
	old.mu.Lock()
	m := old.meta
	old.mu.Unlock()
	b.mu.Lock()
	if b.instances[m.UID] != old || !b.started {
		delete(b.upgrades, m.UID) // deleted, or the backend stopped: the record still names From
		b.mu.Unlock()
		return
	}
	delete(b.instances, m.UID)
	b.ports.release(m.Ports) // and kept again at once: the endpoint stays
	m.Version = up.change.To
	_, err := b.runLocked(old.dir, m)
	up.old = nil
	if err != nil {
		delete(b.upgrades, m.UID) // the next Ensure starts the cluster from its record
		old.log.Error(err, "Starting the upgraded cluster failed; the next reconcile tries again", "version", m.Version)
		b.freedLocked()
	}
	b.mu.Unlock()
	b.notify(old)
}

// upgradeStateLocked is the state of a cluster that moves to another version: not Ready while its
// old processes stop and its new ones start; done (and forgotten) once the new API server serves
// and reports the new version.
func (b *Backend) upgradeStateLocked(uid types.UID, in *instance, up *upgrade) backend.State {
	c := *up.change
	if up.old != nil || in == nil {
		from := up.old
		if from == nil {
			from = in
		}
		var s backend.State
		if from != nil {
			s = from.state()
		}
		msg := fmt.Sprintf("Upgrading from Kubernetes %s to %s: the cluster's processes stop and start again with the new binaries.", c.From, c.To)
		s.Ready, s.Reason, s.Message, s.RetryAfter = false, backend.ReasonUpgrading, msg, time.Second
		s.ControllerManager = &backend.Part{Reason: backend.ReasonUpgrading, Message: msg}
		s.Runs, s.Version, s.VersionChange = c.From, "", &c
		return s
	}
	s := in.state()
	if s.Ready && backend.SameVersion(s.Version, c.To) {
		delete(b.upgrades, uid)
		b.log.Info("Upgraded a cluster", "cluster", s.Info, "from", c.From, "to", c.To)
		return s
	}
	c.Message = fmt.Sprintf("Upgrading from Kubernetes %s to %s: the new API server starts on the same data.", c.From, c.To)
	s.Runs, s.VersionChange = c.From, &c
	return s
}

// folderLost returns now and the ports the cluster had if cl's folder dir is gone although the
// cluster ran here before: the Cluster's status holds this backend's provider status, which is
// written only once its folder exists.
func folderLost(dir string, cl *clustersv1alpha1.Cluster) (*time.Time, ports) {
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		return nil, ports{}
	}
	ps, ran := localStatus(cl)
	if !ran {
		return nil, ports{}
	}
	now := time.Now().UTC().Truncate(time.Second)
	return &now, ps.Ports
}

// runLocked prepares the folder of a cluster (ports, certificates, authentication config, its
// record) and starts its processes.
func (b *Backend) runLocked(dir string, m meta) (*instance, error) {
	bins, ok := b.binaries(m.Version)
	if !ok {
		return nil, backend.Errorf(backend.ReasonVersionNotSupported,
			"the cluster runs Kubernetes %s, but no --local-binaries folder serves it (served: %v); add a folder with that version",
			m.Version, b.Versions())
	}
	if err := os.MkdirAll(filepath.Join(dir, logDir), 0o700); err != nil {
		return nil, err
	}
	var err error
	for _, p := range []*int{&m.Ports.APIServer, &m.Ports.ControllerManager} {
		if *p, _, err = b.ports.keep(*p); err != nil {
			b.ports.release(m.Ports)
			return nil, err
		}
	}
	in, err := b.prepareLocked(dir, m, bins)
	if err != nil {
		b.ports.release(m.Ports) // the cluster does not run; its ports may go to another
		return nil, err
	}
	b.instances[m.UID] = in
	in.start()
	return in, nil
}

// prepareLocked writes what cluster m needs in its folder dir besides its ports (certificates,
// authentication config, its record) and returns its instance, not started.
func (b *Backend) prepareLocked(dir string, m meta, bins Binaries) (*instance, error) {
	// The kubernetes Service's address is a name of the API server too.
	p, err := b.loadPKI(dir, m)
	if err != nil {
		return nil, err
	}
	authPath := filepath.Join(dir, authConfigFile)
	if _, err := os.Stat(authPath); errors.Is(err, os.ErrNotExist) {
		if err := authconfig.WriteFile(authPath, nil); err != nil { // no issuer yet
			return nil, err
		}
	}
	enc, err := ensureEncryption(dir)
	if err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(dir, auditPolicyFile), []byte(controlplane.AuditPolicy), 0o600); err != nil {
		return nil, err
	}
	if err := writeMeta(dir, m); err != nil {
		return nil, err
	}
	in, err := newInstance(b, dir, m, bins, p)
	if err != nil {
		return nil, err
	}
	in.enc = enc
	return in, nil
}

// loadPKI loads the PKI of cluster m in its folder dir, issuing what is missing or due.
func (b *Backend) loadPKI(dir string, m meta) (*pki, error) {
	// The kubernetes Service's address is a name of the API server too.
	return loadOrCreatePKI(filepath.Join(dir, pkiDir), append(b.hosts(), kubernetesServiceIP(m.serviceCIDR()).String()), b.opts.Certificates)
}

// reassignAPIServerPort gives in's API server a new port if another process took its port.
func (b *Backend) reassignAPIServerPort(in *instance) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.meta.Ports.APIServer
	if b.ports.free(old) {
		return nil
	}
	port, err := b.ports.allocate()
	if err != nil {
		return err
	}
	m := in.meta
	m.Ports.APIServer = port
	if err := writeMeta(in.dir, m); err != nil {
		return err
	}
	delete(b.ports.taken, old)
	in.meta = m
	in.log.Info("The API server's port was taken by another process; it moves", "oldPort", old, "port", port)
	go in.restart(procControllerManager) // after in.mu is released
	return nil
}

func (b *Backend) hosts() []string {
	hosts := []string{"127.0.0.1", "localhost", b.opts.AdvertiseHost}
	slices.Sort(hosts)
	return slices.Compact(hosts)
}

func (b *Backend) binaries(version string) (Binaries, bool) {
	for _, bin := range b.opts.Binaries {
		if backend.SameVersion(bin.Version, version) {
			return bin, true
		}
	}
	return Binaries{}, false
}

func (b *Backend) dir(uid types.UID) string { return filepath.Join(b.opts.StateDir, string(uid)) }

// Delete kills cl's processes and removes its folder. Its snapshots stay (backup.go), and the
// encryption keys they need beside them (settleDeletedKeys).
func (b *Backend) Delete(ctx context.Context, cl *clustersv1alpha1.Cluster) (bool, error) {
	b.mu.Lock()
	if !b.started {
		b.mu.Unlock()
		return false, nil
	}
	in := b.instances[cl.UID]
	delete(b.instances, cl.UID)
	delete(b.waiting, cl.UID)
	delete(b.upgrades, cl.UID)
	delete(b.restores, cl.UID)
	delete(b.restoreErrs, cl.UID)
	b.deleting[cl.UID] = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.deleting, cl.UID)
		b.mu.Unlock()
	}()

	if in != nil {
		in.stop(true)
		b.log.Info("Stopped a cluster for deletion", "cluster", cl.Namespace+"/"+cl.Name)
	}
	b.mu.Lock()
	if in != nil {
		b.ports.release(in.meta.Ports)
	}
	b.freedLocked() // also for a cluster that was being made from a snapshot
	b.mu.Unlock()
	if err := b.settleDeletedKeys(cl.UID); err != nil {
		return false, err
	}
	if err := os.RemoveAll(b.dir(cl.UID)); err != nil {
		return false, fmt.Errorf("removing the cluster's folder %s: %w", b.dir(cl.UID), err)
	}
	backend.ForgetCertificates(backend.RefOf(cl))
	return true, nil
}

// AdminConfig returns a rest.Config that authenticates as the operator's admin user
// (system:masters) in cl's cluster.
func (b *Backend) AdminConfig(_ context.Context, cl *clustersv1alpha1.Cluster) (*rest.Config, error) {
	b.mu.Lock()
	in := b.instances[cl.UID]
	b.mu.Unlock()
	if in == nil {
		return nil, fmt.Errorf("the local cluster of %s/%s does not run", cl.Namespace, cl.Name)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return adminConfig(endpoint(b.opts.AdvertiseHost, in.meta.Ports.APIServer), in.pki), nil
}

// PIDs returns the process IDs of the cluster with uid, by process name ("etcd",
// "kube-apiserver", "kube-controller-manager"): for diagnosis and tests.
func (b *Backend) PIDs(uid types.UID) map[string]int {
	b.mu.Lock()
	in := b.instances[uid]
	b.mu.Unlock()
	if in == nil {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]int, len(in.pids))
	for k, v := range in.pids {
		out[k] = v
	}
	return out
}

// Dir returns the folder of the cluster with uid.
func (b *Backend) Dir(uid types.UID) string { return b.dir(uid) }

func (b *Backend) notify(in *instance) {
	in.mu.Lock()
	m := in.meta
	in.mu.Unlock()
	b.notifyRef(m)
}

// notifyRef notifies the Cluster of the record m.
func (b *Backend) notifyRef(m meta) {
	if b.opts.Notify != nil {
		b.opts.Notify(backend.Ref{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, Profile: m.Profile})
	}
}
