package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
	"github.com/openmcp-local/cluster-provider/backend/controlplane"
)

// Ensure starts cl's cluster if it does not run and returns its state, as a Backend bound to a
// ProviderConfig with an empty spec would (audit on): the operator uses the bound Backend
// (ForProfile); the unbound one serves tests and tools.
func (b *Backend) Ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	return b.ensure(ctx, cl, want, defaultSettings)
}

// ensure starts cl's cluster if it does not run and returns its state, with the settings of its
// profile. The version follows the contract of backend.Backend: a new cluster runs want.Version,
// an existing one the version of its record; an allowed change stops the cluster and starts it
// again with the new version's binaries in the same folder, on the same ports (upgrade).
func (b *Backend) ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want, set settings) (backend.State, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, busy, err := b.busyLocked(cl); busy {
		return s, err
	}
	in := b.instances[cl.UID]
	var (
		change   *backend.VersionChange // refused, or nil: an allowed one is in b.upgrades
		warnings []backend.Warning
	)
	if in == nil {
		made, err := b.makeLocked(ctx, cl, want, set)
		switch {
		case err != nil:
			return backend.State{}, err
		case made.restoring != nil:
			return *made.restoring, nil
		}
		in, change, warnings = made.in, made.change, made.warnings
	} else {
		var err error
		if change, err = b.moveLocked(cl, in, want); err != nil {
			return backend.State{}, err
		}
	}
	if up := b.upgrades[cl.UID]; up != nil {
		return b.upgradeStateLocked(cl.UID, in, up), nil
	}
	in.setRotation(cl.Annotations[backend.AnnotationRotateEncryptionKey])
	if err := in.setAudit(set.audit); err != nil {
		return backend.State{}, err
	}
	b.setHibernation(in, set.idleAfter, cl.Annotations[backend.AnnotationHibernate])
	s := in.state()
	s.Warnings = warnings
	s.Notices = in.takeNotices()
	s.VersionChange = change
	return s, nil
}

// busyLocked reports whether Ensure must not start or change cl's cluster now, and the State or
// error to return: the backend has not started (or waits for the lock of --state-dir), the
// cluster is being deleted, upgraded or restored, or its making from a snapshot failed (reported
// once: the next Ensure tries again).
func (b *Backend) busyLocked(cl *clustersv1alpha1.Cluster) (backend.State, bool, error) {
	if !b.started {
		msg := "The local backend is starting (adopting the clusters of an earlier run) or this replica is not the leader."
		if b.lockedBy != "" {
			msg = fmt.Sprintf("The local backend waits for the lock of --state-dir %s, held by %s: the process that ran these clusters before has not ended yet.",
				b.opts.StateDir, b.lockedBy)
		}
		return backend.State{Reason: backend.ReasonBackendStarting, RetryAfter: time.Second, Message: msg}, true, nil
	}
	if b.deleting[cl.UID] {
		return backend.State{}, true, fmt.Errorf("cluster %s/%s is being deleted", cl.Namespace, cl.Name)
	}
	in := b.instances[cl.UID]
	if up := b.upgrades[cl.UID]; up != nil {
		return b.upgradeStateLocked(cl.UID, in, up), true, nil
	}
	if r := b.restores[cl.UID]; r != nil {
		return b.restoreStateLocked(cl.UID, in, r), true, nil
	}
	if err := b.restoreErrs[cl.UID]; err != nil {
		delete(b.restoreErrs, cl.UID)
		return backend.State{}, true, err
	}
	return backend.State{}, false, nil
}

// made is what makeLocked did for a cluster that did not run.
type made struct {
	// in runs the cluster, unless restoring is set.
	in *instance
	// change is the version change: refused, or allowed and in b.upgrades, or nil.
	change *backend.VersionChange
	// warnings are what was repaired of the cluster's record.
	warnings []backend.Warning
	// restoring is the State of a cluster being made from a snapshot: Ensure returns it.
	restoring *backend.State
}

// makeLocked starts the cluster of cl, which does not run: from its record if it has one (a
// cluster of an earlier run, or stopped for an upgrade that failed), else a new one of
// want.Version, or one made from a snapshot. It is refused for capacity until a place frees.
func (b *Backend) makeLocked(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want, set settings) (made, error) {
	dir := b.dir(cl.UID)
	if in := b.claimNewLocked(cl, dir, want); in != nil {
		return made{in: in}, nil
	}
	if err := b.admitLocked(cl, dir, want); err != nil {
		return made{}, err
	}
	m, running, warnings := b.recordLocked(cl, dir, want.Version)
	target, ch, err := backend.Resolve(running, want)
	if err != nil {
		return made{}, err
	}
	change := b.checkChangeLocked(ch)
	m.Version = target
	switch {
	case change != nil && change.Refused:
		m.Version = change.From // refused here: the cluster starts as it ran
	case change != nil:
		// The cluster does not run: it starts with the new version's binaries at once.
		b.upgrades[cl.UID] = &upgrade{change: change}
	}
	m.Namespace, m.Name, m.Profile = cl.Namespace, cl.Name, cl.Spec.Profile
	m.NoAudit = !set.audit
	pending := finishRestore(dir, &m)
	if pending || (running == "" && m.DataLost == nil && cl.Annotations[backend.AnnotationRestoreFrom] != "") {
		s, err := b.restoreNewLocked(ctx, cl, dir, m)
		return made{restoring: &s}, err
	}
	if etcdLost(dir, &m, cl) {
		b.log.Error(nil, "The etcd data of a cluster that ran is gone: starting it EMPTY", "cluster", cl.Namespace+"/"+cl.Name, "dir", dir)
	}
	in, err := b.runLocked(dir, m)
	if err != nil {
		delete(b.upgrades, cl.UID)
		return made{}, b.stateError(err)
	}
	in.mu.Lock()
	port := in.meta.Ports.APIServer
	in.mu.Unlock()
	b.log.Info("Starting a cluster", "cluster", m.Namespace+"/"+m.Name, "version", m.Version, "apiServerPort", port)
	return made{in: in, change: change, warnings: warnings}, nil
}

// claimNewLocked gives cl a spare of its profile's pool (claimLocked) if its cluster is to be made
// now, new and empty: never made here (no folder, no provider status), not from a snapshot, of an
// offered version.
func (b *Backend) claimNewLocked(cl *clustersv1alpha1.Cluster, dir string, want backend.Want) *instance {
	if want.NotOffered != nil || cl.Annotations[backend.AnnotationRestoreFrom] != "" {
		return nil
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if _, ran := localStatus(cl); ran {
		return nil
	}
	in := b.claimLocked(cl, dir, want.Version)
	if in != nil {
		delete(b.waiting, cl.UID)
		in.logger().Info("Starting a cluster from a spare", "version", want.Version)
	}
	return in
}

// admitLocked refuses to start the cluster of cl in dir: a cluster never made whose version is
// not offered (nothing to keep running), or any when --local-max-clusters run (it is started
// once a place frees: capacity.go).
func (b *Backend) admitLocked(cl *clustersv1alpha1.Cluster, dir string, want backend.Want) error {
	if _, err := os.Stat(filepath.Join(dir, metaFile)); want.NotOffered != nil && errors.Is(err, os.ErrNotExist) {
		if _, ran := localStatus(cl); !ran {
			return want.NotOffered
		}
	}
	if !b.roomLocked() {
		return b.refuseLocked(cl.UID, backend.RefOf(cl))
	}
	delete(b.waiting, cl.UID)
	return nil
}

// recordLocked reads the record of cl's cluster in dir, or makes one of version for a new cluster
// (on the ports it had, if its folder was lost), or rebuilds a damaged or missing one of a
// cluster that ran (a warning says so). running is the version the record says it runs: empty
// for a cluster not made yet.
func (b *Backend) recordLocked(cl *clustersv1alpha1.Cluster, dir, version string) (m meta, running string, warnings []backend.Warning) {
	m, err := readMeta(dir)
	running = m.Version
	repaired := ""
	switch {
	case errors.Is(err, os.ErrNotExist):
		m = meta{UID: cl.UID, Version: version, ServiceCIDR: b.opts.ServiceCIDR}
		running = ""
		if lost, ps := folderLost(dir, cl); lost != nil {
			m.DataLost, m.Ports = lost, ps // the same ports, if free: the endpoint stays
			b.log.Error(nil, "The folder of a cluster that ran is gone: creating it anew, EMPTY", "cluster", cl.Namespace+"/"+cl.Name, "dir", dir)
		} else if _, ran := localStatus(cl); ran {
			// The folder is there but its record is not (removed by hand, or kept aside by a
			// repair whose start then failed): rebuilt like a garbled one.
			m, repaired = b.repairMeta(dir, cl, version, err)
			running = m.Version
		}
	case err != nil:
		m, repaired = b.repairMeta(dir, cl, version, err)
		running = m.Version
	}
	if repaired != "" {
		warnings = []backend.Warning{{Reason: backend.ReasonStateRepaired, Message: repaired}}
	}
	return m, running, warnings
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
	for _, p := range []*int{&m.Ports.Internal, &m.Ports.ControllerManager} {
		if *p, _, err = b.ports.keep(*p); err != nil {
			b.ports.release(m.Ports)
			return nil, err
		}
	}
	_, hadDoor := b.doors[m.UID]
	if _, err := b.openDoorLocked(&m); err != nil {
		b.ports.release(m.Ports)
		return nil, err
	}
	in, err := b.prepareLocked(dir, m, bins)
	if err != nil {
		b.ports.release(m.Ports) // the cluster does not run; its ports may go to another
		if d := b.takeDoorLocked(m.UID); d != nil && !hadDoor {
			go d.Close()
		} else if d != nil {
			b.doors[m.UID] = d // kept: connections wait for the next start
		}
		return nil, err
	}
	b.instances[m.UID] = in
	if m.Hibernated != nil {
		b.countHibernatedLocked() // adopted hibernated: it stays so until a connection comes
		return in, nil
	}
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

// reassignAPIServerPort gives in's API server a new port of its own if another process took it
// (its endpoint, the front door's, stays).
func (b *Backend) reassignAPIServerPort(in *instance) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.meta.Ports.Internal
	if b.ports.free(old) {
		return nil
	}
	port, err := b.ports.allocate()
	if err != nil {
		return err
	}
	m := in.meta
	m.Ports.Internal = port
	if err := writeMeta(in.dir, m); err != nil {
		return err
	}
	delete(b.ports.taken, old)
	in.meta = m
	in.logger().Info("The API server's port was taken by another process; it moves", "oldPort", old, "port", port)
	go in.restart(procControllerManager) // after in.mu is released
	return nil
}
