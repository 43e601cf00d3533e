package hosted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// Snapshots of hosted control planes. Each host cluster keeps them in namespace BackupNamespace,
// outside the control planes' namespaces, so that they outlive their Cluster: per Cluster a claim
// of its etcd's storage class (snapshots-hcp-…, four times etcd's claim) with the snapshot files
// (backend/snapshots' layout), a ConfigMap listing them (snapshots-hcp-…, key snapshots.json,
// what `kubectl get` shows), the encryption keys its snapshots' Secrets are written with
// (keys-hcp-…, encryption.go; outlives the Cluster too). A snapshot is a Job (snapshot-hcp-…) that
// runs cmd/etcd-snapshot of the control plane's own image with an etcd client certificate made for
// that Job alone (Secret snapshot-hcp-…, valid for the Job's deadline and a margin, owned by the
// Job: jobcert.go): etcdctl streams etcd's database onto the claim, etcdutl reads it whole, its
// SHA-256 is recorded and those the ProviderConfig's retention removes are removed (on a full
// claim, before the save: backend.Retention.MakeRoom); the Job's
// termination message tells the backend what it did, and the Job and its Secret go.
const (
	// BackupNamespace holds every hosted control plane's snapshots in a host cluster. Whoever reads
	// its claims or Secrets reads every Secret of those clusters.
	BackupNamespace = "cluster-provider-backups"
	// ComponentSnapshot labels the snapshot Jobs' pods (the etcd NetworkPolicy lets them in),
	// ComponentServe the pods that serve a snapshot to a restore (labelled with the Cluster
	// restored).
	ComponentSnapshot = "etcd-snapshot"
	ComponentServe    = "etcd-snapshot-serve"
	// portServe is the serve's HTTPS port.
	portServe = 8443
	// catalogKey is the list of a Cluster's snapshots (JSON, newest first) in its ConfigMap.
	catalogKey     = "snapshots.json"
	snapshotsMount = "/snapshots"
	// snapshotDeadline bounds a snapshot Job, its pod's start included.
	snapshotDeadline = 10 * time.Minute
	// snapshotUser is the name in the etcd client certificates of the snapshot and maintenance
	// Jobs.
	snapshotUser = "etcd-snapshot"
)

var _ backend.Backups = &Backend{}

// ReasonSnapshotInProgress: a snapshot Job runs; the snapshot is there once it ends.
const ReasonSnapshotInProgress = backend.ReasonSnapshotInProgress

// backupNames are the names, in BackupNamespace, of what belongs to the control plane in
// namespace ns. The snapshot and maintenance Jobs' Secrets are named after them (jobcert.go);
// shared is the long-lived etcd client certificate earlier versions kept for all of them, deleted
// when a Job starts and with the Cluster.
type backupNames struct{ claim, catalog, shared, job, maintain, keys string }

func namesFor(ns string) backupNames {
	return backupNames{claim: "snapshots-" + ns, catalog: "snapshots-" + ns, shared: "etcd-client-" + ns, job: "snapshot-" + ns, maintain: "maintain-" + ns,
		keys: "keys-" + ns}
}

// backupSpec is the Spec whose meta labels what BackupNamespace holds of s's Cluster.
func (s *Spec) backupSpec() *Spec {
	return &Spec{Namespace: BackupNamespace, Cluster: s.Cluster, Image: s.Image, StorageClassName: s.StorageClassName, StorageSize: s.StorageSize}
}

// snapshotJobs are the snapshot Jobs (task.go): one at a time per control plane; a failed one is
// tried again when the Cluster controller asks again.
var snapshotJobs = jobKind{what: "snapshot", component: ComponentSnapshot, name: func(ns string) string { return namesFor(ns).job },
	deadline: snapshotDeadline, leaf: clientLeaf}

// Snapshot takes a snapshot of cl's etcd with a Job on its host. The Job runs for a while: while it
// does, Snapshot returns an error of reason ReasonSnapshotInProgress (call again: the Job's end
// notifies the Cluster); once it ended, the snapshot it took, or why it failed.
func (b *Backend) Snapshot(ctx context.Context, cl *clustersv1alpha1.Cluster, retention backend.Retention) (backend.Snapshot, error) {
	return b.snapshot(ctx, cl, retention, nil)
}

// snapshot is Snapshot, the snapshot uploaded to the object store cfg as well (nil: none;
// objectstore.go).
func (b *Backend) snapshot(ctx context.Context, cl *clustersv1alpha1.Cluster, retention backend.Retention, cfg *providersv1alpha1.BackupObjectStore) (backend.Snapshot, error) {
	h, s, version, err := b.backupTarget(ctx, cl)
	if err != nil {
		return backend.Snapshot{}, err
	}
	if woke, err := b.wakeForSnapshot(ctx, h, s, cl); err != nil || woke {
		if err == nil {
			err = backend.Errorf(ReasonSnapshotInProgress, "the control plane is hibernated: it wakes for this snapshot")
		}
		return backend.Snapshot{}, err
	}
	t := b.task(snapshotJobs, h, s)
	run, err := t.observe(ctx)
	switch {
	case err != nil:
		return backend.Snapshot{}, err
	case run.job == nil:
		if err := b.startSnapshot(ctx, t, version, retention, cfg); err != nil {
			return backend.Snapshot{}, err
		}
		return backend.Snapshot{}, inProgress(t, "started")
	case !run.ended:
		return backend.Snapshot{}, inProgress(t, "runs")
	}
	var res snapshotResult
	err = t.result(ctx, run, &res)
	var storeErr error
	if err != nil && res.Snapshot != nil && res.Snapshot.Cluster == cl.UID {
		storeErr, err = err, nil // taken and kept on the claim; the object store failed
	}
	if err == nil && (res.Snapshot == nil || res.Snapshot.Cluster != cl.UID) {
		err = errors.New("it ended without a snapshot")
	}
	if err != nil {
		return backend.Snapshot{}, t.drop(ctx, fmt.Errorf("the snapshot Job %s failed: %w", t.key(), err))
	}
	res.Snapshot.Namespace = cl.Namespace // the Job does not know it; the catalog records it
	res.Snapshot.RemovedForSpace = res.RemovedForSpace
	if err := updateCatalog(ctx, h, s, *res.Snapshot, res.Removed); err != nil {
		return backend.Snapshot{}, err // the Job stays: harvested at the next call
	}
	if err := b.recordKeys(ctx, h, s, res.Snapshot.Name, run.job); err != nil {
		// The Job stays: harvested again. Until then the snapshot counts as needing every key.
		return backend.Snapshot{}, fmt.Errorf("recording the encryption keys snapshot %s needs: %w", res.Snapshot.Name, err)
	}
	b.opts.Logger.Info("Took a snapshot of a hosted etcd", "cluster", backend.RefOf(cl).String(), "snapshot", res.Snapshot.Name, "bytes", res.Snapshot.Size, "member", res.Member,
		"uploaded", res.Uploaded, "uploadedLate", res.UploadedLate, "removedFromStore", res.RemovedFromStore)
	if storeErr != nil {
		return *res.Snapshot, errors.Join(backend.Errorf(backend.ReasonBackupUnavailable,
			"snapshot %s was taken and is kept on the claim, but the object store failed: %v", res.Snapshot.Name, storeErr), t.drop(ctx, nil))
	}
	return *res.Snapshot, t.drop(ctx, nil)
}

// inProgress is the error of reason ReasonSnapshotInProgress for the snapshot Job of t that did
// what (started, runs); its end notifies the Cluster.
func inProgress(t task, what string) error {
	return backend.Errorf(ReasonSnapshotInProgress, "the snapshot Job %s %s", t.key(), what)
}

// backupTarget is cl's host, the Spec of its control plane and its version, as recorded; an
// error of reason BackupUnavailable when it cannot be snapshotted.
func (b *Backend) backupTarget(ctx context.Context, cl *clustersv1alpha1.Cluster) (*host, *Spec, string, error) {
	h, ps, found, err := b.locate(ctx, cl, nil)
	switch {
	case err != nil:
		return nil, nil, "", err
	case h == nil || !found || ps.Version == "":
		return nil, nil, "", backend.Errorf(backend.ReasonBackupUnavailable, "the control plane of %s is not made yet", backend.RefOf(cl))
	case ps.StorageClassName == "":
		return nil, nil, "", backend.Errorf(backend.ReasonBackupUnavailable,
			"this control plane's etcd keeps its data on an emptyDir, and its snapshots would go on a claim of its storage class, which it has none of: new Clusters of a ProviderConfig with spec.hosted.storageClassName have both")
	}
	s := &Spec{Namespace: NamespaceFor(cl.UID), Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, Profile: cl.Spec.Profile, UID: cl.UID},
		Image: ps.Image, StorageClassName: ps.StorageClassName, HighAvailability: ps.HighAvailability}
	if ps.StorageSize != "" {
		if q, err := resource.ParseQuantity(ps.StorageSize); err == nil {
			s.StorageSize = q
		}
	}
	return h, s, ps.Version, nil
}

// startSnapshot prepares BackupNamespace, keeps the encryption keys beside the snapshots, makes
// the snapshots' claim and starts the snapshot Job of t, which carries what its start saw of the
// keys.
// With the object store cfg, the Job uploads the snapshot (objectstore.go).
func (b *Backend) startSnapshot(ctx context.Context, t task, version string, retention backend.Retention, cfg *providersv1alpha1.BackupObjectStore) error {
	bs := t.s.backupSpec()
	var also []client.Object
	if cfg != nil {
		also = append(also, bs.StoreNetworkPolicy(t.s.Namespace, cfg))
	} else if err := dropStorePolicy(ctx, t.h, t.s.Namespace); err != nil {
		return err
	}
	if err := t.prepare(ctx, also...); err != nil {
		return err
	}
	mark, err := b.keepKeys(ctx, t.h, t.s)
	if err != nil {
		return fmt.Errorf("keeping the encryption keys beside the snapshots (no snapshot started): %w", err)
	}
	if err := t.h.createIfMissing(ctx, bs.SnapshotClaim(t.s.Namespace)); err != nil {
		return err
	}
	seen, err := json.Marshal(mark)
	if err != nil {
		return err
	}
	job := bs.SnapshotJob(t.s, version, retention)
	job.Annotations[AnnotationSnapshotKeys] = string(seen)
	var data map[string][]byte
	if cfg != nil {
		if data, err = b.storeJobData(ctx, t, cfg); err != nil {
			return err
		}
		withObjectStore(job, snapshotJobs, t.s.Namespace, t.s.Cluster.Namespace, cfg)
	}
	return t.launch(ctx, job, data)
}

// snapshotResult is what cmd/etcd-snapshot writes as its termination message.
type snapshotResult struct {
	Snapshot *backend.Snapshot `json:"snapshot,omitempty"`
	Removed  []string          `json:"removed,omitempty"`
	// RemovedForSpace are those of Removed taken out before the save, beyond the policy, for room.
	RemovedForSpace []string `json:"removedForSpace,omitempty"`
	Error           string   `json:"error,omitempty"`
	// Uploaded: the snapshot went to the object store too; UploadedLate are the earlier ones of
	// the claim the store lacked (an earlier Job could not upload them), uploaded with it;
	// RemovedFromStore are those the retention removed from it.
	Uploaded         bool     `json:"uploaded,omitempty"`
	UploadedLate     []string `json:"uploadedLate,omitempty"`
	RemovedFromStore []string `json:"removedFromStore,omitempty"`
	// Member is the etcd member the snapshot was taken from: one in the quorum.
	Member string `json:"member,omitempty"`
}

// Snapshots lists cl's snapshots, newest first, from its ConfigMap in BackupNamespace.
// It is asked at every reconcile, right after Ensure found the control plane's host: that host is
// used, without looking for the control plane again.
func (b *Backend) Snapshots(ctx context.Context, cl *clustersv1alpha1.Cluster) ([]backend.Snapshot, error) {
	b.mu.Lock()
	seed, known := b.where[cl.UID]
	b.mu.Unlock()
	var h *host
	var err error
	if known {
		h, err = b.hostFor(ctx, seed)
	} else {
		var found bool
		h, _, found, err = b.locate(ctx, cl, nil)
		if !found {
			return nil, err
		}
	}
	if err != nil || h == nil {
		return nil, err
	}
	return readCatalog(ctx, h, NamespaceFor(cl.UID))
}

func readCatalog(ctx context.Context, h *host, ns string) ([]backend.Snapshot, error) {
	cm := &corev1.ConfigMap{}
	name := namesFor(ns).catalog
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: name}, cm); apierrors.IsNotFound(err) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", BackupNamespace, name, err)
	}
	var all []backend.Snapshot
	if err := json.Unmarshal([]byte(cm.Data[catalogKey]), &all); err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s does not read: %w", BackupNamespace, name, err)
	}
	snapshots.Sort(all)
	return all, nil
}

// updateCatalog adds snapshot taken to the list of s's Cluster, recorded as of its namespace (a
// snapshot belongs to it: snapshots.Find), and drops those removed.
func updateCatalog(ctx context.Context, h *host, s *Spec, taken backend.Snapshot, removed []string) error {
	taken.Namespace = s.Cluster.Namespace
	all, err := readCatalog(ctx, h, s.Namespace)
	if err != nil {
		return err
	}
	all = slices.DeleteFunc(all, func(x backend.Snapshot) bool { return x.Name == taken.Name || slices.Contains(removed, x.Name) })
	all = append(all, taken)
	snapshots.Sort(all)
	data, err := json.Marshal(all)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: s.backupSpec().meta(namesFor(s.Namespace).catalog, ComponentSnapshot),
		Data: map[string]string{catalogKey: string(data)}}
	return h.apply(ctx, cm)
}

// BackupNamespaceObject is BackupNamespace (restricted Pod Security Standard).
func (s *Spec) BackupNamespaceObject() *corev1.Namespace {
	m := metav1.ObjectMeta{Name: BackupNamespace, Labels: map[string]string{LabelManagedBy: ManagedBy, "pod-security.kubernetes.io/enforce": "restricted"}}
	return &corev1.Namespace{TypeMeta: typeMeta("v1", "Namespace"), ObjectMeta: m}
}

// BackupNetworkPolicy lets only etcd pods into BackupNamespace's pods (the serves' port), and
// its pods out only to the control planes' etcd client port and DNS.
func (s *Spec) BackupNetworkPolicy() *networkingv1.NetworkPolicy {
	etcds := networkingv1.NetworkPolicyPeer{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelManagedBy: ManagedBy}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{LabelManagedBy: ManagedBy, LabelComponent: ComponentEtcd}},
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   typeMeta("networking.k8s.io/v1", "NetworkPolicy"),
		ObjectMeta: metav1.ObjectMeta{Name: "snapshots", Namespace: BackupNamespace, Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			// The serves, from etcd pods (each serve's token says which Cluster may fetch).
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{etcds},
				Ports: []networkingv1.NetworkPolicyPort{tcpPort(portServe)},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{
				{To: []networkingv1.NetworkPolicyPeer{etcds}, Ports: []networkingv1.NetworkPolicyPort{tcpPort(portEtcd)}},
				dnsEgress(),
			},
		},
	}
}

// SnapshotClaim is the claim of the snapshots of the control plane in namespace ns: of its
// etcd's storage class, four times its etcd's claim.
func (s *Spec) SnapshotClaim(ns string) *corev1.PersistentVolumeClaim {
	size := s.StorageSize
	if size.IsZero() {
		size = DefaultStorageSize
	}
	size = *resource.NewQuantity(size.Value()*4, resource.BinarySI)
	return &corev1.PersistentVolumeClaim{
		TypeMeta:   typeMeta("v1", "PersistentVolumeClaim"),
		ObjectMeta: s.meta(namesFor(ns).claim, ComponentSnapshot),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(s.StorageClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// SnapshotJob is the Job that takes a snapshot of the etcd of cp's control plane, of Kubernetes
// version, onto its claim (making room on a full claim first) and keeps what retention keeps,
// with the etcd client certificate in the Secret of its own name: from the member in the quorum
// (cmd/etcd-snapshot save --member, every member named), never one cut off from its peers.
func (s *Spec) SnapshotJob(cp *Spec, version string, retention backend.Retention) *batchv1.Job {
	ns := cp.Namespace
	names := namesFor(ns)
	const pki = "/etc/etcd/pki"
	args := append([]string{"save", "--dir=" + snapshotsMount, "--cluster=" + string(s.Cluster.UID), "--version=" + version}, retention.Flags()...)
	args = append(args, "--cacert="+pki+"/ca.crt", "--cert="+pki+"/tls.crt", "--key="+pki+"/tls.key")
	pod := s.podSpec(ComponentSnapshot, []corev1.Container{{
		Name:    ComponentSnapshot,
		Image:   s.Image,
		Command: []string{binDir + "etcd-snapshot"},
		Args:    append(args, cp.etcdMemberFlags()...),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("20m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: "snapshots", MountPath: snapshotsMount},
			{Name: "pki", MountPath: pki, ReadOnly: true},
		},
	}})
	pod.Volumes = append(pod.Volumes,
		corev1.Volume{Name: "snapshots", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: names.claim}}},
		snapshotJobs.secretVolume("pki", ns))
	return snapshotJobs.template(s, ns, pod)
}
