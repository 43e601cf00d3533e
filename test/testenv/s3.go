package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// EnvS3Server names the `weed` binary of SeaweedFS (make s3server builds it from the Go module
// proxy into ~/.cache/cluster-provider/s3/<version>/weed): the real S3-compatible server the
// object-store tests run.
const EnvS3Server = "S3_SERVER_BINARY"

// S3Server is a SeaweedFS server (master, volume, filer and S3 gateway in one process) on
// 127.0.0.1, with its data in a temporary folder; one per test package (S3).
type S3Server struct {
	// Endpoint is host:port of its S3 API, plain http.
	Endpoint string
	// AccessKeyID and SecretAccessKey may do anything.
	AccessKeyID, SecretAccessKey string
	cmd                          *exec.Cmd
	exited                       chan struct{} // closed once cmd ended
	dir                          string
	log                          *bytes.Buffer
	client                       *minio.Client
}

var (
	s3Mu     sync.Mutex
	s3Server *S3Server
)

// S3 returns the package's S3 server, started on the first call (StopS3 stops it: call it from
// TestMain after m.Run), with a new empty bucket for t. Without the binary (EnvS3Server) the test
// is skipped, or fails under CI (MissingTool).
func S3(t testing.TB) (*S3Server, string) {
	t.Helper()
	bin := s3Binary(t)
	s3Mu.Lock()
	defer s3Mu.Unlock()
	if s3Server == nil {
		s3Server = mustStartS3(t, bin, "127.0.0.1")
	}
	return s3Server, s3Server.newBucket(t)
}

// S3On starts an S3 server of t's own on ip, an address of this machine that others reach it at
// (the gateway of kind's Docker network: the pods of a kind cluster reach this machine there),
// stopped with its data when t ends, and makes a new empty bucket on it. Without the binary the
// test is skipped, or fails under CI, as with S3.
func S3On(t testing.TB, ip string) (*S3Server, string) {
	t.Helper()
	s := mustStartS3(t, s3Binary(t), ip)
	t.Cleanup(s.stop)
	return s, s.newBucket(t)
}

// s3Binary is the weed binary EnvS3Server names; without it t is skipped, or fails under CI.
func s3Binary(t testing.TB) string {
	t.Helper()
	bin := os.Getenv(EnvS3Server)
	if bin == "" {
		MissingTool(t, "SeaweedFS's weed (make s3server; "+EnvS3Server+" names it)", errors.New(EnvS3Server+" is not set"))
	}
	if _, err := os.Stat(bin); err != nil {
		MissingTool(t, "SeaweedFS's weed (make s3server)", err)
	}
	return bin
}

// mustStartS3 starts a server of bin on ip, trying again when a free port was taken meanwhile.
func mustStartS3(t testing.TB, bin, ip string) *S3Server {
	t.Helper()
	var err error
	for try := 0; try < 3; try++ {
		var s *S3Server
		if s, err = startS3(bin, ip); err == nil {
			return s
		}
	}
	t.Fatalf("starting the S3 server on %s: %v", ip, err)
	return nil
}

// newBucket makes a new empty bucket for t.
func (s *S3Server) newBucket(t testing.TB) string {
	t.Helper()
	bucket := "t-" + randomHex(8)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("making bucket %s: %v", bucket, err)
	}
	return bucket
}

// StopS3 stops the package's S3 server, if it was started, and removes its data.
func StopS3() {
	s3Mu.Lock()
	defer s3Mu.Unlock()
	if s3Server != nil {
		s3Server.stop()
		s3Server = nil
	}
}

func (s *S3Server) stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	_ = os.RemoveAll(s.dir)
}

// Client is a client of the server with its credentials.
func (s *S3Server) Client() *minio.Client { return s.client }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startS3 starts `weed server -s3` on free ports of ip and waits until its S3 API makes a
// bucket; it is stopped (and its folder removed) when it does not within two minutes.
func startS3(bin, ip string) (*S3Server, error) {
	dir, err := os.MkdirTemp("", "s3server-")
	if err != nil {
		return nil, err
	}
	s := &S3Server{dir: dir, AccessKeyID: "admin-" + randomHex(4), SecretAccessKey: randomHex(16), log: &bytes.Buffer{}}
	config, err := json.Marshal(map[string]any{"identities": []any{map[string]any{
		"name":        "admin",
		"credentials": []any{map[string]string{"accessKey": s.AccessKeyID, "secretKey": s.SecretAccessKey}},
		"actions":     []string{"Admin", "Read", "List", "Tagging", "Write"},
	}}})
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), config, 0o600); err != nil {
		return nil, err
	}
	ports, err := freePorts(ip, 8)
	if err != nil {
		return nil, err
	}
	s.Endpoint = net.JoinHostPort(ip, strconv.Itoa(ports[6]))
	// Each bucket is a collection, for which the master grows 7 volumes at its first write: 16
	// volume slots held "ready" and two buckets more (a third's writes failed with InternalError);
	// 64 hold eight. A volume not written to takes some 20 KB of disk.
	args := []string{"server", "-ip=" + ip, "-ip.bind=" + ip, "-dir=" + filepath.Join(dir, "data"),
		"-master.volumeSizeLimitMB=64", "-volume.max=64", "-filer", "-s3", "-s3.config=" + filepath.Join(dir, "s3.json"),
		"-master.port=" + strconv.Itoa(ports[0]), "-master.port.grpc=" + strconv.Itoa(ports[1]),
		"-volume.port=" + strconv.Itoa(ports[2]), "-volume.port.grpc=" + strconv.Itoa(ports[3]),
		"-filer.port=" + strconv.Itoa(ports[4]), "-filer.port.grpc=" + strconv.Itoa(ports[5]),
		"-s3.port=" + strconv.Itoa(ports[6]), "-s3.port.grpc=" + strconv.Itoa(ports[7])}
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o700); err != nil {
		return nil, err
	}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	s.exited = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	if err := s.awaitReady(); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// awaitReady waits until the server makes a bucket and writes an object into it: master, volume,
// filer and gateway all answer.
func (s *S3Server) awaitReady() error {
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKeyID, s.SecretAccessKey, ""), BucketLookup: minio.BucketLookupPath})
	if err != nil {
		return err
	}
	s.client = c
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = c.MakeBucket(ctx, "ready", minio.MakeBucketOptions{})
		if code := minio.ToErrorResponse(err).Code; err == nil || code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			_, err = c.PutObject(ctx, "ready", "ready", strings.NewReader("ready"), 5, minio.PutObjectOptions{})
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("weed server exited (%v): %s", s.cmd.ProcessState, lastLines(s.log.String(), 20))
		case <-time.After(250 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the S3 API of weed server did not answer within 2m: %v; it said: %s", err, lastLines(s.log.String(), 20))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// freePorts are n distinct TCP ports of ip that nothing listens on now.
func freePorts(ip string, n int) ([]int, error) {
	var out []int
	for len(out) < n {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}
