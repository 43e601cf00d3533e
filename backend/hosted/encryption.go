package hosted

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
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
// to read older snapshots. Each snapshot keeps the keys in BackupNamespace (Secret keys-hcp-…,
// which outlives the Cluster like its snapshots); a restore adopts them.

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
			"Secret %s/%s holds the cluster's encryption keys, which do not read (%v): it is not replaced, the Secrets written with them could not be read again; restore it from a backup (Secret %s/keys-%s holds the keys as of the last snapshot)",
			ns, name, err, BackupNamespace, ns)
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
	st, found, err := readKeys(ctx, h.client, s.Namespace, SecretEncryption)
	if err != nil {
		return st, err
	}
	changed := !found
	switch {
	case !found && running && dep.Spec.Template.Annotations[AnnotationEncryption] != "":
		return st, backend.Errorf(backend.ReasonStateDamaged,
			"Secret %s/%s with the cluster's encryption keys is gone while its API servers encrypt Secrets with them: no new key is made (the Secrets written with the old ones could not be read again); copy the keys back from Secret %s/%s (as of the last snapshot), or restore the Secret from a backup",
			s.Namespace, SecretEncryption, BackupNamespace, namesFor(s.Namespace).keys)
	case !found:
		if st, err = encryption.New(time.Now()); err != nil {
			return st, err
		}
		// API servers run without encryption (a release before it): they read the key before it writes.
		st.Staged = running
	}
	if ps.Restore != nil {
		// The restored Secrets are written with the keys of the snapshot's cluster (or in plain text).
		kept, ok, err := readKeys(ctx, h.client, BackupNamespace, namesFor(NamespaceFor(ps.Restore.Snapshot.Cluster)).keys)
		if err != nil {
			return st, err
		}
		if ok && st.Adopt(kept.Keys) {
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
		if err := ensureSecret(ctx, h.client, s, SecretEncryption, func(map[string][]byte) (map[string][]byte, error) { return data, nil }); err != nil {
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
	if err := ensureSecret(ctx, h.client, s, SecretEncryption, func(map[string][]byte) (map[string][]byte, error) { return data, nil }); err != nil {
		return st, err
	}
	b.opts.Logger.Info("Rewrote every Secret with the encryption key", "cluster", backend.RefOf(cl).String(), "key", st.Writer(),
		"secrets", n, "took", time.Since(start).Round(time.Millisecond).String())
	return st, nil
}

// keepKeys copies the encryption keys of s's control plane into BackupNamespace beside its
// snapshots (Secret keys-hcp-…), adding to those kept before: a snapshot's Secrets are written with
// them, and a restore, into this Cluster or a new one, needs them.
func keepKeys(ctx context.Context, h *host, s *Spec) error {
	st, found, err := readKeys(ctx, h.client, s.Namespace, SecretEncryption)
	if err != nil || !found {
		return err // none: the control plane writes plain text
	}
	name := namesFor(s.Namespace).keys
	kept, _, err := readKeys(ctx, h.client, BackupNamespace, name)
	if err != nil {
		return err
	}
	kept.Adopt(st.Keys)
	kept.Migrated, kept.Rotation, kept.Staged = "", "", false
	state, err := json.Marshal(kept)
	if err != nil {
		return err
	}
	return ensureSecret(ctx, h.client, s.backupSpec(), name, func(cur map[string][]byte) (map[string][]byte, error) {
		if string(cur[encryption.StateFile]) == string(state) {
			return nil, nil
		}
		return map[string][]byte{encryption.StateFile: state}, nil
	})
}
