package local

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// The warm pool (docs/hibernation.md "Spare clusters"): a profile whose ProviderConfig has
// spec.pool keeps that many spare clusters of its default version, each a complete cluster of its
// own (CA, keys, etcd data) in <state-dir>/spare-<hex>/, made for no Cluster. A new Cluster of the
// profile and version claims a ready one (claimLocked): its record is rewritten for the Cluster,
// and its folder renamed to the Cluster's, <state-dir>/<UID>/. The spare's processes run on with
// the paths they were started with, so the old name stays as a link to the new one until they next
// start (the operator's next start removes it). The pool then makes another (fillLocked).
//
// Spares hold places of --local-max-clusters while they run, and give them up to Clusters: a
// Cluster or a wake that finds no place removes a running spare (roomLocked). Spares are never
// made while a Cluster waits for a place. A spare holds nothing of a user, so the ones left when
// the operator stops are removed at its next start, and the pools made again.

// spareDirPrefix begins the folder name (and the UID in its record) of a spare.
const spareDirPrefix = "spare-"

// reasonSpare is the hibernation reason of a spare kept hibernated (spec.pool.hibernated).
const reasonSpare = "Spare"

// triggerClaim wakes a hibernated spare claimed by a Cluster.
const triggerClaim = backend.TriggerClaim

// pool is what a profile's spec.pool asks for, and the settings its spares are made with.
type pool struct {
	backend.Pool
	set settings
}

// SetPool keeps p for profile (Size 0: none) with v's settings, makes or removes spares for it,
// and returns the state of its spares.
func (v *Bound) SetPool(profile string, p backend.Pool) backend.PoolState {
	return v.Backend.setPool(profile, p, v.set)
}

// SetPool is Bound.SetPool with the settings of an empty spec.
func (b *Backend) SetPool(profile string, p backend.Pool) backend.PoolState {
	return b.setPool(profile, p, defaultSettings)
}

func (b *Backend) setPool(profile string, p backend.Pool, set settings) backend.PoolState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.Size <= 0 || p.Version == "" {
		delete(b.pools, profile)
	} else {
		b.pools[profile] = &pool{Pool: p, set: set}
	}
	b.fillLocked()
	return b.poolStateLocked(profile)
}

// poolStateLocked counts the spares of profile; of every profile for "".
func (b *Backend) poolStateLocked(profile string) backend.PoolState {
	var s backend.PoolState
	for _, in := range b.instances {
		in.mu.Lock()
		switch {
		case in.meta.Spare == "" || (profile != "" && in.meta.Spare != profile):
		case in.spareReadyLocked():
			s.Ready++
		default:
			s.Starting++
		}
		in.mu.Unlock()
	}
	return s
}

// spareReadyLocked reports whether the spare in can be claimed now: complete (API server and
// controller manager Ready), or hibernated once it was (in.mu held).
func (in *instance) spareReadyLocked() bool {
	if in.waking || in.sleeping {
		return false
	}
	return in.asleepLocked() || (in.api.Ready && in.kcm.Ready)
}

// fillLocked makes the spares the pools lack, while places are free and no Cluster waits for one,
// and removes those no pool wants (a smaller size, another default version, a pool gone).
func (b *Backend) fillLocked() {
	if !b.started {
		return
	}
	have := map[string]int{}
	for _, uid := range slices.Sorted(maps.Keys(b.instances)) {
		in := b.instances[uid]
		in.mu.Lock()
		profile, version := in.meta.Spare, in.meta.Version
		in.mu.Unlock()
		if profile == "" {
			continue
		}
		p := b.pools[profile]
		if p == nil || !backend.SameVersion(version, p.Version) || have[profile] >= p.Size {
			b.dropSpareLocked(uid, in, "its profile's pool no longer wants it")
			continue
		}
		have[profile]++
	}
	for _, profile := range slices.Sorted(maps.Keys(b.pools)) {
		p := b.pools[profile]
		for have[profile] < p.Size && len(b.waiting) == 0 && b.usedLocked() < b.opts.MaxClusters {
			if err := b.makeSpareLocked(profile, p); err != nil {
				b.log.Error(err, "Making a spare cluster failed; the pool tries again when a place frees or its ProviderConfig changes", "profile", profile)
				break
			}
			have[profile]++
		}
	}
	b.countSparesLocked()
}

// makeSpareLocked starts a spare for profile's pool p.
func (b *Backend) makeSpareLocked(profile string, p *pool) error {
	raw := make([]byte, 8)
	if _, err := rand.Read(raw); err != nil {
		return err
	}
	id := spareDirPrefix + hex.EncodeToString(raw)
	m := meta{UID: types.UID(id), Name: id, Profile: profile, Spare: profile, Version: p.Version,
		ServiceCIDR: b.opts.ServiceCIDR, NoAudit: !p.set.audit}
	if _, err := b.runLocked(filepath.Join(b.opts.StateDir, id), m); err != nil {
		_ = os.RemoveAll(filepath.Join(b.opts.StateDir, id))
		return err
	}
	b.log.Info("Making a spare cluster", "profile", profile, "spare", id, "version", p.Version)
	return nil
}

// dropSpareLocked removes the spare in (key uid): it is forgotten at once (its place is free),
// its processes stopped and its folder removed in the background.
func (b *Backend) dropSpareLocked(uid types.UID, in *instance, why string) {
	delete(b.instances, uid)
	d := b.takeDoorLocked(uid)
	b.log.Info("Removing a spare cluster", "spare", uid, "why", why)
	go func() {
		if d != nil {
			d.Close()
		}
		in.stop(true)
		// A hibernation under way writes the record last: the folder goes after it.
		for i := 0; i < 100 && in.busy(); i++ {
			time.Sleep(50 * time.Millisecond)
		}
		b.mu.Lock()
		b.ports.release(in.meta.Ports)
		b.mu.Unlock()
		if err := os.RemoveAll(in.dir); err != nil {
			b.log.Error(err, "Removing the folder of a spare cluster failed; the operator's next start removes it", "dir", in.dir)
		}
	}()
}

// busy reports whether a wake or a hibernation of in is under way.
func (in *instance) busy() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.waking || in.sleeping
}

// roomLocked reports whether a place of --local-max-clusters is free, removing a running spare to
// free one if none is: Clusters come before spares.
func (b *Backend) roomLocked() bool {
	if b.usedLocked() < b.opts.MaxClusters {
		return true
	}
	for _, uid := range slices.Sorted(maps.Keys(b.instances)) {
		in := b.instances[uid]
		in.mu.Lock()
		spare, asleep := in.meta.Spare != "", in.asleepLocked()
		in.mu.Unlock()
		if spare && !asleep {
			b.dropSpareLocked(uid, in, "a Cluster needs its place of --local-max-clusters")
			return b.usedLocked() < b.opts.MaxClusters
		}
	}
	return false
}

// claimLocked makes a ready spare of cl's profile and of version the cluster of cl, whose folder
// is to be dir, and returns it; nil when the profile has no pool or no spare is ready (counted as
// a miss) or the claim failed (the spare stays one; the Cluster is made anew).
func (b *Backend) claimLocked(cl *clustersv1alpha1.Cluster, dir, version string) *instance {
	if b.pools[cl.Spec.Profile] == nil {
		return nil
	}
	var (
		in  *instance
		key types.UID
	)
	for _, uid := range slices.Sorted(maps.Keys(b.instances)) {
		c := b.instances[uid]
		c.mu.Lock()
		ok := c.meta.Spare == cl.Spec.Profile && backend.SameVersion(c.meta.Version, version) && c.spareReadyLocked()
		awake := ok && !c.asleepLocked()
		c.mu.Unlock()
		if ok && (in == nil || awake) { // a running one first: Ready at once
			in, key = c, uid
		}
	}
	if in == nil {
		backend.RecordClaim(Name, backend.ClaimMissed)
		return nil
	}
	if err := b.takeSpareLocked(in, key, cl, dir); err != nil {
		b.log.Error(err, "Claiming a spare cluster failed; the Cluster's cluster is made anew", "spare", key, "cluster", cl.Namespace+"/"+cl.Name)
		backend.RecordClaim(Name, backend.ClaimMissed)
		return nil
	}
	backend.RecordClaim(Name, backend.ClaimClaimed)
	in.logger().Info("A spare cluster became the Cluster's", "spare", key)
	if in.asleep() {
		b.wake(in, triggerClaim)
	}
	b.fillLocked()
	return in
}

// takeSpareLocked gives the spare in (key uid) to cl: its record is rewritten for cl, then its
// folder renamed to dir, the old name left as a link for its running processes.
func (b *Backend) takeSpareLocked(in *instance, uid types.UID, cl *clustersv1alpha1.Cluster, dir string) error {
	in.metaMu.Lock()
	defer in.metaMu.Unlock()
	in.mu.Lock()
	old := in.meta
	m := old
	m.UID, m.Namespace, m.Name, m.Profile, m.Spare = cl.UID, cl.Namespace, cl.Name, cl.Spec.Profile, ""
	in.mu.Unlock()
	if err := writeMeta(in.dir, m); err != nil {
		return err
	}
	undo := func(err error) error {
		return errors.Join(err, writeMeta(in.dir, old))
	}
	if err := os.Rename(in.dir, dir); err != nil {
		return undo(err)
	}
	if err := os.Symlink(filepath.Base(dir), in.dir); err != nil {
		return undo(errors.Join(err, os.Rename(dir, in.dir)))
	}
	in.mu.Lock()
	in.meta = m
	in.notices = nil
	in.mu.Unlock()
	in.setLogger(m)
	in.recordCertificates()
	delete(b.instances, uid)
	b.instances[cl.UID] = in
	if d := b.doors[uid]; d != nil {
		delete(b.doors, uid)
		d.uid = cl.UID
		b.doors[cl.UID] = d
	}
	b.countSparesLocked()
	return nil
}

// asleep is asleepLocked.
func (in *instance) asleep() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.asleepLocked()
}

// countSparesLocked sets the spares gauge.
func (b *Backend) countSparesLocked() {
	s := b.poolStateLocked("")
	backend.SetSpares(Name, s.Ready, s.Starting)
}

// settleSpares runs before the folders of --state-dir are adopted: it removes the links left for
// the processes of claimed spares (none runs now) and the spares of an earlier run, and finishes a
// claim the operator stopped in (the record names the Cluster, the folder is not renamed yet):
// the folder moves to its Cluster's name if that Cluster exists, and goes otherwise.
func (b *Backend) settleSpares(entries []os.DirEntry, clusters map[types.UID]*clustersv1alpha1.Cluster) {
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), spareDirPrefix) {
			continue
		}
		path := filepath.Join(b.opts.StateDir, e.Name())
		if e.Type()&os.ModeSymlink != 0 {
			if err := os.Remove(path); err != nil {
				b.log.Error(err, "Removing the old name of a claimed spare cluster failed", "path", path)
			}
			continue
		}
		m, err := readMeta(path)
		if err == nil && m.Spare == "" && clusters[m.UID] != nil && !exists(b.dir(m.UID)) {
			if err := os.Rename(path, b.dir(m.UID)); err != nil {
				b.log.Error(err, "Finishing the claim of a spare cluster failed; it stays where it is", "dir", path, "cluster", m.Namespace+"/"+m.Name)
			}
			continue
		}
		if err := os.RemoveAll(path); err != nil {
			b.log.Error(err, "Removing a spare cluster of an earlier run failed", "dir", path)
		}
	}
}
