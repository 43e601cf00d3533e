package cluster

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
)

var taken = time.Date(2026, 11, 25, 21, 30, 0, 0, time.UTC)

func TestSetBackedUp(t *testing.T) {
	snaps := []backend.Snapshot{{Name: "20261125T213000Z", Taken: taken, Size: 2048, Revision: 7, Keys: 5}, {Name: "20261125T203000Z", Taken: taken.Add(-time.Hour)}}
	for _, tc := range []struct {
		name     string
		snaps    []backend.Snapshot
		interval time.Duration
		failed   error
		status   metav1.ConditionStatus
		reason   string
		says     []string
	}{
		{name: "the newest", snaps: snaps, interval: time.Hour, status: metav1.ConditionTrue, reason: ReasonSnapshotTaken,
			says: []string{"20261125T213000Z", "2026-11-25T21:30:00Z", "2048 bytes, revision 7, 5 keys", "2 kept (a snapshot every 1h0m0s, the newest 24 kept)"}},
		{name: "schedule off, snapshots taken on demand", snaps: snaps, interval: 0, status: metav1.ConditionTrue, reason: ReasonSnapshotTaken,
			says: []string{"scheduled snapshots are off (spec.backup.disabled of the ProviderConfig of profile prof)", backend.AnnotationSnapshot}},
		{name: "off and none", interval: 0, status: metav1.ConditionFalse, reason: ReasonBackupsOff, says: []string{"No snapshot: scheduled snapshots are off"}},
		{name: "none yet", interval: time.Hour, status: metav1.ConditionFalse, reason: ReasonNoSnapshotYet, says: []string{"the first is taken once the cluster serves"}},
		{name: "failed", snaps: snaps, interval: time.Hour, failed: errors.New("etcdctl snapshot save: exit status 1: disk full"),
			status: metav1.ConditionFalse, reason: ReasonBackupFailed, says: []string{"The last snapshot failed: etcdctl snapshot save: exit status 1: disk full."}},
		{name: "unavailable", interval: time.Hour, failed: backend.Errorf(backend.ReasonBackupUnavailable, "no etcdctl"),
			status: metav1.ConditionFalse, reason: backend.ReasonBackupUnavailable, says: []string{"no etcdctl"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &clustersv1alpha1.Cluster{}
			setBackedUp(cl, tc.snaps, tc.interval, backend.KeepNewest(24), tc.failed, "prof")
			c := condition(t, cl, ConditionBackedUp)
			assert.Equal(t, tc.status, c.Status)
			assert.Equal(t, tc.reason, c.Reason)
			for _, s := range tc.says {
				assert.Contains(t, c.Message, s)
			}
		})
	}
}

func TestSetRestored(t *testing.T) {
	snap := backend.Snapshot{Name: "20261125T213000Z", Cluster: "6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a", Taken: taken, Revision: 7}
	at := taken.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		state   backend.State
		refused error
		status  metav1.ConditionStatus
		reason  string // "" : no condition
		says    string
	}{
		{name: "never restored", state: backend.State{Ready: true}},
		{name: "refused", refused: backend.Errorf(backend.ReasonRestoreRefused, "restore refused, nothing changed: no such snapshot"),
			status: metav1.ConditionFalse, reason: backend.ReasonRestoreRefused, says: "no such snapshot"},
		{name: "refused wins over the last restore", state: backend.State{Restored: &backend.Restored{Snapshot: snap, At: at}},
			refused: backend.Errorf(backend.ReasonRestoreRefused, "damaged"), status: metav1.ConditionFalse, reason: backend.ReasonRestoreRefused, says: "damaged"},
		{name: "under way", state: backend.State{Reason: backend.ReasonRestoring, Message: "Restoring etcd from snapshot x"},
			status: metav1.ConditionFalse, reason: backend.ReasonRestoring, says: "Restoring etcd from snapshot x"},
		{name: "done", state: backend.State{Ready: true, Restored: &backend.Restored{Snapshot: snap, At: at, MovedAside: "/state/backups/u/replaced/x"}},
			status: metav1.ConditionTrue, reason: ReasonRestoreDone,
			says: "Snapshot 6c1f7d1e-2b7a-4d39-9a4c-1f2e3d4c5b6a/20261125T213000Z (taken 2026-11-25T21:30:00Z, revision 7) was restored at 2026-11-25T22:30:00Z. The data it replaced was moved to /state/backups/u/replaced/x."},
		{name: "failed", state: backend.State{Ready: true, Restored: &backend.Restored{Snapshot: snap, At: at, Failed: "restoring snapshot x failed"}},
			status: metav1.ConditionFalse, reason: ReasonRestoreFailed, says: "At 2026-11-25T22:30:00Z, restoring snapshot x failed."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := &clustersv1alpha1.Cluster{}
			setRestored(cl, tc.state, tc.refused)
			c := meta.FindStatusCondition(cl.Status.Conditions, ConditionRestored)
			if tc.reason == "" {
				assert.Nil(t, c)
				return
			}
			require.NotNil(t, c)
			assert.Equal(t, tc.status, c.Status)
			assert.Equal(t, tc.reason, c.Reason)
			assert.Contains(t, c.Message, tc.says)
		})
	}
}

// TestBackupConditionsAreInformational: a failed snapshot or a refused restore does not make a
// serving cluster un-Ready.
func TestBackupConditionsAreInformational(t *testing.T) {
	cl := &clustersv1alpha1.Cluster{}
	require.NoError(t, setState(cl, "local", backend.State{Runs: "1.37.1", Ready: true, Reason: backend.ReasonRunning,
		Parts: []backend.Part{{Type: backend.PartControllerManager, Ready: true, Reason: backend.ReasonRunning}}}, nil))
	setBackedUp(cl, nil, time.Hour, backend.KeepNewest(24), errors.New("disk full"), "prof")
	setRestored(cl, backend.State{}, backend.Errorf(backend.ReasonRestoreRefused, "no such snapshot"))
	finish(cl)
	assert.Equal(t, common.PhaseReady, cl.Status.Phase)
}

func TestWithBackups(t *testing.T) {
	raw := []byte(`{"backend":"local","version":"v1.37.1"}`)
	same, err := withBackups(raw, nil)
	require.NoError(t, err)
	assert.Equal(t, raw, same, "no snapshot: unchanged")

	out, err := withBackups(raw, []backend.Snapshot{{Name: "20261125T213000Z", Taken: taken, Size: 2048, Revision: 7, Keys: 5, Version: "1.37.1", SHA256: "abc", Cluster: "u"}})
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, "local", got["backend"], "the backend's fields stay")
	assert.Equal(t, []any{map[string]any{"name": "20261125T213000Z", "taken": "2026-11-25T21:30:00Z", "size": 2048.0, "revision": 7.0, "keys": 5.0, "version": "1.37.1"}}, got["backups"])
}
