package objectstore

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"

	"filippo.io/age"
)

// KeySize is the size of an encryption key, in bytes before base64.
const KeySize = 32

// scryptWorkFactor is the scrypt cost (log2 N) of the age recipient. The key is 32 random bytes,
// not a password a person chose: no work factor adds to its strength, so a low one keeps each
// snapshot's sealing and opening fast. age's default is 18.
const scryptWorkFactor = 12

// maxWorkFactor is the highest scrypt cost Open accepts.
const maxWorkFactor = 16

// Key is an encryption key: the base64 of KeySize random bytes (`openssl rand -base64 32`).
type Key struct{ passphrase string }

// ParseKey checks an encryption key as the Secret holds it.
func ParseKey(s string) (Key, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(raw) != KeySize {
		return Key{}, fmt.Errorf("the encryption key must be the base64 of %d random bytes (make one with `openssl rand -base64 32`), not %d characters that are not", KeySize, len(s))
	}
	return Key{passphrase: s}, nil
}

// Seal returns a writer that encrypts what is written to it into dst; Close finishes it (and
// does not close dst). The format is age's (https://age-encryption.org/v1): an scrypt stanza with
// the key as passphrase, then the payload in 64 KiB chunks sealed with ChaCha20-Poly1305, so
// `age -d` opens it with the key typed as the passphrase.
func Seal(dst io.Writer, k Key) (io.WriteCloser, error) {
	if k.passphrase == "" {
		return nil, errors.New("no encryption key")
	}
	r, err := age.NewScryptRecipient(k.passphrase)
	if err != nil {
		return nil, err
	}
	r.SetWorkFactor(scryptWorkFactor)
	return age.Encrypt(dst, r)
}

// ErrWrongKey is a sealed object that the key does not open.
var ErrWrongKey = errors.New("it does not decrypt with this encryption key: it was encrypted with another one")

// Open returns a reader of the plaintext sealed in src with k. Each chunk is authenticated as it
// is read: a reader that was changed fails with an error, and so does one cut short.
func Open(src io.Reader, k Key) (io.Reader, error) {
	id, err := age.NewScryptIdentity(k.passphrase)
	if err != nil {
		return nil, err
	}
	// An object of the bucket may say any work factor: one far above what Seal writes would take
	// gigabytes of memory to open (scrypt's 128·8·2^N bytes), so none above 2^16 (64 MiB) is.
	id.SetMaxWorkFactor(maxWorkFactor)
	r, err := age.Decrypt(src, id)
	var none *age.NoIdentityMatchError
	if errors.As(err, &none) {
		return nil, ErrWrongKey
	}
	if err != nil {
		return nil, fmt.Errorf("it is not sealed as snapshots are (age): %w", err)
	}
	return r, nil
}
