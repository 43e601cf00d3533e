package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
)

// Condition types and reasons of backups and restores. Both conditions are informational: a
// failed snapshot does not make a serving cluster un-Ready.
const (
	// ConditionBackedUp says whether the cluster has a recent snapshot: True (SnapshotTaken, the
	// newest one), or False (BackupFailed, BackupsOff, NoSnapshotYet, BackupUnavailable).
	ConditionBackedUp = "BackedUp"
	// ConditionRestored reports the last restore asked for with backend.AnnotationRestore: True
	// (RestoreDone), or False (Restoring, RestoreRefused, RestoreFailed).
	ConditionRestored = "Restored"

	ReasonSnapshotTaken = "SnapshotTaken"
	ReasonBackupFailed  = "BackupFailed"
	ReasonBackupsOff    = "BackupsOff"
	ReasonNoSnapshotYet = "NoSnapshotYet"
	ReasonRestoreDone   = "RestoreDone"
	ReasonRestoreFailed = "RestoreFailed"
	// ReasonSnapshotsRemovedForSpace (Warning Event): snapshots the retention policy keeps were
	// removed to make room for a new one on a full destination.
	ReasonSnapshotsRemovedForSpace = "SnapshotsRemovedForSpace"
)

// retryBackup is how soon a failed snapshot, or one the cluster was not ready for, is tried again.
const retryBackup = time.Minute

// snapshotSafetyNet is how soon a snapshot the backend takes in the background is asked for again
// should its end not notify the Cluster (backend.ReasonSnapshotInProgress: the backend notifies).
const snapshotSafetyNet = 30 * time.Second

var (
	metricBackupTime = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cluster_provider_backup_last_success_timestamp_seconds",
		Help: "When the newest verified etcd snapshot of a Cluster was taken (Unix seconds). Alert on time() - this > 2 * the backup interval.",
	}, []string{"cluster"})
	metricBackupSize = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "cluster_provider_backup_last_size_bytes",
		Help: "The size of the newest verified etcd snapshot of a Cluster, in bytes.",
	}, []string{"cluster"})
	metricBackupFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_provider_backup_failures_total",
		Help: "Snapshots of a Cluster's etcd that failed (taken, or checked after taking).",
	}, []string{"cluster"})
)

func init() { metrics.Registry.MustRegister(metricBackupTime, metricBackupSize, metricBackupFailures) }

// backups is what one reconcile did about cl's snapshots and restores; apply writes it into the
// status.
type backups struct {
	// supported: the backend takes snapshots. Without it, unsupported is what to tell a Cluster
	// that asks for a snapshot or a restore anyway ("" when it asks for none).
	supported   bool
	unsupported string
	// snapshots are cl's snapshots, newest first, for status.providerStatus.backups.
	snapshots []backend.Snapshot
	// interval and retention are the profile's schedule.
	interval  time.Duration
	retention backend.Retention
	// failed is the snapshot this reconcile took and that failed; refused the restore asked for
	// and refused.
	failed, refused error
	// requeue is when the next scheduled snapshot is due.
	requeue time.Duration
}

// apply sets the conditions BackedUp and Restored of cl from b and the state s.
func (b *backups) apply(cl *clustersv1alpha1.Cluster, s backend.State, profile string) {
	switch {
	case b.unsupported != "":
		setCondition(cl, ConditionBackedUp, false, backend.ReasonBackupUnavailable, b.unsupported)
	case !b.supported:
		meta.RemoveStatusCondition(&cl.Status.Conditions, ConditionBackedUp)
	default:
		setBackedUp(cl, b.snapshots, b.interval, b.retention, b.failed, profile)
		setRestored(cl, s, b.refused)
	}
}

// restore carries out the restore cl's AnnotationRestore asks for: the snapshot is checked (a
// refusal is a condition and a Warning Event, and nothing changes), the annotation removed, and
// only then the backend starts the restore, so that it is never done twice.
func (r *Reconciler) restore(ctx context.Context, cl *clustersv1alpha1.Cluster, bk backend.Backups) (refused error, started bool, err error) {
	name := cl.Annotations[backend.AnnotationRestore]
	if name == "" {
		return nil, false, nil
	}
	if _, err := bk.CheckRestore(ctx, cl, name); err != nil {
		if backend.IsReason(err, backend.ReasonRestoreRefused) {
			return err, false, nil
		}
		return nil, false, fmt.Errorf("checking snapshot %s: %w", name, err)
	}
	if err := kit.RemoveAnnotation(ctx, r.Client, cl, backend.AnnotationRestore); err != nil {
		return nil, false, fmt.Errorf("before the restore: %w", err)
	}
	if err := bk.Restore(ctx, cl, name); err != nil {
		// The annotation is gone: the condition says what happened and to set it again.
		return fmt.Errorf("restoring snapshot %s did not start: %w; set annotation %s again to retry", name, err, backend.AnnotationRestore), false, nil
	}
	log.FromContext(ctx).Info("Restoring the cluster from a snapshot", "snapshot", name)
	return nil, true, nil
}

// snapshot takes the snapshot cl is due for (its schedule, or AnnotationSnapshot) when the
// cluster serves (not while it is restored or upgraded), and lists its snapshots.
func (r *Reconciler) snapshot(ctx context.Context, cl *clustersv1alpha1.Cluster, bk backend.Backups, s backend.State) (backups, error) {
	interval, _ := r.Backup.Scheduled()
	retention := backend.RetentionOf(r.Backup)
	out := backups{supported: true, interval: interval, retention: retention}
	snaps, err := bk.Snapshots(ctx, cl)
	if err != nil {
		return out, fmt.Errorf("listing the snapshots: %w", err)
	}
	_, asked := cl.Annotations[backend.AnnotationSnapshot]
	now := time.Now()
	due := asked || (interval > 0 && (len(snaps) == 0 || !now.Before(snaps[0].Taken.Add(interval))))
	// A hibernated cluster changed nothing since it was hibernated: a scheduled snapshot is taken
	// (waking it) only when the newest one is from before.
	unchanged := due && !asked && unchangedSince(s, snaps)
	if unchanged {
		due = false // its wake notifies: the schedule goes on from then
	}
	if due && s.Ready {
		snap, err := bk.Snapshot(ctx, cl, retention)
		switch {
		case backend.IsReason(err, backend.ReasonSnapshotInProgress):
			out.requeue = snapshotSafetyNet // the backend takes it in the background and notifies
		case err != nil:
			out.failed = err
			metricBackupFailures.WithLabelValues(refName(cl)).Inc()
			r.Event(cl, "Warning", ReasonBackupFailed, "Backup", "The snapshot of etcd failed: %s", err.Error())
			out.requeue = retryBackup
		default:
			r.snapshotTaken(cl, snap, "")
			snaps = withNewest(snaps, snap, retention, now)
			if err := kit.RemoveAnnotation(ctx, r.Client, cl, backend.AnnotationSnapshot); err != nil {
				return out, fmt.Errorf("after the snapshot: %w", err)
			}
		}
	} else if due {
		out.requeue = retryBackup // once it serves; its readiness notifies sooner
	}
	if len(snaps) > 0 {
		metricBackupTime.WithLabelValues(refName(cl)).Set(float64(snaps[0].Taken.Unix()))
		metricBackupSize.WithLabelValues(refName(cl)).Set(float64(snaps[0].Size))
		if next := time.Until(snaps[0].Taken.Add(interval)); interval > 0 && out.requeue == 0 && !unchanged {
			out.requeue = max(next, time.Second)
		}
	}
	out.snapshots = snaps
	return out, nil
}

// setBackedUp records the newest snapshot, or why there is none.
func setBackedUp(cl *clustersv1alpha1.Cluster, snaps []backend.Snapshot, interval time.Duration, retention backend.Retention, failed error, profile string) {
	schedule := fmt.Sprintf("a snapshot every %s, %s kept", interval, retention)
	if interval == 0 {
		schedule = fmt.Sprintf("scheduled snapshots are off (spec.backup.disabled of the ProviderConfig of profile %s); annotate the Cluster with %s to take one", profile, backend.AnnotationSnapshot)
	}
	switch {
	case failed != nil:
		setCondition(cl, ConditionBackedUp, false, kit.ReasonOf(failed, ReasonBackupFailed), fmt.Sprintf("The last snapshot failed: %s.", failed.Error()))
	case len(snaps) > 0:
		n := snaps[0]
		setCondition(cl, ConditionBackedUp, true, ReasonSnapshotTaken, fmt.Sprintf(
			"The newest snapshot, %s, was taken at %s: %d bytes, revision %d, %d keys, checked; %d kept (%s).",
			n.Name, n.Taken.UTC().Format(time.RFC3339), n.Size, n.Revision, n.Keys, len(snaps), schedule))
	case interval == 0:
		setCondition(cl, ConditionBackedUp, false, ReasonBackupsOff, "No snapshot: "+schedule+".")
	default:
		setCondition(cl, ConditionBackedUp, false, ReasonNoSnapshotYet, "No snapshot yet: the first is taken once the cluster serves ("+schedule+").")
	}
}

// setRestored reports the restore asked for: refused now, under way, or the last one done.
func setRestored(cl *clustersv1alpha1.Cluster, s backend.State, refused error) {
	switch last := s.Restored; {
	case refused != nil:
		setCondition(cl, ConditionRestored, false, kit.ReasonOf(refused, ReasonRestoreFailed), refused.Error())
	case s.Reason == backend.ReasonRestoring:
		setCondition(cl, ConditionRestored, false, backend.ReasonRestoring, s.Message)
	case last != nil && last.Failed != "":
		setCondition(cl, ConditionRestored, false, ReasonRestoreFailed, fmt.Sprintf("At %s, %s.", last.At.UTC().Format(time.RFC3339), last.Failed))
	case last != nil:
		aside := ""
		if last.MovedAside != "" {
			aside = " The data it replaced was moved to " + last.MovedAside + "."
		}
		setCondition(cl, ConditionRestored, true, ReasonRestoreDone, fmt.Sprintf("Snapshot %s (taken %s, revision %d) was restored at %s.%s",
			last.Snapshot.Ref(), last.Snapshot.Taken.UTC().Format(time.RFC3339), last.Snapshot.Revision, last.At.UTC().Format(time.RFC3339), aside))
	default:
		meta.RemoveStatusCondition(&cl.Status.Conditions, ConditionRestored)
	}
}

// forgetBackups drops the backup gauges of a deleted Cluster (its snapshots stay).
func forgetBackups(cl *clustersv1alpha1.Cluster) {
	for _, v := range []*prometheus.GaugeVec{metricBackupTime, metricBackupSize} {
		v.DeleteLabelValues(refName(cl))
	}
	metricBackupFailures.DeleteLabelValues(refName(cl))
}

func refName(cl *clustersv1alpha1.Cluster) string { return client.ObjectKeyFromObject(cl).String() }

// withNewest is snaps (newest first) after snap was taken and those retention removes (and those
// removed for space) were removed, as the backend removes them (Backups.Snapshot): no second
// listing.
func withNewest(snaps []backend.Snapshot, snap backend.Snapshot, retention backend.Retention, now time.Time) []backend.Snapshot {
	out := []backend.Snapshot{snap}
	for _, s := range snaps {
		if s.Name != snap.Name && !slices.Contains(snap.RemovedForSpace, s.Name) {
			out = append(out, s)
		}
	}
	for _, gone := range retention.Prune(out, now) {
		out = slices.DeleteFunc(out, func(s backend.Snapshot) bool { return s.Name == gone.Name })
	}
	return out
}

// snapshotTaken emits the Events of a snapshot taken (why: "" for a scheduled or asked one, or
// the reason it was taken before something), and a Warning when snapshots were removed beyond
// the retention policy to make room for it.
func (r *Reconciler) snapshotTaken(cl *clustersv1alpha1.Cluster, snap backend.Snapshot, why string) {
	reason, what := ReasonSnapshotTaken, ""
	if why != "" {
		reason, what = why, " ("+why+")"
	}
	r.Event(cl, "Normal", reason, "Backup", "Took snapshot %s of etcd%s: %d bytes, revision %d, %d keys.", snap.Name, what, snap.Size, snap.Revision, snap.Keys)
	if len(snap.RemovedForSpace) > 0 {
		r.Event(cl, "Warning", ReasonSnapshotsRemovedForSpace, "Backup",
			"The snapshots' destination was full: removed snapshots %s, which the retention policy keeps, to save %s; give the destination more space.",
			strings.Join(snap.RemovedForSpace, ", "), snap.Name)
	}
}

// unchangedSince reports whether the cluster of s is hibernated and its newest snapshot (snaps,
// newest first) was taken after it was: nothing of its data changed since.
func unchangedSince(s backend.State, snaps []backend.Snapshot) bool {
	return s.HibernatedSince != nil && len(snaps) > 0 && !snaps[0].Taken.Before(*s.HibernatedSince)
}
