package etcdmaint

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// peerNet puts an HTTP proxy before each member's peer port (plain HTTP), which every member
// reaches the others through; cut isolates one member: every peer request to it, and every one
// it makes (etcd names the sender in X-Server-From), is refused, and those under way are ended.
type peerNet struct {
	mu      sync.Mutex
	ids     []string // each member's ID, as etcd writes it in X-Server-From (hex)
	cut     int      // the member cut off, -1: none
	cancels map[*context.CancelFunc]struct{}
}

// proxy serves, on a port of its own, the peer port of member i at target, and returns its URL.
func (n *peerNet) proxy(t *testing.T, i int, target string) string {
	t.Helper()
	to, err := url.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(to)
	rp.FlushInterval = -1                    // raft's streams
	rp.ErrorLog = log.New(io.Discard, "", 0) // a cut ends requests: no noise
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		if !n.admit(i, r.Header.Get("X-Server-From"), &cancel) {
			http.Error(w, "cut off", http.StatusServiceUnavailable)
			return
		}
		defer n.leave(&cancel)
		rp.ServeHTTP(w, r.WithContext(ctx))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

// admit reports whether a request from member from to member i passes, and then keeps its cancel.
func (n *peerNet) admit(i int, from string, cancel *context.CancelFunc) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut >= 0 && (i == n.cut || from == n.ids[n.cut]) {
		return false
	}
	n.cancels[cancel] = struct{}{}
	return true
}

func (n *peerNet) leave(cancel *context.CancelFunc) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.cancels, cancel)
}

// isolate cuts member i off from its peers (-1: heals), ending every peer request under way.
func (n *peerNet) isolate(i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = i
	for c := range n.cancels {
		(*c)()
	}
}

// partitionable starts three real etcd members whose peer traffic goes through a peerNet.
func partitionable(t *testing.T) ([]Member, *peerNet) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		testenv.MissingTool(t, "the envtest assets (etcd: make envtest)", err)
	}
	n := &peerNet{cut: -1, cancels: map[*context.CancelFunc]struct{}{}, ids: make([]string, 3)}
	members := make([]Member, 3)
	listen, initial := make([]string, 3), make([]string, 3)
	for i := range members {
		members[i] = Member{Name: fmt.Sprintf("etcd-%d", i), URL: fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)), Client: &http.Client{}}
		listen[i] = fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t))
		initial[i] = members[i].Name + "=" + n.proxy(t, i, listen[i])
	}
	for i, m := range members {
		_, advertised, _ := strings.Cut(initial[i], "=")
		cmd := exec.Command(filepath.Join(assets, "etcd"), "--name="+m.Name, "--data-dir="+t.TempDir(),
			"--listen-client-urls="+m.URL, "--advertise-client-urls="+m.URL,
			"--listen-peer-urls="+listen[i], "--initial-advertise-peer-urls="+advertised,
			"--initial-cluster="+strings.Join(initial, ","), "--initial-cluster-state=new", "--log-level=error")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	for i, m := range members {
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			assert.NoError(c, m.Health(t.Context()))
			st, err := m.Status(t.Context())
			if assert.NoError(c, err) {
				n.mu.Lock()
				n.ids[i] = fmt.Sprintf("%x", st.Header.MemberID)
				n.mu.Unlock()
			}
		}, 60*time.Second, 200*time.Millisecond, "member %s is healthy", m.Name)
	}
	return members, n
}

// serializableHealth is what etcd's /health?serializable=true (the readiness check of before)
// says of m: whether it answers from its own state.
func serializableHealth(ctx context.Context, m Member) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL+"/health?serializable=true", nil)
	if err != nil {
		return "", err
	}
	resp, err := m.Client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// TestPickNotCutOff: three real members; Pick chooses the leader. Once the leader is cut off from
// its peers (it still answers serializable reads: the readiness check of before passed it), the
// other two elect another and take a write the cut-off member never sees: Pick chooses the new
// leader, never the member cut off, and says why that one is not healthy; healed, it is healthy
// again. (No member healthy, no choice: TestChoose.)
func TestPickNotCutOff(t *testing.T) {
	members, n := partitionable(t)
	ctx := t.Context()
	first, probes, err := Pick(ctx, members)
	require.NoError(t, err, "%+v", probes)
	cut := -1
	for i, p := range probes {
		if p.Name == first.Name {
			cut = i
			assert.True(t, p.IsLeader(), "the leader is chosen: %+v", probes)
		}
	}
	require.GreaterOrEqual(t, cut, 0)

	n.isolate(cut)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Error(c, members[cut].Health(ctx), "the member cut off is not healthy")
		for i, m := range members {
			if i != cut {
				assert.NoError(c, m.Health(ctx), "member %s, in the quorum", m.Name)
			}
		}
	}, 60*time.Second, 200*time.Millisecond, "the quorum leaves %s behind", members[cut].Name)
	body, err := serializableHealth(ctx, members[cut])
	require.NoError(t, err)
	assert.Contains(t, body, `"health":"true"`, "a serializable check still passes the member cut off")

	key := base64.StdEncoding.EncodeToString([]byte("/registry/after-the-cut"))
	quorum := members[(cut+1)%3]
	require.NoError(t, quorum.Post(ctx, "/v3/kv/put", map[string]string{"key": key, "value": key}, nil))

	for range 3 { // whichever answers first, never the member cut off
		chosen, probes, err := Pick(ctx, members)
		require.NoError(t, err, "%+v", probes)
		assert.NotEqual(t, members[cut].Name, chosen.Name, "%+v", probes)
		for _, p := range probes {
			if p.Name == members[cut].Name {
				assert.False(t, p.Healthy)
				assert.NotEmpty(t, p.Error)
			}
			if p.Name == chosen.Name {
				assert.True(t, p.IsLeader(), "the new leader: %+v", probes)
			}
		}
	}

	// Healed: the member catches up and is healthy again.
	n.isolate(-1)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, m := range members {
			assert.NoError(c, m.Health(ctx), "member %s healed", m.Name)
		}
	}, 60*time.Second, 200*time.Millisecond)
}
