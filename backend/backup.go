package backend

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// Annotations on a Cluster that ask for a snapshot or a restore. The Cluster reconciler reads
// them; a Backend that implements Backups carries them out.
const (
	// AnnotationSnapshot asks for a snapshot of the cluster's etcd now (any value). The
	// reconciler removes it once the snapshot was taken and verified.
	AnnotationSnapshot = "backup.clusters.openmcp.cloud/snapshot"
	// AnnotationRestore names a snapshot of the Cluster (status.providerStatus.backups[].name)
	// to bring back in place: its etcd data is replaced by the snapshot's, and the endpoint, CA
	// and issued kubeconfigs stay. The reconciler checks the snapshot, removes the annotation and
	// has the backend restore it; a snapshot that does not exist, is damaged or is of another
	// Cluster is refused (condition Restored, reason RestoreRefused) and nothing changes.
	AnnotationRestore = "backup.clusters.openmcp.cloud/restore"
	// AnnotationRestoreFrom, set when a Cluster is created, makes its cluster start from a
	// snapshot of another Cluster: "<uid of that Cluster>/<snapshot name>". Read only while the
	// cluster is made; the new cluster has a CA of its own, so credentials of the other cluster
	// (service-account tokens, client certificates) do not work in it.
	AnnotationRestoreFrom = "backup.clusters.openmcp.cloud/restore-from"
)

// Annotations on a Cluster about the snapshots taken before an upgrade and before its deletion
// (docs/backups.md). The skip annotations (any value) let an upgrade or a deletion go on without
// the snapshot, when it fails; the others record the snapshot taken ("<version> <snapshot>"
// before an upgrade to version, the snapshot's name, or "-" for none, before the deletion).
const (
	AnnotationSkipSnapshotBeforeUpgrade = "backup.clusters.openmcp.cloud/skip-snapshot-before-upgrade"
	AnnotationSkipSnapshotBeforeDelete  = "backup.clusters.openmcp.cloud/skip-snapshot-before-delete"
	AnnotationSnapshotBeforeUpgrade     = "backup.clusters.openmcp.cloud/snapshot-before-upgrade"
	AnnotationSnapshotBeforeDelete      = "backup.clusters.openmcp.cloud/snapshot-before-delete"
)

// AnnotationImageRefresh on a Cluster asks the hosted backend to roll its control plane to the
// image the ProviderConfig names now for the version it runs (hosted.AnnotationImageRefresh).
const AnnotationImageRefresh = "hosted.clusters.openmcp.cloud/image-refresh"

// RequestAnnotations are the annotations with which a user asks something of a Cluster's cluster:
// a change of one of them is an event for the Cluster reconciler, though no generation changes.
var RequestAnnotations = []string{AnnotationSnapshot, AnnotationRestore, AnnotationImageRefresh, AnnotationRotateEncryptionKey,
	AnnotationSkipSnapshotBeforeUpgrade, AnnotationSkipSnapshotBeforeDelete, AnnotationHibernate}

// AnnotationRotateEncryptionKey on a Cluster asks for a new encryption key of its Secrets at
// rest (any new value: a timestamp, say): the backend puts a new key first, and rewrites every
// Secret with it; the old keys stay to read the snapshots taken before (docs/security.md).
const AnnotationRotateEncryptionKey = "security.clusters.openmcp.cloud/rotate-encryption-key"

// Reasons of the backup and restore conditions and Events.
const (
	// ReasonRestoreRefused: the snapshot named cannot be restored; nothing changed.
	ReasonRestoreRefused = "RestoreRefused"
	// ReasonRestoring: the cluster's etcd data is being replaced by a snapshot's.
	ReasonRestoring = "Restoring"
	// ReasonBackupUnavailable: the backend cannot take snapshots of this cluster (say why).
	ReasonBackupUnavailable = "BackupUnavailable"
	// ReasonSnapshotInProgress: the backend takes the snapshot in the background (the hosted
	// backend's Jobs); Snapshot returns it once it is done, when called again. The backend
	// notifies the Cluster when it is done (Notify): the caller need not poll.
	ReasonSnapshotInProgress = "SnapshotInProgress"
)

// Backups is implemented by a Backend that runs its clusters' etcd and can snapshot it.
// Snapshots live outside what Delete removes: they outlive their Cluster (restore one into a new
// Cluster with AnnotationRestoreFrom) until a person removes them. A snapshot holds every Secret
// of its cluster: only the operator may read it.
type Backups interface {
	// Snapshot takes a snapshot of cl's etcd, verifies it, records it and then removes the
	// snapshots of cl that retention removes (never the newest). Before it saves, it makes room
	// on a full destination (Retention.MakeRoom): the snapshot's RemovedForSpace names those
	// removed beyond the policy. The cluster must be running.
	Snapshot(ctx context.Context, cl *clustersv1alpha1.Cluster, retention Retention) (Snapshot, error)
	// Snapshots lists cl's snapshots, newest first.
	Snapshots(ctx context.Context, cl *clustersv1alpha1.Cluster) ([]Snapshot, error)
	// CheckRestore checks that snapshot name of cl exists, is intact and is cl's own: an Error
	// with reason ReasonRestoreRefused says what is wrong. Nothing changes.
	CheckRestore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) (Snapshot, error)
	// Restore checks snapshot name as CheckRestore does and starts replacing cl's etcd data by
	// it; it returns without waiting. Ensure's State says Restoring until the cluster serves the
	// snapshot's data, then State.Restored reports the restore. The data it replaces is moved
	// aside, never deleted.
	Restore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) error
}

// Snapshot is one verified etcd snapshot of a cluster.
type Snapshot struct {
	// Name identifies the snapshot among its cluster's: the UTC time it was taken (sortable).
	Name string `json:"name"`
	// Cluster is the UID of the Cluster it is of.
	Cluster types.UID `json:"cluster"`
	// Namespace is that Cluster's namespace: a snapshot belongs to it, and only a Cluster of the
	// same namespace may be made from it (AnnotationRestoreFrom). Empty in the records of
	// snapshots taken before it was recorded: those restore only into their own Cluster.
	Namespace string `json:"namespace,omitempty"`
	// Taken is when it was taken.
	Taken time.Time `json:"taken"`
	// Size is its size in bytes.
	Size int64 `json:"size"`
	// Revision is etcd's revision in it; Keys the number of keys.
	Revision int64 `json:"revision"`
	Keys     int64 `json:"keys"`
	// Version is the Kubernetes version the cluster ran.
	Version string `json:"version"`
	// SHA256 is the checksum of the file as taken: a restore refuses a file that differs.
	SHA256 string `json:"sha256"`
	// RemovedForSpace, set by Backups.Snapshot only (never recorded), names the snapshots removed
	// before this one was saved, beyond the retention policy, because the destination was full.
	RemovedForSpace []string `json:"-"`
}

// Ref is how another Cluster names the snapshot in AnnotationRestoreFrom.
func (s Snapshot) Ref() string { return string(s.Cluster) + "/" + s.Name }

// ParseSnapshotRef splits an AnnotationRestoreFrom value into the Cluster UID and the snapshot
// name; the error says what the value should look like. Both are checked (a UUID, and a name as
// snapshots are named), so that neither can name a file outside the snapshots of that Cluster.
func ParseSnapshotRef(ref string) (types.UID, string, error) {
	uid, name, ok := strings.Cut(strings.TrimSpace(ref), "/")
	if !ok || uuid.Validate(uid) != nil || !ValidSnapshotName(name) {
		return "", "", fmt.Errorf("%s %q is not \"<uid of a Cluster>/<snapshot name>\" (the UID in the other Cluster's metadata.uid, the name as its status.providerStatus.backups lists it)",
			AnnotationRestoreFrom, ref)
	}
	return types.UID(uid), name, nil
}

// snapshotName is how snapshots are named: the UTC second they were taken, and a counter for a
// second one in the same second.
var snapshotName = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z(-[0-9]{1,4})?$`)

// ValidSnapshotName reports whether name is a snapshot's name (20261125T213000Z).
func ValidSnapshotName(name string) bool { return snapshotName.MatchString(name) }

// Restored is the last restore a Backend made of a cluster (State.Restored), done or failed.
type Restored struct {
	// Snapshot is the snapshot brought back.
	Snapshot Snapshot `json:"snapshot"`
	// At is when its data was put in place.
	At time.Time `json:"at"`
	// MovedAside is where the data it replaced was moved ("" if there was none).
	MovedAside string `json:"movedAside,omitempty"`
	// Failed, when not empty, says why the restore failed: the cluster runs with its data as it
	// was.
	Failed string `json:"failed,omitempty"`
}
