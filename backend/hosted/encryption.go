package hosted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
)

// Encryption at rest (backend/encryption): a control plane's keys and the EncryptionConfiguration
// its API servers read are Secret SecretEncryption of its namespace, which only the operator and
// the API server's pod read. Two API servers run at once during every rollout (blue/green) and
// always when highly available, so a key is staged before it writes: the API servers roll to read
// it (the pod template carries the config's checksum, AnnotationEncryption), and only once no API
// server without it runs does it move first and the API servers roll again; then every Secret is
// rewritten with it. A control plane made by a release before encryption goes the same way from
// plain text; a new one starts with its key writing. A rotation (the Cluster's annotation
// backend.AnnotationRotateEncryptionKey) is staged the same way, one at a time; the old keys stay
// to read older snapshots.
//
// Each snapshot keeps the keys it needs in BackupNamespace (Secret keys-hcp-…, which outlives the
// Cluster like its snapshots; encryption.Kept), stored only wrapped with the key in Secret
// KeyWrappingSecret of the operator's own namespace in the platform (made once, immutable, never
// replaced; never beside the snapshots, never on a seed; BackupNamespace records its ID,
// AnnotationKeyWrapping, so that no other is made while copies need it); a restore unwraps and
// adopts them before its serve reads the snapshot. The copy records which keys each snapshot needs (those in
// use when its Job started, AnnotationSnapshotKeys, and when it ended, and any added meanwhile)
// and holds those and the keys the control plane uses; the others are removed at each snapshot's
// end and at the Cluster's deletion, and with the last snapshot of a deleted Cluster the copy
// goes. Nothing is removed while a snapshot of an earlier release (no record of what it needs) is
// listed. A copy an earlier release kept in plain text (key encryption.StateFile) is read as it
// is and replaced by the wrapped one when the copy is next written.

// SecretEncryption holds a control plane's encryption keys (encryption.StateFile) and its API
// servers' EncryptionConfiguration (encryption.ConfigFile).
const SecretEncryption = "encryption"

// encryptionRetry is how soon a failed rewrite of the Secrets is tried again.
const encryptionRetry = 30 * time.Second

// configSum is the checksum of an EncryptionConfiguration (Spec.Encryption).
func configSum(cfg []byte) string { return hashOf([]string{string(cfg)}) }

// readKeys reads the encryption keys in Secret name of namespace ns; found is false when there
// is none. Keys that do not read are an error of reason StateDamaged: replaced, the Secrets written
// with them could never be read again.
func readKeys(ctx context.Context, c client.Reader, ns, name string) (s encryption.State, found bool, err error) {
	sec := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, sec); apierrors.IsNotFound(err) {
		return s, false, nil
	} else if err != nil {
		return s, false, fmt.Errorf("reading Secret %s/%s: %w", ns, name, err)
	}
	if err := json.Unmarshal(sec.Data[encryption.StateFile], &s); err != nil || len(s.Keys) == 0 {
		return s, false, backend.Errorf(backend.ReasonStateDamaged,
			"Secret %s/%s holds the cluster's encryption keys, which do not read (%v): it is not replaced, the Secrets written with them could not be read again; restore it from a backup (Secret %s/keys-%s holds the keys in use at the last snapshot, wrapped with the key in Secret %s of the operator's namespace)",
			ns, name, err, BackupNamespace, ns, KeyWrappingSecret)
	}
	return s, true, nil
}

// keysData is the content of Secret SecretEncryption for s.
func keysData(s encryption.State) (map[string][]byte, error) {
	state, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	cfg, err := s.Config()
	if err != nil {
		return nil, err
	}
	return map[string][]byte{encryption.StateFile: state, encryption.ConfigFile: cfg}, nil
}

// encryptionKeys brings the keys of s's control plane one step on and sets s.Encryption: the
// first key is made (staged when API servers already run without one); a staged key writes once
// every API server reads with it; the rotation cl asks for is staged once the last is done; a
// restore under way adopts the keys of its snapshot's cluster. It returns the keys as written.
func (b *Backend) encryptionKeys(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, s *Spec, ps providerStatus) (encryption.State, error) {
	dep := &appsv1.Deployment{}
	running := true
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep); apierrors.IsNotFound(err) {
		running = false
	} else if err != nil {
		return encryption.State{}, err
	}
	st, found, err := readKeys(ctx, h.memo, s.Namespace, SecretEncryption)
	if err != nil {
		return st, err
	}
	changed := !found
	switch {
	case !found && running && dep.Spec.Template.Annotations[AnnotationEncryption] != "":
		return st, backend.Errorf(backend.ReasonStateDamaged,
			"Secret %s/%s with the cluster's encryption keys is gone while its API servers encrypt Secrets with them: no new key is made (the Secrets written with the old ones could not be read again); restore the Secret from a backup (Secret %s/%s holds the keys in use at the last snapshot, wrapped with the key in Secret %s of the operator's namespace)",
			s.Namespace, SecretEncryption, BackupNamespace, namesFor(s.Namespace).keys, KeyWrappingSecret)
	case !found:
		if st, err = encryption.New(time.Now()); err != nil {
			return st, err
		}
		// API servers run without encryption (a release before it): they read the key before it writes.
		st.Staged = running
	}
	if ps.Restore != nil {
		// The restored Secrets are written with the keys of the snapshot's cluster (or in plain text).
		from := ps.Restore.Snapshot.Cluster
		kept, err := b.readKept(ctx, h, NamespaceFor(from), from)
		if err == nil && !kept.found && ps.Restore.FromStore {
			kept, err = b.storeKept(ctx, s, ps.Restore.Snapshot) // none beside the snapshots: the store's
		}
		if err != nil {
			return st, err
		}
		if kept.found && st.Adopt(kept.Keys) {
			changed = true
		} else if st.Migrated != "" {
			st.Migrated, changed = "", true
		}
	}
	cfg, err := st.Config()
	if err != nil {
		return st, err
	}
	switch {
	case st.Staged && running && apiServersRead(ctx, h, s, dep, configSum(cfg)):
		st.Staged, changed = false, true
		b.opts.Logger.Info("Every API server reads with the new encryption key: it writes now", "cluster", backend.RefOf(cl).String(), "key", st.Keys[0].Name)
	case !st.Staged && st.Done():
		rotated, err := st.Rotate(cl.Annotations[backend.AnnotationRotateEncryptionKey], time.Now())
		if err != nil {
			return st, err
		}
		if rotated {
			st.Staged, changed = running, true
			b.opts.Logger.Info("Rotating the encryption key: every API server reads with it before it writes", "cluster", backend.RefOf(cl).String(), "key", st.Keys[0].Name)
		}
	}
	if changed {
		data, err := keysData(st)
		if err != nil {
			return st, err
		}
		if err := ensureSecret(ctx, h.memo, s, SecretEncryption, func(map[string][]byte) (map[string][]byte, error) { return data, nil }); err != nil {
			return st, err
		}
		cfg = data[encryption.ConfigFile]
	}
	s.Encryption = configSum(cfg)
	return st, nil
}

// apiServersRead reports whether every API server of s runs with the EncryptionConfiguration of
// checksum sum: dep's template carries it, it rolled out, and no older pod still serves.
func apiServersRead(ctx context.Context, h *host, s *Spec, dep *appsv1.Deployment, sum string) bool {
	return dep.Spec.Template.Annotations[AnnotationEncryption] == sum && rolledOut(dep) && !oldAPIServers(ctx, h, s)
}

// rewriteSecrets rewrites every Secret of the control plane with the key that writes, once it
// writes with it and every API server reads with it; cfg is the operator's admin config. It
// returns the keys as written, and the error of a failed rewrite (tried again after
// encryptionRetry).
func (b *Backend) rewriteSecrets(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, s *Spec, st encryption.State, cfg *rest.Config) (encryption.State, error) {
	if st.Staged || st.Done() || cfg == nil {
		return st, nil
	}
	dep := &appsv1.Deployment{}
	if err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep); err != nil || !apiServersRead(ctx, h, s, dep, s.Encryption) {
		return st, client.IgnoreNotFound(err)
	}
	start := time.Now()
	n, err := b.opts.RewriteSecrets(ctx, cfg)
	if err != nil {
		return st, fmt.Errorf("rewriting the Secrets with encryption key %s: %w", st.Writer(), err)
	}
	st.Migrated = st.Writer()
	data, err := keysData(st)
	if err != nil {
		return st, err
	}
	if err := ensureSecret(ctx, h.memo, s, SecretEncryption, func(map[string][]byte) (map[string][]byte, error) { return data, nil }); err != nil {
		return st, err
	}
	b.opts.Logger.Info("Rewrote every Secret with the encryption key", "cluster", backend.RefOf(cl).String(), "key", st.Writer(),
		"secrets", n, "took", time.Since(start).Round(time.Millisecond).String())
	return st, nil
}

// KeyWrappingSecret is the Secret, in the operator's own namespace of the platform
// (Options.Namespace), that holds the key wrapping the copies of the encryption keys kept beside
// the snapshots: never beside them, never on a seed. Made once (immutable), never replaced.
const KeyWrappingSecret = "cluster-provider-key-wrapping"

// keyWrappingData is the key of the wrapping key in KeyWrappingSecret.
const keyWrappingData = "key"

// wrappingKey reads the wrapping key (nil: there is none); with create it makes one when there is
// none.
func (b *Backend) wrappingKey(ctx context.Context, create bool) (*encryption.WrappingKey, error) {
	ns := b.opts.Namespace
	if ns == "" {
		return nil, backend.Errorf(backend.ReasonBackupUnavailable,
			"the hosted backend does not know the operator's namespace, where Secret %s wraps the encryption keys kept beside the snapshots: run the operator in a pod, or set --leader-election-namespace", KeyWrappingSecret)
	}
	h, err := b.hostFor(ctx, nil)
	if err != nil || h == nil {
		return nil, errors.Join(err, errors.New("the hosted backend is starting"))
	}
	key := client.ObjectKey{Namespace: ns, Name: KeyWrappingSecret}
	sec := &corev1.Secret{}
	err = h.client.Get(ctx, key, sec)
	switch {
	case apierrors.IsNotFound(err) && !create:
		return nil, nil
	case apierrors.IsNotFound(err):
		secret, err := encryption.GenerateWrappingKey()
		if err != nil {
			return nil, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: KeyWrappingSecret, Labels: map[string]string{LabelManagedBy: ManagedBy}},
			Type:       corev1.SecretTypeOpaque, Immutable: ptr.To(true), Data: map[string][]byte{keyWrappingData: secret},
		}
		if err := h.client.Create(ctx, sec); apierrors.IsAlreadyExists(err) {
			return b.wrappingKey(ctx, false) // made meanwhile: that one
		} else if err != nil {
			return nil, fmt.Errorf("creating Secret %s, the key that wraps the encryption keys kept beside the snapshots: %w", key, err)
		}
		b.opts.Logger.Info("Made the key that wraps the encryption keys kept beside the snapshots", "secret", key.String())
	case err != nil:
		return nil, fmt.Errorf("reading Secret %s, the key that wraps the encryption keys kept beside the snapshots: %w", key, err)
	}
	w, err := encryption.NewWrappingKey(sec.Data[keyWrappingData])
	if err != nil {
		return nil, backend.Errorf(backend.ReasonStateDamaged,
			"Secret %s holds the key that wraps the encryption keys kept beside the snapshots, and it does not read (%v): it is left as it is, never replaced, as the keys wrapped with it could not be read again with another; put it back from a backup",
			key, err)
	}
	return w, nil
}

// keptCopy is the copy of a Cluster's keys kept beside its snapshots, as read: found is false
// when there is none; wrapped when it is wrapped, plain when an earlier release's plain copy is
// (also) there.
type keptCopy struct {
	encryption.Kept
	found, wrapped, plain bool
}

// readKept reads the copy of the keys of the control plane in namespace ns (of the Cluster with
// uid) kept beside its snapshots in BackupNamespace: the wrapped one, and what an earlier release
// kept there in plain text (encryption.StateFile; both, if both are there: a release before this
// one may have run since).
func (b *Backend) readKept(ctx context.Context, h *host, ns string, uid types.UID) (keptCopy, error) {
	var k keptCopy
	name := namesFor(ns).keys
	sec := &corev1.Secret{}
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: name}, sec); apierrors.IsNotFound(err) {
		return k, nil
	} else if err != nil {
		return k, fmt.Errorf("reading Secret %s/%s: %w", BackupNamespace, name, err)
	}
	if data, ok := sec.Data[encryption.KeptFile]; ok {
		w, err := b.wrappingKey(ctx, false)
		if err != nil {
			return k, err
		}
		if w == nil {
			id, _ := encryption.WrappedWith(data)
			return k, backend.Errorf(backend.ReasonStateDamaged,
				"the encryption keys kept beside the snapshots in Secret %s/%s are wrapped with key %s, and Secret %s/%s, which holds it, is missing: put it back from a backup (no new one is made while a copy needs this one)",
				BackupNamespace, name, id, b.opts.Namespace, KeyWrappingSecret)
		}
		if k.Kept, err = w.Unwrap(data, string(uid)); err != nil {
			return k, backend.Errorf(backend.ReasonStateDamaged,
				"the encryption keys kept beside the snapshots in Secret %s/%s do not unwrap: %v; they are left as they are", BackupNamespace, name, err)
		}
		k.wrapped = true
	}
	if data, ok := sec.Data[encryption.StateFile]; ok {
		var plain encryption.State
		if err := json.Unmarshal(data, &plain); err != nil || len(plain.Keys) == 0 {
			return k, backend.Errorf(backend.ReasonStateDamaged,
				"Secret %s/%s holds encryption keys in the plain form of an earlier release, which do not read (%v): it is left as it is", BackupNamespace, name, err)
		}
		k.Merge(encryption.FromState(plain))
		k.plain = true
	}
	k.found = true
	return k, nil
}

// writeKept writes k, the keys kept beside the snapshots of s's Cluster, wrapped (the Secret's
// data replaced whole: a plain copy of an earlier release goes), or deletes the copy when no key
// is left. A new wrapping key is made only for a Cluster whose copy is not wrapped yet: one that
// is needs the key it was wrapped with.
func (b *Backend) writeKept(ctx context.Context, h *host, s *Spec, k keptCopy) error {
	name := namesFor(s.Namespace).keys
	if len(k.Keys) == 0 {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: name}}
		if err := h.client.Delete(ctx, sec); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting Secret %s/%s: %w", BackupNamespace, name, err)
		}
		return nil
	}
	w, err := b.wrappingKeyFor(ctx, h, !k.wrapped)
	if err != nil {
		return err
	}
	data, err := w.Wrap(k.Kept, string(s.Cluster.UID))
	if err != nil {
		return err
	}
	return ensureSecret(ctx, h.client, s.backupSpec(), name, func(map[string][]byte) (map[string][]byte, error) {
		return map[string][]byte{encryption.KeptFile: data}, nil
	})
}

// AnnotationKeyWrapping, on BackupNamespace, is the ID of the wrapping key the copies there are
// wrapped with. No copy is wrapped there with another, and no wrapping key is made anew while the
// platform's or this host's records one: after the Secret was deleted, copies wrapped with a new
// key would be unreadable once the old one is put back.
const AnnotationKeyWrapping = "hosted.clusters.openmcp.cloud/key-wrapping"

// wrappingKeyFor is the wrapping key for a copy written in BackupNamespace of h, recorded there
// (AnnotationKeyWrapping). With create it makes one when there is none and none is recorded (on h
// or the platform).
func (b *Backend) wrappingKeyFor(ctx context.Context, h *host, create bool) (*encryption.WrappingKey, error) {
	hosts := []*host{h}
	if p, err := b.hostFor(ctx, nil); err == nil && p != nil && p != h {
		hosts = append(hosts, p)
	}
	var recorded string
	backups := &corev1.Namespace{}
	for i, x := range hosts {
		ns := &corev1.Namespace{}
		if err := x.client.Get(ctx, client.ObjectKey{Name: BackupNamespace}, ns); client.IgnoreNotFound(err) != nil {
			return nil, fmt.Errorf("reading namespace %s: %w", BackupNamespace, err)
		}
		if i == 0 {
			backups = ns
		}
		if id := ns.Annotations[AnnotationKeyWrapping]; id != "" && (recorded == "" || i == 0) {
			recorded = id
		}
	}
	w, err := b.wrappingKey(ctx, create && recorded == "")
	switch {
	case err != nil:
		return nil, err
	case w == nil:
		return nil, backend.Errorf(backend.ReasonStateDamaged,
			"Secret %s/%s, the key that wraps the encryption keys kept beside the snapshots, is missing, while copies are wrapped with key %s (annotation %s of namespace %s): no new one is made, which could never unwrap them; put it back from a backup",
			b.opts.Namespace, KeyWrappingSecret, recorded, AnnotationKeyWrapping, BackupNamespace)
	case recorded != "" && recorded != w.ID():
		return nil, backend.Errorf(backend.ReasonStateDamaged,
			"the encryption keys kept beside the snapshots in namespace %s are wrapped with key %s (its annotation %s), but Secret %s/%s holds key %s: put back the Secret with key %s "+
				"(if it is lost for good, remove the annotation: the copies wrapped with it stay unreadable, and new ones are wrapped with %s)",
			BackupNamespace, recorded, AnnotationKeyWrapping, b.opts.Namespace, KeyWrappingSecret, w.ID(), recorded, w.ID())
	}
	if backups.Name != "" && backups.Annotations[AnnotationKeyWrapping] != w.ID() {
		orig := backups.DeepCopy()
		if backups.Annotations == nil {
			backups.Annotations = map[string]string{}
		}
		backups.Annotations[AnnotationKeyWrapping] = w.ID()
		if err := h.client.Patch(ctx, backups, client.MergeFrom(orig)); err != nil {
			return nil, fmt.Errorf("recording the wrapping key on namespace %s: %w", BackupNamespace, err)
		}
	}
	return w, nil
}

// AnnotationSnapshotKeys, on a snapshot Job, is what its start saw of the control plane's keys
// (encryption.Mark, JSON: names only), so that its end records the keys the snapshot needs.
const AnnotationSnapshotKeys = "hosted.clusters.openmcp.cloud/encryption-keys"

// snapshotMark reads AnnotationSnapshotKeys of job; false without it (a Job of an earlier release:
// the snapshot may need any key).
func snapshotMark(job *batchv1.Job) (encryption.Mark, bool) {
	var m encryption.Mark
	if job == nil {
		return m, false
	}
	v, ok := job.Annotations[AnnotationSnapshotKeys]
	return m, ok && json.Unmarshal([]byte(v), &m) == nil
}

// settleKeys brings the copy of the keys kept beside the snapshots of s's Cluster up to date
// (encryption.Kept.Settle) with its control plane's keys (running; none: gone) and the snapshots
// of its list; with snapshot, taken by job, it first records the keys that snapshot needs (from
// what the Job's start saw, AnnotationSnapshotKeys). It writes the copy when it changed, and
// returns the names of the keys removed.
func (b *Backend) settleKeys(ctx context.Context, h *host, s *Spec, running *encryption.State, snapshot string, job *batchv1.Job) ([]string, error) {
	kept, err := b.readKept(ctx, h, s.Namespace, s.Cluster.UID)
	if err != nil {
		return nil, err
	}
	before, err := json.Marshal(kept.Kept)
	if err != nil {
		return nil, err
	}
	if mark, ok := snapshotMark(job); ok && snapshot != "" {
		var after encryption.State
		if running != nil {
			after = *running
		}
		kept.Record(snapshot, mark.Needs(after), after)
	}
	all, err := readCatalog(ctx, h, s.Namespace)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(all))
	for i, x := range all {
		names[i] = x.Name
	}
	removed := kept.Settle(running, names, false)
	after, err := json.Marshal(kept.Kept)
	if err != nil {
		return nil, err
	}
	if (!kept.found && len(kept.Keys) == 0) || (kept.wrapped && !kept.plain && string(before) == string(after)) {
		return nil, nil
	}
	return removed, b.writeKept(ctx, h, s, kept)
}

// runningKeys reads the keys of s's control plane (nil: none, it writes plain text or is gone).
func runningKeys(ctx context.Context, h *host, s *Spec) (*encryption.State, error) {
	st, found, err := readKeys(ctx, h.client, s.Namespace, SecretEncryption)
	if err != nil || !found {
		return nil, err
	}
	return &st, nil
}

// keepKeys, at the start of a snapshot of s's control plane, keeps the keys it uses beside the
// snapshots (settleKeys), and returns what the start saw of them for the Job's annotation.
func (b *Backend) keepKeys(ctx context.Context, h *host, s *Spec) (encryption.Mark, error) {
	running, err := runningKeys(ctx, h, s)
	if err != nil {
		return encryption.Mark{}, err
	}
	if _, err := b.settleKeys(ctx, h, s, running, "", nil); err != nil {
		return encryption.Mark{}, err
	}
	if running == nil {
		return encryption.Mark{}, nil
	}
	return running.Mark(), nil
}

// recordKeys, at the end of snapshot job, records the keys the snapshot it took needs beside the
// snapshots, and removes those no snapshot needs.
func (b *Backend) recordKeys(ctx context.Context, h *host, s *Spec, snapshot string, job *batchv1.Job) error {
	running, err := runningKeys(ctx, h, s)
	if err != nil {
		return err
	}
	removed, err := b.settleKeys(ctx, h, s, running, snapshot, job)
	if err == nil && len(removed) > 0 {
		b.opts.Logger.Info("Removed encryption keys no snapshot needs from beside the snapshots", "cluster", s.Cluster.Namespace+"/"+s.Cluster.Name, "keys", removed)
	}
	return err
}

// settleGoneKeys, once cl's control plane is gone, removes the keys kept beside its snapshots
// that none of them needs (all of them with the last).
func (b *Backend) settleGoneKeys(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster) ([]string, error) {
	s := &Spec{Namespace: NamespaceFor(cl.UID), Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, Profile: cl.Spec.Profile, UID: cl.UID}}
	return b.settleKeys(ctx, h, s, nil, "", nil)
}
