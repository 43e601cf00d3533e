package testenv

import (
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS3On starts a server of its own on a chosen address: its endpoint is there, it makes and
// writes a bucket, and it is stopped when the test that started it ends.
func TestS3On(t *testing.T) {
	s3Binary(t) // skipped here, not in the subtest, without the binary
	ip := "127.0.0.1"
	if runtime.GOOS == "linux" {
		ip = "127.0.0.2" // not the default: every 127/8 address is the loopback's on Linux
	}
	var endpoint string
	t.Run("serves", func(t *testing.T) {
		srv, bucket := S3On(t, ip)
		host, _, err := net.SplitHostPort(srv.Endpoint)
		require.NoError(t, err)
		assert.Equal(t, ip, host)
		_, err = srv.Client().PutObject(t.Context(), bucket, "k", strings.NewReader("v"), 1, minio.PutObjectOptions{})
		require.NoError(t, err)
		endpoint = srv.Endpoint
	})
	require.NotEmpty(t, endpoint)
	conn, err := net.DialTimeout("tcp", endpoint, time.Second)
	if err == nil {
		_ = conn.Close()
	}
	assert.Error(t, err, "the server of %s is stopped when its test ends", endpoint)
}
