package testenv

import (
	"errors"
	"fmt"
	"net"
	"os"
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
	log             string        // the member's output
	exited          chan struct{} // closed when the process has ended
}

// Stop kills the member (it stays down).
func (m *EtcdMember) Stop() {
	_ = m.cmd.Process.Kill()
	<-m.exited
}

// errPortTaken says a member could not listen on a port it was given: FreePort's port was
// taken by another process (another test package) between its choice and etcd's bind.
var errPortTaken = errors.New("a port was taken before etcd listened on it")

// Etcd starts an etcd cluster of n members (the envtest assets' binary, plain HTTP on loopback)
// with the extra flags args, in temporary folders, waits until each answers, and stops them
// with the test. A member that ends while it is awaited fails the test with its output; one that
// lost its port to another process starts the cluster again on other ports.
func Etcd(t testing.TB, assets string, n int, args ...string) []*EtcdMember {
	t.Helper()
	for attempt := 1; ; attempt++ {
		members, err := startEtcd(t, assets, n, args)
		if err == nil {
			return members
		}
		for _, m := range members {
			m.Stop()
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			require.NoError(t, err)
		}
		t.Logf("etcd: %v; starting it again on other ports", err)
	}
}

func startEtcd(t testing.TB, assets string, n int, args []string) ([]*EtcdMember, error) {
	port := func() int { return FreePort(t) }
	members := make([]*EtcdMember, n)
	peers := make([]string, n)
	initial := make([]string, n)
	dir := t.TempDir()
	for i := range members {
		members[i] = &EtcdMember{Name: fmt.Sprintf("m%d", i), ClientURL: fmt.Sprintf("http://127.0.0.1:%d", port()),
			log: filepath.Join(dir, fmt.Sprintf("m%d.log", i)), exited: make(chan struct{})}
		peers[i] = fmt.Sprintf("http://127.0.0.1:%d", port())
		initial[i] = members[i].Name + "=" + peers[i]
	}
	var started []*EtcdMember
	for i, m := range members {
		flags := append([]string{"--name=" + m.Name, "--data-dir=" + filepath.Join(dir, m.Name),
			"--listen-client-urls=" + m.ClientURL, "--advertise-client-urls=" + m.ClientURL,
			"--listen-peer-urls=" + peers[i], "--initial-advertise-peer-urls=" + peers[i],
			"--initial-cluster=" + strings.Join(initial, ","), "--initial-cluster-state=new", "--log-level=error"}, args...)
		out, err := os.Create(m.log)
		if err != nil {
			return started, err
		}
		m.cmd = exec.Command(filepath.Join(assets, "etcd"), flags...)
		m.cmd.Stdout, m.cmd.Stderr = out, out
		if err := m.cmd.Start(); err != nil {
			out.Close()
			return started, err
		}
		go func() { _ = m.cmd.Wait(); out.Close(); close(m.exited) }()
		started = append(started, m)
		t.Cleanup(m.Stop)
	}
	deadline := time.Now().Add(startTimeout)
	for _, m := range members {
		for exec.Command(filepath.Join(assets, "etcdctl"), "--endpoints="+m.ClientURL, "--command-timeout=5s",
			"endpoint", "health").Run() != nil {
			select {
			case <-m.exited:
				b, _ := os.ReadFile(m.log)
				if strings.Contains(string(b), "address already in use") {
					return started, fmt.Errorf("etcd member %s: %w", m.Name, errPortTaken)
				}
				return started, fmt.Errorf("etcd member %s ended before it answered (%s); its output:\n%s", m.Name, m.cmd.ProcessState, b)
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				b, _ := os.ReadFile(m.log)
				return started, fmt.Errorf("etcd member %s did not answer in %s; its output:\n%s", m.Name, startTimeout, b)
			}
		}
	}
	return members, nil
}

// FreePort is a TCP port of 127.0.0.1 that nothing listens on now.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
