package backendtest

import (
	"context"
	"fmt"
	"slices"
	"time"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// Snapshot takes an in-memory snapshot of cl's cluster, which must be Ready, and keeps what
// retention keeps.
func (f *Fake) Snapshot(_ context.Context, cl *clustersv1alpha1.Cluster, retention backend.Retention) (backend.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(Call{Method: MethodSnapshot, Cluster: keyOf(cl), UID: cl.UID, Retention: retention})
	c, ok := f.clusters[cl.UID]
	switch {
	case !ok || !c.Ready || c.restoring != nil:
		return backend.Snapshot{}, backend.Errorf(backend.ReasonBackupUnavailable, "the fake cluster of Cluster %s does not serve: no snapshot", keyOf(cl))
	case c.SnapshotError != nil:
		return backend.Snapshot{}, c.SnapshotError
	}
	snaps := f.snapshots[cl.UID]
	now := time.Now().UTC()
	name := now.Format("20060102T150405Z")
	for i := 1; slices.ContainsFunc(snaps, func(s backend.Snapshot) bool { return s.Name == name }); i++ {
		name = fmt.Sprintf("%s-%d", now.Format("20060102T150405Z"), i)
	}
	n := int64(len(snaps) + 1)
	s := backend.Snapshot{Name: name, Cluster: cl.UID, Namespace: cl.Namespace, Taken: now, Size: 1024 * n, Revision: 10 * n, Keys: n,
		Version: c.Runs, SHA256: fmt.Sprintf("%064x", n)}
	snaps = append(snaps, s)
	for _, gone := range retention.Prune(snaps, now) {
		snaps = slices.DeleteFunc(snaps, func(s backend.Snapshot) bool { return s.Name == gone.Name })
	}
	f.snapshots[cl.UID] = snaps
	return s, nil
}

// Snapshots lists cl's snapshots, newest first; they outlive the cluster.
func (f *Fake) Snapshots(_ context.Context, cl *clustersv1alpha1.Cluster) ([]backend.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.snapshots[cl.UID])
	slices.Reverse(out)
	return out, nil
}

// CheckRestore finds snapshot name among cl's; any other name is refused.
func (f *Fake) CheckRestore(_ context.Context, cl *clustersv1alpha1.Cluster, name string) (backend.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.find(cl, name)
}

// Restore starts bringing back snapshot name: the cluster is not Ready (reason Restoring) until
// the next Ensure, or until a test clears HoldRestore and Ensure runs again.
func (f *Fake) Restore(_ context.Context, cl *clustersv1alpha1.Cluster, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record(Call{Method: MethodRestore, Cluster: keyOf(cl), UID: cl.UID, Snapshot: name})
	s, err := f.find(cl, name)
	if err != nil {
		return err
	}
	c, ok := f.clusters[cl.UID]
	if !ok {
		return fmt.Errorf("the fake backend runs no cluster for Cluster %s", keyOf(cl))
	}
	c.restoring = &s
	return nil
}

// find returns snapshot name of cl; the caller holds mu.
func (f *Fake) find(cl *clustersv1alpha1.Cluster, name string) (backend.Snapshot, error) {
	for _, s := range f.snapshots[cl.UID] {
		if s.Name == name {
			return s, nil
		}
	}
	return backend.Snapshot{}, backend.Errorf(backend.ReasonRestoreRefused,
		"snapshot %s of Cluster %s does not exist; status.providerStatus.backups lists the ones that do", name, keyOf(cl))
}
