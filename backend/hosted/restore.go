package hosted

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"maps"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// Restores of hosted control planes. A restore is recorded in the control plane's record
// (restoreRun) and carried on by each Ensure, so that an operator that ends meanwhile (or a new
// leader) finishes it:
//
//  1. serve: a Job of BackupNamespace (restore-hcp-…, cmd/etcd-snapshot serve) mounts the claim
//     of the snapshot's Cluster, checks the snapshot (SHA-256 as recorded, etcdutl reads it) and
//     serves it over HTTPS (a certificate of the restored control plane's etcd CA) to whoever
//     shows a token made for this restore; a refusal ends the restore here, nothing changed;
//  2. stop: once the serve is ready, the API servers (and their controller managers) are scaled
//     to zero, and the restore waits until none runs: an API server's watch cache would go on
//     serving the old data while etcd's is swapped under it;
//  3. etcd: etcd's StatefulSet gets a new data folder (restored-<time>) and an init container that
//     fetches the snapshot, checks its SHA-256 and restores it there (etcdutl, the revision bumped
//     and marked compacted, so that every watch from before the restore ends in 410 Gone), as the
//     member it is, into a NEW etcd cluster (its own --initial-cluster-token: a new cluster ID,
//     which no member running the old data can join); every etcd pod is replaced at once (a highly
//     available etcd restores all its members together from one snapshot). The previous data
//     folder stays on the claims. The API servers stay stopped until EVERY member runs the
//     restored data, however long that takes (a member whose node is cordoned or lost): the
//     cluster is stopped on the restored data, never a mix of old and restored members, and
//     never "reverted" to the old folder (its members would not agree with the restored ones).
//     Meanwhile the state says which members are not done and, after restoreTimeout, what to do;
//     a serve that ended before every member fetched the snapshot is made anew;
//  4. apiserver: the API servers start again (their watches and caches start anew on the
//     restored data); once they serve, the restore is done: State.Restored reports it and the
//     serve goes.
//
// A new Cluster with backend.AnnotationRestoreFrom starts the same way, at 2, from its first pod.

// Phases of a restore.
const (
	restoreServe     = "serve"
	restoreStop      = "stop"
	restoreEtcd      = "etcd"
	restoreAPIServer = "apiserver"
)

// restoreRun is a restore under way, in the record.
type restoreRun struct {
	Snapshot backend.Snapshot `json:"snapshot"`
	// DataDir is the etcd data folder it makes; PreviousDataDir the one it replaces ("" for a new
	// cluster).
	DataDir         string    `json:"dataDir"`
	PreviousDataDir string    `json:"previousDataDir,omitempty"`
	Phase           string    `json:"phase"`
	Started         time.Time `json:"started"`
	// EtcdStarted is when etcd's pods were replaced (step etcd): how long its members take.
	EtcdStarted time.Time `json:"etcdStarted,omitzero"`
	// FromStore: the serve fetches the snapshot from the object store (objectstore.go), the
	// claim lacking it (a claim lost with its node).
	FromStore bool `json:"fromStore,omitempty"`
}

// restoreTimeout bounds a restore's serve: one not ready by then fails the restore, before
// anything changed. Once etcd's data is swapped nothing bounds the restore: after restoreTimeout
// its state says what keeps etcd's members from the restored data.
const restoreTimeout = 15 * time.Minute

// CheckRestore checks that snapshot name is one of cl's (its list in BackupNamespace) and fits the
// version its control plane runs. The file itself is checked by the serve (step 1), before
// anything changes.
func (b *Backend) CheckRestore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) (backend.Snapshot, error) {
	snap, _, err := b.checkRestore(ctx, cl, name, nil)
	return snap, err
}

// checkRestore is CheckRestore, the snapshots of the object store cfg (nil: none) listed too; it
// says whether the snapshot is to be fetched from the store.
func (b *Backend) checkRestore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string, cfg *providersv1alpha1.BackupObjectStore) (backend.Snapshot, bool, error) {
	h, ps, found, err := b.locate(ctx, cl, nil)
	switch {
	case err != nil:
		return backend.Snapshot{}, false, err
	case h == nil || !found || ps.Version == "":
		return backend.Snapshot{}, false, backend.Errorf(backend.ReasonBackupUnavailable, "the control plane of %s is not made yet", backend.RefOf(cl))
	case ps.Restore != nil:
		return backend.Snapshot{}, false, snapshots.Refuse("a restore of snapshot %s runs (step %s): wait until it ends", ps.Restore.Snapshot.Ref(), ps.Restore.Phase)
	case ps.StorageClassName == "":
		return backend.Snapshot{}, false, snapshots.Refuse("this control plane's etcd keeps its data on an emptyDir: it has no snapshots to restore")
	}
	snap, fromStore, err := b.findSnapshot(ctx, h, cl.UID, name, cl, cfg)
	if err != nil {
		return snap, false, err
	}
	return snap, fromStore, snapshots.VersionFits(snap, ps.Version)
}

// findSnapshot finds snapshot name of the Cluster with uid in its list, and with the object store
// cfg (nil: none) in the store's too: from the store (true) when the claim's list lacks it or the
// claim is gone (lost with its node and deleted: docs/backups.md).
func (b *Backend) findSnapshot(ctx context.Context, h *host, uid types.UID, name string, cl *clustersv1alpha1.Cluster, cfg *providersv1alpha1.BackupObjectStore) (backend.Snapshot, bool, error) {
	if !backend.ValidSnapshotName(name) {
		return backend.Snapshot{}, false, snapshots.Refuse("%q is not a snapshot name (like 20261125T213000Z); the names are in status.providerStatus.backups", name)
	}
	all, err := readCatalog(ctx, h, NamespaceFor(uid))
	if err != nil {
		return backend.Snapshot{}, false, err
	}
	snap, err := snapshots.Find(all, uid, name, cl.Namespace, cl.UID)
	if cfg == nil {
		return snap, false, err
	}
	claimed, cerr := claimUsable(ctx, h, NamespaceFor(uid))
	if cerr != nil {
		return snap, false, cerr
	}
	if err == nil && claimed {
		return snap, false, nil
	}
	fromStore, serr := b.inStore(ctx, cfg, uid, name, cl)
	if serr != nil {
		return snap, false, serr
	}
	return fromStore, true, nil
}

// Restore checks snapshot name as CheckRestore does and records the restore; the next Ensure
// carries it out.
func (b *Backend) Restore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string) error {
	return b.restore(ctx, cl, name, nil)
}

// restore is Restore, from the object store cfg (nil: none) when the claim lacks the snapshot.
func (b *Backend) restore(ctx context.Context, cl *clustersv1alpha1.Cluster, name string, cfg *providersv1alpha1.BackupObjectStore) error {
	snap, fromStore, err := b.checkRestore(ctx, cl, name, cfg)
	if err != nil {
		return err
	}
	h, ps, _, err := b.locate(ctx, cl, nil)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Second)
	prev := ps.EtcdDataDir
	if prev == "" {
		prev = "data"
	}
	ps.Restore = &restoreRun{Snapshot: snap, DataDir: "restored-" + now.Format(snapshots.NameLayout), PreviousDataDir: prev, Phase: restoreServe, Started: now, FromStore: fromStore}
	b.opts.Logger.Info("Restoring a hosted control plane from a snapshot", "cluster", backend.RefOf(cl).String(), "snapshot", snap.Ref(), "fromObjectStore", fromStore)
	return writeRecord(ctx, h, &Spec{Namespace: NamespaceFor(cl.UID), Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, Profile: cl.Spec.Profile, UID: cl.UID}}, ps)
}

// restoreFrom starts the record of a new control plane made from the snapshot its Cluster's
// backend.AnnotationRestoreFrom names; a reference that does not check is refused before
// anything is made.
// With the object store cfg (nil: none), the snapshot may be one of the store's.
func (b *Backend) restoreFrom(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, ps *providerStatus, cfg *providersv1alpha1.BackupObjectStore) error {
	ref, ok := cl.Annotations[backend.AnnotationRestoreFrom]
	if !ok {
		return nil
	}
	uid, name, err := backend.ParseSnapshotRef(ref)
	if err != nil {
		return snapshots.Refuse("%v", err)
	}
	if ps.StorageClassName == "" {
		return snapshots.Refuse("the ProviderConfig has no spec.hosted.storageClassName: a control plane made from a snapshot keeps its etcd on a claim")
	}
	snap, fromStore, err := b.findSnapshot(ctx, h, uid, name, cl, cfg)
	if err != nil {
		return err
	}
	now := time.Now().UTC().Truncate(time.Second)
	run := &restoreRun{Snapshot: snap, DataDir: "restored-" + now.Format(snapshots.NameLayout), Phase: restoreServe, Started: now, FromStore: fromStore}
	ps.Restore, ps.EtcdDataDir, ps.RestoredMark = run, run.DataDir, run.DataDir
	ps.EtcdRestoredFrom = &RestoreSource{URL: serveURL(NamespaceFor(cl.UID)), SHA256: snap.SHA256}
	return nil
}

// restoreSpec sets what s's workloads are made of during and after a restore, from ps.
func (s *Spec) restoreSpec(ps providerStatus) {
	s.EtcdDataDir, s.EtcdRestore, s.RestoredMark = ps.EtcdDataDir, ps.EtcdRestoredFrom, ps.RestoredMark
	s.Restoring = ps.Restore != nil
	s.APIServersStopped = stopsAPIServers(ps.Restore)
}

// advanceRestore carries ps.Restore on by one step where it can (see the top of this file) and
// returns why the control plane does not serve yet (empty: the restore is done, failed or absent).
// It changes ps; the caller records it and makes s from it again (restoreSpec).
func (b *Backend) advanceRestore(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, s *Spec, ps *providerStatus) (string, error) {
	run := ps.Restore
	if run == nil {
		return "", nil
	}
	msg := fmt.Sprintf("Restoring etcd from snapshot %s (taken %s)", run.Snapshot.Ref(), run.Snapshot.Taken.Format(time.RFC3339))
	fail := func(why string) (string, error) {
		b.opts.Logger.Info("A restore of a hosted control plane failed", "cluster", backend.RefOf(cl).String(), "snapshot", run.Snapshot.Ref(), "why", why)
		ps.Restored = &backend.Restored{Snapshot: run.Snapshot, At: time.Now().UTC().Truncate(time.Second), Failed: why}
		ps.Restore = nil
		return "", b.endServe(ctx, h, s.Namespace)
	}
	switch run.Phase {
	case restoreServe:
		return b.serveStep(ctx, h, s, ps, msg, fail)
	case restoreStop:
		return stopStep(ctx, h, s, ps, msg)
	case restoreEtcd:
		return b.etcdStep(ctx, h, s, ps, msg)
	case restoreAPIServer:
		return b.apiServerStep(ctx, h, cl, s, ps, msg)
	}
	return "", fmt.Errorf("the record of %s holds a restore in an unknown step %q", s.Namespace, run.Phase)
}

// serveStep is the first step of ps.Restore: its serve is made, and once it serves the snapshot
// (its readiness: it checked the snapshot before it listens), etcd goes to the new data folder; a
// serve that failed fails the restore.
func (b *Backend) serveStep(ctx context.Context, h *host, s *Spec, ps *providerStatus, msg string, fail func(string) (string, error)) (string, error) {
	run := ps.Restore
	serve, err := b.ensureServe(ctx, h, s, run)
	if err != nil {
		return "", err
	}
	if serve.ended {
		if err := b.task(serveJobs, h, s).result(ctx, serve, &snapshotResult{}); err != nil {
			why := err.Error()
			if run.PreviousDataDir != "" {
				why += "; nothing changed"
			}
			return fail(fmt.Sprintf("the snapshot serve of %s failed: %s", run.Snapshot.Ref(), why))
		}
		// It served every member already (a new cluster's pods fetch from their start).
	} else if ptr.Deref(serve.job.Status.Ready, 0) == 0 {
		if time.Since(run.Started) > restoreTimeout {
			why := fmt.Sprintf("restoring snapshot %s did not start in %s: its serve is not ready (see the pods of Job %s/%s)", run.Snapshot.Ref(), restoreTimeout, BackupNamespace, serve.job.Name)
			if run.PreviousDataDir != "" {
				why += "; nothing changed"
			}
			return fail(why)
		}
		return msg + ": its snapshot is checked and served (Job " + BackupNamespace + "/" + serve.job.Name + ").", nil
	}
	// The serve checked the snapshot and serves it: the API servers stop (a new cluster's etcd
	// restores it from its first pod, and its API servers wait for it).
	if run.PreviousDataDir != "" {
		run.Phase = restoreStop
		return msg + ": " + stopping, nil
	}
	swapEtcd(s, ps)
	return msg + ": etcd's members restore it into " + run.DataDir + ".", nil
}

// Names of a restore's objects in BackupNamespace: the serve's Job, Service and Secret (its
// certificate and the token).
func serveName(ns string) string { return "restore-" + ns }

// serveURL is the URL of the snapshot served to the control plane in namespace ns.
func serveURL(ns string) string {
	return fmt.Sprintf("https://%s.%s.svc:%d/snapshot", serveName(ns), BackupNamespace, portServe)
}

// serveJobs are the serves of restores (task.go): one per restore, kept until it ends (endServe).
var serveJobs = jobKind{what: "snapshot serve", component: ComponentServe, name: serveName, deadline: restoreTimeout + 5*time.Minute, leaf: serveLeaf}

// serveLeaf is the serve's certificate: of the restored control plane's etcd CA, which its etcd
// pods trust, for the serve's Service.
func serveLeaf(ns string) certs.Leaf {
	name := serveName(ns)
	return certs.Leaf{CommonName: name, Hosts: []string{name + "." + BackupNamespace + ".svc"}, Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
}

// ensureServe makes the serve of run's snapshot for the control plane of s, unless it runs: the
// token (in BackupNamespace for the serve, in the control plane's namespace for its etcd pods), the
// serve's certificate (made for its Job: task.go), its Service and Job.
func (b *Backend) ensureServe(ctx context.Context, h *host, s *Spec, run *restoreRun) (jobRun, error) {
	t := b.task(serveJobs, h, s)
	serve, err := t.observe(ctx)
	if err != nil || serve.job != nil {
		return serve, err
	}
	token := make([]byte, 32)
	if _, err := rand.Read(token); err != nil {
		return serve, err
	}
	tok := []byte(hex.EncodeToString(token))
	// Made anew for each serve: a token of an earlier restore is worth nothing. The etcd pods'
	// copy is in another namespace than the Job, so it cannot be the Job's: endServe deletes it.
	etcdCopy := &corev1.Secret{TypeMeta: typeMeta("v1", "Secret"), ObjectMeta: s.meta(SecretRestoreToken, ComponentEtcd), Data: map[string][]byte{"token": tok}}
	if err := h.client.Delete(ctx, etcdCopy); client.IgnoreNotFound(err) != nil {
		return serve, err
	}
	if err := h.client.Create(ctx, etcdCopy); err != nil {
		return serve, fmt.Errorf("creating Secret %s/%s: %w", etcdCopy.Namespace, etcdCopy.Name, err)
	}
	bs := s.backupSpec()
	job := bs.ServeJob(s.Namespace, run.Snapshot, int(s.replicas(ComponentEtcd)))
	data := map[string][]byte{"token": tok}
	also := []client.Object{bs.ServeService()}
	if run.FromStore {
		if s.ObjectStore == nil {
			return serve, snapshots.Refuse("snapshot %s is to be fetched from the object store, and the ProviderConfig has no spec.backup.objectStore any more: set it back", run.Snapshot.Ref())
		}
		creds, err := b.storeCredentials(ctx, s.ObjectStore)
		if err != nil {
			return serve, err
		}
		maps.Copy(data, creds)
		if s.ObjectStore.CABundle != "" {
			data[storeCAFile] = []byte(s.ObjectStore.CABundle)
		}
		serveFromStore(job, s.Namespace, s.Cluster.Namespace, s.ObjectStore)
		also = append(also, bs.StoreNetworkPolicy(s.Namespace, s.ObjectStore))
	}
	if err := t.start(ctx, job, data, also...); err != nil {
		return serve, err
	}
	return t.status(job), nil
}

// endServe removes a restore's serve, its Service and both copies of its token.
func (b *Backend) endServe(ctx context.Context, h *host, ns string) error {
	name := serveName(ns)
	for _, obj := range []client.Object{
		&batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: name}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: name}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: name}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: SecretRestoreToken}},
	} {
		if err := h.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting %s/%s after the restore: %w", obj.GetNamespace(), obj.GetName(), err)
		}
	}
	return nil
}

// ServeService is the Service of the serve for the control plane in namespace s.Namespace's
// Cluster (s is its backupSpec).
func (s *Spec) ServeService() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: s.meta(serveName(NamespaceFor(s.Cluster.UID)), ComponentServe),
		Spec: corev1.ServiceSpec{
			Selector: s.selector(ComponentServe),
			Ports:    []corev1.ServicePort{{Name: "https", Port: portServe, TargetPort: intstr.FromInt32(portServe), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// ServeJob serves snap (from the claim of the Cluster it is of) to the members etcd pods of the
// control plane in namespace ns, then ends.
func (s *Spec) ServeJob(ns string, snap backend.Snapshot, members int) *batchv1.Job {
	const tlsMount = "/etc/serve"
	pod := s.podSpec(ComponentServe, []corev1.Container{{
		Name:    ComponentServe,
		Image:   s.Image,
		Command: []string{binDir + "etcd-snapshot"},
		Args: []string{"serve", "--dir=" + snapshotsMount, "--cluster=" + string(snap.Cluster), "--name=" + snap.Name, fmt.Sprintf("--listen=:%d", portServe),
			fmt.Sprintf("--count=%d", members), "--token-file=" + tlsMount + "/token", "--tls-cert=" + tlsMount + "/tls.crt", "--tls-key=" + tlsMount + "/tls.key",
			"--timeout=" + restoreTimeout.String()},
		Ports: []corev1.ContainerPort{{Name: "https", ContainerPort: portServe, Protocol: corev1.ProtocolTCP}},
		// Listening means the snapshot checked: the serve checks before it listens.
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(portServe)}}, PeriodSeconds: 1},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "snapshots", MountPath: snapshotsMount, ReadOnly: true},
			{Name: "serve", MountPath: tlsMount, ReadOnly: true},
		},
	}})
	pod.Volumes = append(pod.Volumes,
		corev1.Volume{Name: "snapshots", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{
			ClaimName: namesFor(NamespaceFor(snap.Cluster)).claim, ReadOnly: true}}},
		serveJobs.secretVolume("serve", ns))
	return serveJobs.template(s, ns, pod)
}
