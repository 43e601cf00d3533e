package objectstore

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopS3()
	os.Exit(code)
}

// newKey is a fresh encryption key, as `openssl rand -base64 32` makes one.
func newKey(t *testing.T) Key {
	t.Helper()
	raw := make([]byte, KeySize)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	k, err := ParseKey(base64.StdEncoding.EncodeToString(raw))
	require.NoError(t, err)
	return k
}

// newStore is a Store on a new bucket of the package's real S3 server (SeaweedFS).
func newStore(t *testing.T, prefix string) *Store {
	t.Helper()
	srv, bucket := testenv.S3(t)
	s, err := New(Config{Endpoint: srv.Endpoint, Bucket: bucket, Prefix: prefix, Insecure: true, PathStyle: true,
		AccessKeyID: srv.AccessKeyID, SecretAccessKey: srv.SecretAccessKey})
	require.NoError(t, err)
	return s
}

// TestStore writes, stats, lists, reads and removes objects in a real S3 server, one of them
// big enough for a multipart upload of a stream of unknown size, and checks that the prefix
// keeps two Stores apart in one bucket.
func TestStore(t *testing.T) {
	s := newStore(t, "team/prod")
	ctx := t.Context()
	big := make([]byte, partSize+partSize/2) // two parts
	_, err := rand.Read(big)
	require.NoError(t, err)
	require.NoError(t, s.Put(ctx, "ns/a/one", io.MultiReader(bytes.NewReader(big)), -1, ""))
	require.NoError(t, s.Put(ctx, "ns/a/two", strings.NewReader("two"), 3, "text/plain"))
	require.NoError(t, s.Put(ctx, "ns/b/three", strings.NewReader("three"), 5, ""))

	o, err := s.Stat(ctx, "ns/a/one")
	require.NoError(t, err)
	assert.Equal(t, int64(len(big)), o.Size)
	r, err := s.Get(ctx, "ns/a/one")
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	assert.True(t, bytes.Equal(big, got), "the multipart object reads back whole")

	listed, err := s.List(ctx, "ns/a/")
	require.NoError(t, err)
	var keys []string
	for _, o := range listed {
		keys = append(keys, o.Key)
	}
	assert.ElementsMatch(t, []string{"ns/a/one", "ns/a/two"}, keys, "keys below the prefix, without it")

	other := &Store{client: s.client, bucket: s.bucket, prefix: "team/dev"}
	none, err := other.List(ctx, "ns/")
	require.NoError(t, err)
	assert.Empty(t, none, "another prefix sees nothing")

	require.NoError(t, s.Delete(ctx, "ns/a/two"))
	require.NoError(t, s.Delete(ctx, "ns/a/two"), "a missing key is no error")
	_, err = s.Stat(ctx, "ns/a/two")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = s.Get(ctx, "ns/a/two")
	require.ErrorIs(t, err, ErrNotFound)

	bad, err := New(Config{Endpoint: s.client.EndpointURL().Host, Bucket: s.bucket, Insecure: true, PathStyle: true, AccessKeyID: "nobody", SecretAccessKey: "wrong"})
	require.NoError(t, err)
	_, err = bad.List(ctx, "ns/")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "refused the credentials")
}

// TestSealOpen seals and opens a stream; another key, a changed byte and a cut stream fail.
func TestSealOpen(t *testing.T) {
	k := newKey(t)
	plain := make([]byte, 200<<10) // several 64 KiB chunks
	_, err := rand.Read(plain)
	require.NoError(t, err)
	var sealed bytes.Buffer
	w, err := Seal(&sealed, k)
	require.NoError(t, err)
	_, err = w.Write(plain)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	assert.False(t, bytes.Contains(sealed.Bytes(), plain[:64]), "the plaintext does not show")

	open := func(data []byte, k Key) ([]byte, error) {
		r, err := Open(bytes.NewReader(data), k)
		if err != nil {
			return nil, err
		}
		return io.ReadAll(r)
	}
	got, err := open(sealed.Bytes(), k)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(plain, got))

	_, err = open(sealed.Bytes(), newKey(t))
	require.ErrorIs(t, err, ErrWrongKey)

	changed := bytes.Clone(sealed.Bytes())
	changed[len(changed)/2] ^= 1
	_, err = open(changed, k)
	require.Error(t, err, "a changed byte fails")

	_, err = open(sealed.Bytes()[:len(sealed.Bytes())-100], k)
	require.Error(t, err, "a cut stream fails")
}

func TestParseKey(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		ok        bool
	}{
		{"32 bytes", base64.StdEncoding.EncodeToString(make([]byte, 32)), true},
		{"16 bytes", base64.StdEncoding.EncodeToString(make([]byte, 16)), false},
		{"not base64", strings.Repeat("*", 44), false},
		{"empty", "", false},
	} {
		_, err := ParseKey(tc.key)
		assert.Equal(t, tc.ok, err == nil, "%s: %v", tc.name, err)
	}
}

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct {
		in       string
		insecure bool
		host     string
		secure   bool
		err      string
	}{
		{in: "s3.example.com", host: "s3.example.com", secure: true},
		{in: "s3.example.com:9000", insecure: true, host: "s3.example.com:9000"},
		{in: "https://s3.example.com:9000", host: "s3.example.com:9000", secure: true},
		{in: "https://s3.example.com/", host: "s3.example.com", secure: true},
		{in: "http://127.0.0.1:8333", insecure: true, host: "127.0.0.1:8333"},
		{in: "http://127.0.0.1:8333", err: "needs insecure"},
		{in: "https://s3.example.com/bucket", err: "without path"},
		{in: "ftp://s3.example.com", err: "scheme must be https"},
		{in: "", err: "no endpoint"},
	} {
		host, secure, err := endpoint(tc.in, tc.insecure)
		if tc.err != "" {
			require.Error(t, err, tc.in)
			assert.Contains(t, err.Error(), tc.err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.host, host, tc.in)
		assert.Equal(t, tc.secure, secure, tc.in)
	}
}

// FuzzEndpoint: whatever an endpoint is, it is refused or it names a host without a path.
func FuzzEndpoint(f *testing.F) {
	for _, s := range []string{"s3.example.com", "https://a:1/", "http://x", "https://a/b?c", "://", "https://u@h"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, in string, insecure bool) {
		host, secure, err := endpoint(in, insecure)
		if err != nil {
			return
		}
		if strings.Contains(in, "://") && strings.Contains(host, "/") {
			t.Fatalf("endpoint(%q) = host %q with a path", in, host)
		}
		if !insecure && !secure {
			t.Fatalf("endpoint(%q) speaks http without insecure", in)
		}
	})
}

// snapshotFile writes a file standing for a snapshot and returns its record.
func snapshotFile(t *testing.T, dir, namespace string, uid types.UID, name string, size int) (string, backend.Snapshot) {
	t.Helper()
	data := make([]byte, size)
	_, err := rand.Read(data)
	require.NoError(t, err)
	file := filepath.Join(dir, name+".db")
	require.NoError(t, os.WriteFile(file, data, 0o600))
	sum := sha256.Sum256(data)
	taken, err := time.Parse("20060102T150405Z", name)
	require.NoError(t, err)
	return file, backend.Snapshot{Name: name, Cluster: uid, Namespace: namespace, Taken: taken, Size: int64(size), Revision: 7, Keys: 3, Version: "1.37.1", SHA256: hex.EncodeToString(sum[:])}
}

// TestCatalog uploads snapshots and lists, downloads and removes them: the object is not the
// plaintext, the download is checked against the record, another namespace finds nothing, and a
// wrong key or a damaged object is refused and leaves no file.
func TestCatalog(t *testing.T) {
	s := newStore(t, "backups")
	c := Catalog{Store: s, Key: newKey(t), Records: &Records{}}
	ctx, dir, uid := t.Context(), t.TempDir(), types.UID(uuid.NewUUID())
	file1, s1 := snapshotFile(t, dir, "team-a", uid, "20261127T100000Z", 300<<10)
	file2, s2 := snapshotFile(t, dir, "team-a", uid, "20261127T110000Z", 1000)
	require.NoError(t, c.Upload(ctx, s1, file1, []byte(`{"keys":[]}`)))
	require.NoError(t, c.Upload(ctx, s2, file2, nil))

	listed, err := c.List(ctx, "team-a", uid)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{s2, s1}, listed, "newest first, the records as uploaded")
	other, err := c.List(ctx, "team-b", uid)
	require.NoError(t, err)
	assert.Empty(t, other, "another namespace lists nothing of it")

	r, err := s.Get(ctx, "team-a/"+string(uid)+"/"+s1.Name+SealedSuffix)
	require.NoError(t, err)
	sealed, err := io.ReadAll(r)
	require.NoError(t, err)
	plain, err := os.ReadFile(file1)
	require.NoError(t, err)
	assert.False(t, bytes.Contains(sealed, plain[:64]), "the object is not the plaintext")

	out := filepath.Join(t.TempDir(), "got.db")
	keys, err := c.Download(ctx, s1, out)
	require.NoError(t, err)
	assert.JSONEq(t, `{"keys":[]}`, string(keys))
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(plain, got))
	keys, err = c.Download(ctx, s2, out)
	require.NoError(t, err)
	assert.Nil(t, keys, "none uploaded")

	wrong := Catalog{Store: s, Key: newKey(t)}
	gone := filepath.Join(t.TempDir(), "wrong.db")
	_, err = wrong.Download(ctx, s2, gone)
	require.ErrorIs(t, err, ErrWrongKey)
	assert.NoFileExists(t, gone)
	assert.NoFileExists(t, gone+".part")

	lying := s2
	lying.SHA256 = strings.Repeat("0", 64)
	_, err = c.Download(ctx, lying, gone)
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	assert.Contains(t, err.Error(), "is damaged")
	assert.NoFileExists(t, gone)

	require.NoError(t, c.Remove(ctx, s1))
	listed, err = c.List(ctx, "team-a", uid)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{s2}, listed)
	objs, err := s.List(ctx, "team-a/")
	require.NoError(t, err)
	assert.Len(t, objs, 2, "s2's sealed snapshot and record are left: %v", objs)
}

// TestCatalogSync: Sync uploads the snapshots kept beside the cluster that the store lacks,
// newest first, and prunes the store with the retention over both; it never uploads one the
// retention would remove at once, leaves one of another namespace alone, and an upload that
// fails ends it with nothing removed.
func TestCatalogSync(t *testing.T) {
	s := newStore(t, "sync")
	c := Catalog{Store: s, Key: newKey(t), Records: &Records{}}
	ctx, dir, uid := t.Context(), t.TempDir(), types.UID(uuid.NewUUID())
	files := map[string]string{}
	snap := func(namespace, name string) backend.Snapshot {
		file, rec := snapshotFile(t, dir, namespace, uid, name, 1000)
		files[name] = file
		return rec
	}
	s0, s1, s2, s3 := snap("team-a", "20261127T090000Z"), snap("team-a", "20261127T100000Z"), snap("team-a", "20261127T110000Z"), snap("team-a", "20261127T120000Z")
	unrecorded := snap("", "20261127T130000Z")
	require.NoError(t, c.Upload(ctx, s0, files[s0.Name], nil), "in the store only: its claim lost")
	var asked []string
	source := func(x backend.Snapshot) (string, []byte, error) {
		asked = append(asked, x.Name)
		return files[x.Name], []byte(`{"keys":[]}`), nil
	}
	names := func() []string {
		listed, err := c.List(ctx, "team-a", uid)
		require.NoError(t, err)
		var out []string
		for _, x := range listed {
			out = append(out, x.Name)
		}
		return out
	}
	now := s3.Taken.Add(time.Hour)

	done, err := c.Sync(ctx, "team-a", uid, []backend.Snapshot{s1, s3, unrecorded, s2}, source, backend.KeepNewest(3), now)
	require.NoError(t, err)
	assert.Equal(t, Synced{Uploaded: []string{s3.Name, s2.Name, s1.Name}, Removed: []string{s0.Name}}, done)
	assert.Equal(t, []string{s3.Name, s2.Name, s1.Name}, names())
	keys, err := c.Keys(ctx, s1)
	require.NoError(t, err)
	assert.JSONEq(t, `{"keys":[]}`, string(keys), "the source's keys went with it")

	done, err = c.Sync(ctx, "team-a", uid, []backend.Snapshot{s1, s2, s3}, source, backend.KeepNewest(2), now)
	require.NoError(t, err)
	assert.Equal(t, Synced{Removed: []string{s1.Name}}, done, "nothing the store lacks; the oldest goes")
	asked = nil
	done, err = c.Sync(ctx, "team-a", uid, []backend.Snapshot{s1, s2, s3}, source, backend.KeepNewest(2), now)
	require.NoError(t, err)
	assert.Equal(t, Synced{}, done)
	assert.Empty(t, asked, "the retention removes s1 from the store: it is not uploaded again")

	s4 := snap("team-a", "20261127T140000Z")
	failing := func(x backend.Snapshot) (string, []byte, error) { return filepath.Join(dir, "missing.db"), nil, nil }
	done, err = c.Sync(ctx, "team-a", uid, []backend.Snapshot{s2, s3, s4}, failing, backend.KeepNewest(1), now)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "uploading snapshot "+s4.Name)
	assert.Equal(t, Synced{}, done)
	assert.Equal(t, []string{s3.Name, s2.Name}, names(), "nothing removed after a failed upload")
}
