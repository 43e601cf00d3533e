package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/backend/objectstore"
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
	// ReadSecret reads the data of a Secret of SecretNamespace, the operator's namespace: the
	// credentials of spec.backup.objectStore. Optional: without it, a ProviderConfig with an
	// object store has its snapshots refused (BackupUnavailable).
	ReadSecret func(ctx context.Context, name string) (map[string][]byte, error)
	// SecretNamespace is the namespace ReadSecret reads, named in messages.
	SecretNamespace string
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
	// doors are the clusters' front doors (frontdoor.go), by UID: they outlive the instances of
	// an upgrade, a restore or a hibernation. placeFreed is closed when a place frees (a wake
	// waiting for one).
	doors      map[types.UID]*frontDoor
	placeFreed chan struct{}
	// wakeSlots bounds the wakes under way at once to the cores (hibernate.go); waking counts the
	// wakes asked for whose API server does not serve yet: the woken controller managers start
	// once it is 0 (instance.startControllerManager).
	wakeSlots chan struct{}
	waking    atomic.Int32
	// pools are the profiles' spec.pool, by profile name (pool.go).
	pools map[string]*pool
	// backupMu serializes snapshots: one at a time, whatever the cluster (disk and CPU of the pod).
	backupMu sync.Mutex
}

var (
	_ backend.Backend                = &Backend{}
	_ backend.Backend                = &Bound{}
	_ backend.Backups                = &Bound{}
	_ backend.Authenticator          = &Bound{}
	_ backend.Pooler                 = &Bound{}
	_ backend.Pooler                 = &Backend{}
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
		doors:       map[types.UID]*frontDoor{},
		pools:       map[string]*pool{},
		wakeSlots:   make(chan struct{}, max(runtime.NumCPU(), 2)),
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

// settings are what a cluster's ProviderConfig says to the local backend.
type settings struct {
	// audit: the clusters' API servers keep audit logs (spec.audit, on unless disabled).
	audit bool
	// objectStore keeps the snapshots in an object store as well (spec.backup.objectStore;
	// objectstore.go); nil for none.
	objectStore *providersv1alpha1.BackupObjectStore
	// idleAfter hibernates a cluster after that long without a client (spec.hibernation.idleAfter;
	// hibernate.go); 0 for never.
	idleAfter time.Duration
}

// defaultSettings are those of a ProviderConfig with an empty spec: the unbound Backend's.
var defaultSettings = settings{audit: true}

// Bound is the Backend bound to one ProviderConfig (ForProfile): it runs the same clusters, with
// the settings of that ProviderConfig.
type Bound struct {
	*Backend
	set settings
	// records caches the snapshot records read from the object store; cat is its client, made
	// with the values of the credentials Secret whose checksum is catSum (objectstore.go).
	records objectstore.Records
	catMu   sync.Mutex
	cat     *objectstore.Catalog
	catSum  string
}

// ForProfile returns the Backend bound to pc: its clusters keep audit logs as pc's spec.audit
// says; a change of it restarts their API servers (audit.go). With spec.backup.objectStore, their
// snapshots go to that object store too (objectstore.go).
func (b *Backend) ForProfile(pc *providersv1alpha1.ProviderConfig) backend.Backend {
	set := settings{audit: pc.Spec.Audit.On(), idleAfter: pc.Spec.Hibernation.Idle()}
	if pc.Spec.Backup != nil && pc.Spec.Backup.ObjectStore != nil {
		set.objectStore = pc.Spec.Backup.ObjectStore.DeepCopy()
	}
	return &Bound{Backend: b, set: set}
}

// Ensure is Backend.Ensure with the bound ProviderConfig's settings. A Cluster not made yet from
// a snapshot (AnnotationRestoreFrom) that the state folder lacks has it fetched from the object
// store first (objectstore.go).
func (v *Bound) Ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	if ref, ok := cl.Annotations[backend.AnnotationRestoreFrom]; ok && v.set.objectStore != nil && !exists(v.Dir(cl.UID)) {
		if uid, name, err := backend.ParseSnapshotRef(ref); err == nil {
			if err := v.fetch(ctx, cl, uid, name); err != nil {
				return backend.State{}, err
			}
		}
	}
	return v.Backend.ensure(ctx, cl, want, v.set)
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
	b.settleSpares(entries, byUID)

	b.mu.Lock()
	b.adoptLocked(entries, byUID)
	b.started = true
	b.lockedBy = ""
	b.fillLocked()
	b.mu.Unlock()

	idleCtx, stopIdle := context.WithCancel(ctx)
	idleDone := make(chan struct{})
	go func() { defer close(idleDone); b.hibernateIdle(idleCtx) }()
	<-ctx.Done()
	stopIdle()
	<-idleDone
	b.stopAll()
	return nil
}

// adoptLocked starts the cluster of each folder of entries (the folders of --state-dir) whose
// Cluster is in byUID, from its record, and moves the folders of the others aside.
func (b *Backend) adoptLocked(entries []os.DirEntry, byUID map[types.UID]*clustersv1alpha1.Cluster) {
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
}

// stopAll stops every cluster gracefully, in parallel, and forgets them.
func (b *Backend) stopAll() {
	b.mu.Lock()
	b.started = false
	all, doors := b.instances, b.doors
	b.instances, b.doors = map[types.UID]*instance{}, map[types.UID]*frontDoor{}
	b.ports.taken = map[int]bool{}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range doors {
		wg.Go(d.Close)
	}
	for _, in := range all {
		wg.Go(func() { in.stop(false) })
	}
	wg.Wait()
	backend.SetHibernated(Name, 0)
	b.log.Info("Stopped every local cluster; their data stays", "clusters", len(all))
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
	door := b.takeDoorLocked(cl.UID)
	b.countHibernatedLocked()
	b.mu.Unlock()
	if door != nil {
		door.Close()
	}
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
	if in != nil && in.dir != b.dir(cl.UID) {
		_ = os.Remove(in.dir) // the old name of a claimed spare's folder (pool.go): a link
	}
	backend.ForgetCertificates(backend.RefOf(cl))
	return true, nil
}

// AdminConfig returns a rest.Config that authenticates as the operator's admin user
// (system:masters) in cl's cluster, through its endpoint: a hibernated cluster wakes on its
// first request (one pinned in hibernation is refused here, saying so).
func (b *Backend) AdminConfig(_ context.Context, cl *clustersv1alpha1.Cluster) (*rest.Config, error) {
	b.mu.Lock()
	in := b.instances[cl.UID]
	b.mu.Unlock()
	if in == nil {
		return nil, fmt.Errorf("the local cluster of %s/%s does not run", cl.Namespace, cl.Name)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.asleepLocked() && in.meta.Demanded == backend.HibernatePinned {
		return nil, errPinned
	}
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
	if b.opts.Notify != nil && m.Spare == "" { // a spare has no Cluster to tell
		b.opts.Notify(backend.Ref{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}, Profile: m.Profile})
	}
}
