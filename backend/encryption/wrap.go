package encryption

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Wrapping: the copy of a cluster's keys kept beside its snapshots (Kept) is stored sealed
// (AES-256-GCM) with a key of the operator's, the WrappingKey, which never lies beside the
// snapshots: the local backend keeps it in a file of its state folder outside the backups, the
// hosted backend in a Secret of the operator's own namespace. Whoever copies the snapshots and
// what lies beside them gets Secrets encrypted with keys they cannot read.
//
// A wrapping key is made once and never replaced: every copy wrapped with it would be unreadable
// with another. One that does not read is an error that says what to do.

// KeptFile names the wrapped copy beside the snapshots: a file of the local backend's keys
// folder, a key of the hosted backend's Secret. (An earlier release kept the keys there in plain
// text as StateFile and ConfigFile; they are read, and removed when the copy is next written.)
const KeptFile = "kept-keys.json"

// WrappingKeySize is a wrapping key's length in bytes (AES-256).
const WrappingKeySize = 32

const wrapCipher = "AES-256-GCM"

// WrappingKey seals and opens the copies of clusters' keys kept beside their snapshots.
type WrappingKey struct {
	id   string
	aead cipher.AEAD
}

// NewWrappingKey is the wrapping key of secret (WrappingKeySize random bytes).
func NewWrappingKey(secret []byte) (*WrappingKey, error) {
	if len(secret) != WrappingKeySize {
		return nil, fmt.Errorf("a wrapping key has %d bytes, not %d", len(secret), WrappingKeySize)
	}
	block, err := aes.NewCipher(secret)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("cluster-provider key wrapping\x00"), secret...))
	return &WrappingKey{id: "wk-" + hex.EncodeToString(sum[:8]), aead: aead}, nil
}

// GenerateWrappingKey returns WrappingKeySize random bytes.
func GenerateWrappingKey() ([]byte, error) {
	secret := make([]byte, WrappingKeySize)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	return secret, nil
}

// ID names w (derived from it, revealing nothing of it): each wrapped copy records the ID of the
// key it was wrapped with, so that a copy and a key that do not belong together say so.
func (w *WrappingKey) ID() string { return w.id }

// wrapped is how a Kept is stored: the cipher, the ID of the wrapping key, and the Kept's JSON
// sealed (the nonce, then the ciphertext and its tag).
type wrapped struct {
	Cipher      string `json:"cipher"`
	WrappedWith string `json:"wrappedWith"`
	Sealed      []byte `json:"sealed"`
}

// aad binds a wrapped copy to the Cluster whose keys it holds: one put in another's place does
// not open.
func aad(owner string) []byte { return []byte("cluster-provider kept keys\x00" + owner) }

// Wrap seals k, the keys of the Cluster with UID owner.
func (w *WrappingKey) Wrap(k Kept, owner string) ([]byte, error) {
	plain, err := json.Marshal(k)
	if err != nil {
		return nil, err
	}
	defer clear(plain)
	nonce := make([]byte, w.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return json.Marshal(wrapped{Cipher: wrapCipher, WrappedWith: w.id, Sealed: w.aead.Seal(nonce, nonce, plain, aad(owner))})
}

// WrappedWith is the ID of the wrapping key data (Wrap's) was sealed with.
func WrappedWith(data []byte) (string, error) {
	var c wrapped
	if err := json.Unmarshal(data, &c); err != nil {
		return "", fmt.Errorf("does not read as wrapped keys: %w", err)
	}
	if c.WrappedWith == "" || c.Cipher != wrapCipher {
		return "", fmt.Errorf("does not read as wrapped keys (cipher %q, wrapping key %q)", c.Cipher, c.WrappedWith)
	}
	return c.WrappedWith, nil
}

// Unwrap opens data, which Wrap sealed for the Cluster with UID owner. A copy wrapped with another
// key says which.
func (w *WrappingKey) Unwrap(data []byte, owner string) (Kept, error) {
	id, err := WrappedWith(data)
	if err != nil {
		return Kept{}, err
	}
	if id != w.id {
		return Kept{}, fmt.Errorf("wrapped with key %s, but the wrapping key is %s: put back the wrapping key they were wrapped with", id, w.id)
	}
	var c wrapped
	if err := json.Unmarshal(data, &c); err != nil {
		return Kept{}, err
	}
	n := w.aead.NonceSize()
	if len(c.Sealed) < n {
		return Kept{}, errors.New("the wrapped keys are cut short")
	}
	plain, err := w.aead.Open(nil, c.Sealed[:n], c.Sealed[n:], aad(owner))
	if err != nil {
		return Kept{}, fmt.Errorf("the wrapped keys do not open with wrapping key %s (damaged, or the copy of another Cluster)", w.id)
	}
	defer clear(plain)
	var k Kept
	if err := json.Unmarshal(plain, &k); err != nil {
		return Kept{}, fmt.Errorf("the unwrapped keys do not read: %w", err)
	}
	return k, nil
}

// LoadWrappingKeyFile reads the wrapping key in file path (64 hex digits, 0600). Without one it
// returns nil, or with create makes one: written whole beside it first, then linked in place, so
// that a crash never leaves half a key and one made meanwhile is never replaced. A file that does
// not read is an error that says what to do; it is never replaced.
func LoadWrappingKeyFile(path string, create bool) (*WrappingKey, error) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist) && create:
		if err := makeWrappingKeyFile(path); err != nil {
			return nil, fmt.Errorf("making the key that wraps the encryption keys kept beside the snapshots, %s: %w", path, err)
		}
		return LoadWrappingKeyFile(path, false)
	case errors.Is(err, os.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("reading %s, the key that wraps the encryption keys kept beside the snapshots: %w", path, err)
	}
	secret, herr := hex.DecodeString(strings.TrimSpace(string(data)))
	defer clear(secret)
	w, err := NewWrappingKey(secret)
	if herr != nil || err != nil {
		return nil, fmt.Errorf("%s, the key that wraps the encryption keys kept beside the snapshots, does not read as one (64 hex digits): it is left as it is, "+
			"never replaced, as the keys wrapped with it could not be read again with another; put it back from a backup of the state folder", path)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(path, 0o600); err != nil {
			return nil, fmt.Errorf("%s is readable by others than the operator's user, and making it 0600 failed: %w", path, err)
		}
	}
	return w, nil
}

// makeWrappingKeyFile writes a new wrapping key to path unless one is there.
func makeWrappingKeyFile(path string) error {
	secret, err := GenerateWrappingKey()
	if err != nil {
		return err
	}
	defer clear(secret)
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*") // 0600
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.WriteString(hex.EncodeToString(secret) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	// A link, not a rename: it fails when the file is there, never replacing a key.
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
