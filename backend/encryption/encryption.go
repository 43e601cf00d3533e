// Package encryption is the encryption at rest of the clusters whose etcd a backend runs: each
// cluster's Secrets are written to etcd encrypted (secretbox: XSalsa20 and Poly1305) with a key of
// its own, which only the operator and the cluster's API server read. It holds the keys
// (State), the EncryptionConfiguration kube-apiserver reads (--encryption-provider-config), and
// the rewrite of every Secret that moves them to the key that writes (Rewrite).
//
// A State's first key writes, the others read. identity (plain text) is always the last
// provider: it reads what was written before encryption (a cluster made by an earlier release, a
// snapshot of one restored) until the rewrite; it never writes. A rotation puts a new key first
// and rewrites every Secret with it; the old keys stay, read-only, so that a snapshot taken before
// the rotation can still be restored: a restore needs the keys its Secrets were written with.
//
// Where two API servers of one cluster run at once (the hosted backend's blue/green rollouts and
// highly available control planes), a new key is Staged first: every API server reads with it
// before any writes with it, so none meets a Secret it cannot read.
//
// Beside a cluster's snapshots the backends keep the keys they need (Kept: per snapshot, the keys
// it needs, Mark; plus the keys the cluster uses, InUse), stored only wrapped with a WrappingKey
// that is kept where the snapshots are not (wrap.go); the keys nothing needs any more are removed
// (Kept.Settle), never one a snapshot of unknown needs might read.
package encryption

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
)

// File names: the EncryptionConfiguration kube-apiserver reads, and the State it is made from.
const (
	ConfigFile = "encryption-config.yaml"
	StateFile  = "encryption.json"
)

// Prefix is how etcd's value of an encrypted object begins: Prefix + the key's name + ":".
const Prefix = "k8s:enc:secretbox:v1:"

// Resources are what is encrypted.
var Resources = []string{"secrets"}

// Key is one encryption key.
type Key struct {
	// Name names it in etcd's values (Prefix + Name + ":").
	Name string `json:"name"`
	// Secret is its 32 bytes.
	Secret []byte `json:"secret"`
	// Created is when it was made.
	Created time.Time `json:"created"`
}

// NewKey makes a key named after now and a random suffix: keys of two clusters made in the same
// second (one restored from the other's snapshot reads with both) never share a name.
func NewKey(now time.Time) (Key, error) {
	now = now.UTC().Truncate(time.Second)
	suffix := make([]byte, 4)
	k := Key{Secret: make([]byte, 32), Created: now}
	if _, err := rand.Read(k.Secret); err != nil {
		return Key{}, err
	}
	if _, err := rand.Read(suffix); err != nil {
		return Key{}, err
	}
	k.Name = "key-" + now.Format("20060102T150405Z") + "-" + hex.EncodeToString(suffix)
	return k, nil
}

// State is a cluster's keys: Keys[0] writes, the others read. Migrated is the key every Secret
// was last rewritten with ("": not since the keys changed); Rotation is the value of the request
// that made the last rotation (the Cluster's annotation). Staged: Keys[0] only reads yet, the
// next key (or, with no other key, identity: plain text) writes, until every API server reads
// with Keys[0] (then Staged is cleared).
type State struct {
	Keys     []Key  `json:"keys"`
	Migrated string `json:"migrated,omitempty"`
	Rotation string `json:"rotation,omitempty"`
	Staged   bool   `json:"staged,omitempty"`
}

// New is the State of a cluster without one: one key, every Secret still to rewrite (a cluster
// made by an earlier release has them in plain text; a new one has few).
func New(now time.Time) (State, error) {
	k, err := NewKey(now)
	if err != nil {
		return State{}, err
	}
	return State{Keys: []Key{k}}, nil
}

// Writer is the name of the key that writes ("": none, plain text).
func (s State) Writer() string {
	if len(s.Keys) == 0 || s.plainFirst() {
		return ""
	}
	return s.ordered()[0].Name
}

// ordered are the keys in the order the API server tries them, the first writing: a Staged key
// comes last.
func (s State) ordered() []Key {
	if s.Staged && len(s.Keys) > 1 {
		return append(slices.Clone(s.Keys[1:]), s.Keys[0])
	}
	return s.Keys
}

// plainFirst: the only key is Staged, so identity writes (plain text) until it is not.
func (s State) plainFirst() bool { return s.Staged && len(s.Keys) == 1 }

// Done reports whether every Secret is written with the key that writes.
func (s State) Done() bool { return s.Migrated != "" && s.Migrated == s.Writer() }

// Rotate puts a new key first for request, unless request made the last rotation (or is empty);
// it reports whether it did. The Secrets are then to rewrite.
func (s *State) Rotate(request string, now time.Time) (bool, error) {
	if request == "" || request == s.Rotation {
		return false, nil
	}
	k, err := NewKey(now)
	if err != nil {
		return false, err
	}
	if slices.ContainsFunc(s.Keys, func(x Key) bool { return x.Name == k.Name }) {
		return false, fmt.Errorf("a key named %s exists: rotate again in a second", k.Name)
	}
	s.Keys = append([]Key{k}, s.Keys...)
	s.Rotation = request
	return true, nil
}

// Adopt adds the keys of another State (a snapshot's, restored into this cluster) that s lacks,
// read-only, and marks every Secret to rewrite. It reports whether s changed.
func (s *State) Adopt(keys []Key) bool {
	changed := false
	for _, k := range keys {
		if !slices.ContainsFunc(s.Keys, func(x Key) bool { return x.Name == k.Name }) {
			s.Keys = append(s.Keys, k)
			changed = true
		}
	}
	if s.Migrated != "" {
		s.Migrated, changed = "", true
	}
	return changed
}

// Config is the EncryptionConfiguration of s, as kube-apiserver reads it.
func (s State) Config() ([]byte, error) {
	if len(s.Keys) == 0 {
		return nil, errors.New("no encryption key")
	}
	keys := make([]apiserverv1.Key, len(s.Keys))
	for i, k := range s.ordered() {
		if len(k.Secret) != 32 {
			return nil, fmt.Errorf("encryption key %s has %d bytes, not 32", k.Name, len(k.Secret))
		}
		keys[i] = apiserverv1.Key{Name: k.Name, Secret: base64.StdEncoding.EncodeToString(k.Secret)}
	}
	cfg := apiserverv1.EncryptionConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: "apiserver.config.k8s.io/v1", Kind: "EncryptionConfiguration"},
		Resources: []apiserverv1.ResourceConfiguration{{
			Resources: Resources,
			Providers: []apiserverv1.ProviderConfiguration{
				{Secretbox: &apiserverv1.SecretboxConfiguration{Keys: keys}},
				{Identity: &apiserverv1.IdentityConfiguration{}},
			},
		}},
	}
	if s.plainFirst() {
		// identity first writes plain text and, failing on an encrypted value, lets secretbox read it.
		p := cfg.Resources[0].Providers
		p[0], p[1] = p[1], p[0]
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// Status is what a Cluster's status.providerStatus says of its encryption at rest.
type Status struct {
	// Key is the key that writes ("" while a cluster's first key is staged: plain text); Keys
	// how many the API server reads with.
	Key  string `json:"key"`
	Keys int    `json:"keys"`
	// Staged is the key every API server is to read with before it writes.
	Staged string `json:"staged,omitempty"`
	// Rewritten: every Secret is written with Key.
	Rewritten bool `json:"rewritten"`
	// Error is why the last rewrite or rotation failed.
	Error string `json:"error,omitempty"`
}

// Status is s's Status, with the last error (if any).
func (s State) Status(lastErr string) *Status {
	st := &Status{Key: s.Writer(), Keys: len(s.Keys), Rewritten: s.Done(), Error: lastErr}
	if s.Staged && len(s.Keys) > 0 {
		st.Staged = s.Keys[0].Name
	}
	return st
}

// Load reads the State in folder dir; found is false when there is none.
func Load(dir string) (s State, found bool, err error) {
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	} else if err != nil {
		return State{}, false, err
	}
	if err := json.Unmarshal(data, &s); err != nil || len(s.Keys) == 0 {
		return State{}, false, fmt.Errorf("%s does not read as encryption keys (%v): left as it is; without its keys the cluster's Secrets cannot be read", filepath.Join(dir, StateFile), err)
	}
	return s, true, nil
}

// Save writes s and its EncryptionConfiguration into folder dir, readable by the operator only
// (0600), each file replaced at once (write, then rename).
func Save(dir string, s State) error {
	state, err := json.Marshal(s)
	if err != nil {
		return err
	}
	cfg, err := s.Config()
	if err != nil {
		return err
	}
	// The state first: a config of keys the state lacks would be lost with the next Save.
	if err := writeAtomic(filepath.Join(dir, StateFile), state); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, ConfigFile), cfg)
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Rewrite rewrites every Secret of the cluster behind cfg unchanged: kube-apiserver stores each
// again with the key that writes (one read with another key, or as plain text, is stale and so is
// written although nothing changed). It returns how many it rewrote.
func Rewrite(ctx context.Context, cfg *rest.Config) (int, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	n := 0
	opts := metav1.ListOptions{Limit: 250}
	for {
		list, err := cs.CoreV1().Secrets("").List(ctx, opts)
		if err != nil {
			return n, fmt.Errorf("listing Secrets: %w", err)
		}
		for i := range list.Items {
			sec := &list.Items[i]
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				_, err := cs.CoreV1().Secrets(sec.Namespace).Update(ctx, sec, metav1.UpdateOptions{})
				if apierrors.IsConflict(err) {
					if cur, gerr := cs.CoreV1().Secrets(sec.Namespace).Get(ctx, sec.Name, metav1.GetOptions{}); gerr == nil {
						sec = cur
					}
				}
				return err
			})
			switch {
			case apierrors.IsNotFound(err): // deleted meanwhile: nothing to rewrite
			case err != nil:
				return n, fmt.Errorf("rewriting Secret %s/%s: %w", sec.Namespace, sec.Name, err)
			default:
				n++
			}
		}
		if list.Continue == "" {
			return n, nil
		}
		opts.Continue = list.Continue
	}
}
