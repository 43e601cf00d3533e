package objectstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Config says where the object store is and how to reach it.
type Config struct {
	// Endpoint is the store's host[:port], or an http(s) URL of it without a path.
	Endpoint string
	// Bucket holds the objects; it must exist.
	Bucket string
	// Prefix is put before every key ("" for none); no leading or trailing slash needed.
	Prefix string
	// Region is the bucket's region; empty lets the client ask the store.
	Region string
	// Insecure speaks plain http: for tests against a local server only.
	Insecure bool
	// CABundle, PEM, is trusted for the store's serving certificate instead of the system's.
	CABundle []byte
	// PathStyle puts the bucket in the path (https://host/bucket/key), as most S3-compatible
	// stores need; false lets the client choose (virtual hosts for AWS, the path elsewhere).
	PathStyle bool
	// AccessKeyID and SecretAccessKey are the credentials.
	AccessKeyID, SecretAccessKey string
}

// Store is a bucket (and a prefix in it) of an S3-compatible object store.
type Store struct {
	client *minio.Client
	bucket string
	prefix string
}

// Object is what the store says of one object.
type Object struct {
	// Key is the object's key below the Store's prefix.
	Key          string
	Size         int64
	LastModified time.Time
}

// partSize is the size of the parts of a multipart upload of a stream of unknown size: 16 MiB,
// so that the store's limit of 10,000 parts allows snapshots up to 160 GiB (etcd's quota is 8).
const partSize = 16 << 20

// New checks cfg and returns a Store; nothing is sent before the first call.
func New(cfg Config) (*Store, error) {
	host, secure, err := endpoint(cfg.Endpoint, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	if cfg.Bucket == "" {
		return nil, errors.New("object store: no bucket")
	}
	if cfg.AccessKeyID == "" || cfg.SecretAccessKey == "" {
		return nil, errors.New("object store: the credentials need both an access key ID and a secret access key")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if len(cfg.CABundle) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("object store: the CA bundle holds no PEM certificate")
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	lookup := minio.BucketLookupAuto
	if cfg.PathStyle {
		lookup = minio.BucketLookupPath
	}
	c, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, ""),
		Secure:       secure,
		Transport:    tr,
		Region:       cfg.Region,
		BucketLookup: lookup,
	})
	if err != nil {
		return nil, fmt.Errorf("object store: %w", err)
	}
	return &Store{client: c, bucket: cfg.Bucket, prefix: strings.Trim(cfg.Prefix, "/")}, nil
}

// endpoint splits an endpoint into the host[:port] minio-go takes and whether it speaks https.
func endpoint(e string, insecure bool) (string, bool, error) {
	if e == "" {
		return "", false, errors.New("object store: no endpoint")
	}
	if !strings.Contains(e, "://") {
		return e, !insecure, nil
	}
	u, err := url.Parse(e)
	switch {
	case err != nil:
		return "", false, fmt.Errorf("object store: endpoint %q: %w", e, err)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.User != nil:
		return "", false, fmt.Errorf("object store: endpoint %q must be a host[:port] or a URL without path, query or user, e.g. https://s3.example.com", e)
	case u.Scheme == "http" && !insecure:
		return "", false, fmt.Errorf("object store: endpoint %q speaks plain http, which needs insecure (tests only)", e)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("object store: endpoint %q: the scheme must be https", e)
	}
	return u.Host, u.Scheme == "https", nil
}

// key is the full key of k below the prefix.
func (s *Store) key(k string) string {
	if s.prefix == "" {
		return k
	}
	return path.Join(s.prefix, k)
}

// Put writes r (size bytes, or -1 when unknown: then in parts of partSize) to key, streamed.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	_, err := s.client.PutObject(ctx, s.bucket, s.key(key), r, size, minio.PutObjectOptions{
		ContentType: contentType,
		PartSize:    partSize,
	})
	if err != nil {
		return s.fail("writing", key, err)
	}
	return nil
}

// Get opens key for reading; the caller closes it. A missing key is ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if _, err := s.Stat(ctx, key); err != nil { // GetObject sends nothing until the first read
		return nil, err
	}
	o, err := s.client.GetObject(ctx, s.bucket, s.key(key), minio.GetObjectOptions{})
	if err != nil {
		return nil, s.fail("reading", key, err)
	}
	return o, nil
}

// Stat says what the store has of key. A missing key is ErrNotFound.
func (s *Store) Stat(ctx context.Context, key string) (Object, error) {
	info, err := s.client.StatObject(ctx, s.bucket, s.key(key), minio.StatObjectOptions{})
	if err != nil {
		return Object{}, s.fail("reading", key, err)
	}
	return Object{Key: key, Size: info.Size, LastModified: info.LastModified}, nil
}

// List lists the objects whose keys start with prefix (below the Store's), at any depth.
func (s *Store) List(ctx context.Context, prefix string) ([]Object, error) {
	full := s.key(prefix)
	if strings.HasSuffix(prefix, "/") && !strings.HasSuffix(full, "/") {
		full += "/"
	}
	var out []Object
	for info := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: full, Recursive: true}) {
		if info.Err != nil {
			return nil, s.fail("listing", prefix, info.Err)
		}
		k := strings.TrimPrefix(info.Key, s.prefix)
		if s.prefix != "" {
			k = strings.TrimPrefix(k, "/")
		}
		out = append(out, Object{Key: k, Size: info.Size, LastModified: info.LastModified})
	}
	return out, nil
}

// Delete removes key; a missing key is no error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.client.RemoveObject(ctx, s.bucket, s.key(key), minio.RemoveObjectOptions{}); err != nil {
		return s.fail("removing", key, err)
	}
	return nil
}

// ErrNotFound is a key the store does not have.
var ErrNotFound = errors.New("no such object")

// fail says what failed where, in words that name the bucket and what to check.
func (s *Store) fail(what, key string, err error) error {
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case minio.NoSuchKey:
		return fmt.Errorf("%s %s in bucket %s: %w", what, s.key(key), s.bucket, ErrNotFound)
	case minio.NoSuchBucket:
		return fmt.Errorf("%s %s: bucket %s does not exist in the object store: create it", what, s.key(key), s.bucket)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch":
		return fmt.Errorf("%s %s in bucket %s: the store refused the credentials (%s): check accessKeyID and secretAccessKey of the credentials Secret and their rights on the bucket", what, s.key(key), s.bucket, resp.Code)
	}
	return fmt.Errorf("%s %s in bucket %s of the object store: %w", what, s.key(key), s.bucket, err)
}
