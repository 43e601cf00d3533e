package testenv

import (
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// EtcdMember is one member of an etcd cluster a test started (Etcd).
type EtcdMember struct {
	Name, ClientURL string
	cmd             *exec.Cmd
}

// Stop kills the member (it stays down).
func (m *EtcdMember) Stop() {
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
}

// Etcd starts an etcd cluster of n members (the envtest assets' binary, plain HTTP on loopback)
// with the extra flags args, in temporary folders, waits until each answers, and stops them
// with the test.
func Etcd(t testing.TB, assets string, n int, args ...string) []*EtcdMember {
	t.Helper()
	port := func() int { return FreePort(t) }
	members := make([]*EtcdMember, n)
	peers := make([]string, n)
	initial := make([]string, n)
	for i := range members {
		members[i] = &EtcdMember{Name: fmt.Sprintf("m%d", i), ClientURL: fmt.Sprintf("http://127.0.0.1:%d", port())}
		peers[i] = fmt.Sprintf("http://127.0.0.1:%d", port())
		initial[i] = members[i].Name + "=" + peers[i]
	}
	for i, m := range members {
		flags := append([]string{"--name=" + m.Name, "--data-dir=" + t.TempDir(),
			"--listen-client-urls=" + m.ClientURL, "--advertise-client-urls=" + m.ClientURL,
			"--listen-peer-urls=" + peers[i], "--initial-advertise-peer-urls=" + peers[i],
			"--initial-cluster=" + strings.Join(initial, ","), "--initial-cluster-state=new", "--log-level=error"}, args...)
		m.cmd = exec.Command(filepath.Join(assets, "etcd"), flags...)
		require.NoError(t, m.cmd.Start())
		t.Cleanup(m.Stop)
	}
	for _, m := range members {
		require.Eventually(t, func() bool {
			return exec.Command(filepath.Join(assets, "etcdctl"), "--endpoints="+m.ClientURL, "endpoint", "health").Run() == nil
		}, 30*time.Second, 100*time.Millisecond, "etcd member %s answers", m.Name)
	}
	return members
}

// FreePort is a TCP port of 127.0.0.1 that nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
