package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// wakeTimeout is how long the front door holds a connection for a cluster to serve (waking it,
// or while its API server restarts or is upgraded) before it gives up and closes it.
const wakeTimeout = 90 * time.Second

// frontDoor is a cluster's endpoint: the operator listens on the port of status.apiServer and
// passes every connection, TLS untouched, to the cluster's kube-apiserver on its own port
// (ports.Internal). It lives as long as the cluster runs here, across hibernation, upgrades and
// restores, so the endpoint never changes and never refuses a connection because the API server
// is down: a connection that comes while the cluster is hibernated wakes it and is passed on once
// the API server serves; one that comes while it restarts waits for it. The operator's own
// clients (probes, the controller manager) reach the API server directly and do not count as use.
type frontDoor struct {
	ln   net.Listener
	port int
	// uid is the cluster's (its key in Backend.doors); a claimed spare's door changes it.
	// Guarded by the Backend's mu.
	uid  types.UID
	done chan struct{} // closed when the accept loop has ended

	// open counts the client connections passed on now; last is when one was last opened or
	// closed (Unix nanoseconds): the cluster is idle while open is 0 and last is old enough.
	open atomic.Int64
	last atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // client and upstream connections, closed by closeAll
	closed bool
}

// openDoor listens on host:port, or on a port the kernel picks when that one is taken (the
// endpoint then moves: the caller records the door's port).
func openDoor(host string, port int) (*frontDoor, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil && port != 0 {
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return nil, fmt.Errorf("listening for the cluster's endpoint on %s: %w", host, err)
	}
	d := &frontDoor{ln: ln, port: ln.Addr().(*net.TCPAddr).Port, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	d.last.Store(time.Now().UnixNano())
	return d, nil
}

// idleSince is when the door last had a client, and whether it has one now.
func (d *frontDoor) idleSince() (time.Time, bool) {
	return time.Unix(0, d.last.Load()), d.open.Load() == 0
}

// serve accepts connections until close, each passed on by pass.
func (d *frontDoor) serve(pass func(net.Conn)) {
	defer close(d.done)
	for {
		c, err := d.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // a transient error (no file descriptor left)
			continue
		}
		if !d.track(c) {
			c.Close()
			return
		}
		d.open.Add(1)
		d.last.Store(time.Now().UnixNano())
		go func() {
			defer func() {
				d.untrack(c)
				d.open.Add(-1)
				d.last.Store(time.Now().UnixNano())
			}()
			pass(c)
		}()
	}
}

// track remembers c for closeAll; false once the door is closed.
func (d *frontDoor) track(c net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.conns[c] = struct{}{}
	return true
}

func (d *frontDoor) untrack(c net.Conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
	c.Close()
}

// closeAll closes every connection passed on now (the door stays open).
func (d *frontDoor) closeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.conns {
		c.Close()
	}
}

// close stops accepting, closes every connection and waits for the accept loop.
func (d *frontDoor) close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.ln.Close()
	d.closeAll()
	<-d.done
}

// splice copies between the client c and the API server up in both directions until both are
// done (io.Copy between TCP connections splices in the kernel), half-closing each side when the
// other has finished sending.
func splice(d *frontDoor, c, up net.Conn) {
	if !d.track(up) {
		up.Close()
		return
	}
	defer d.untrack(up)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, c)
		closeWrite(up)
	}()
	_, _ = io.Copy(c, up)
	closeWrite(c)
	<-done
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	_ = c.Close()
}

// openDoorLocked opens the front door of cluster m on m.Ports.APIServer (another port if that one
// is taken: m's port is updated) and serves it. A door that exists is kept.
func (b *Backend) openDoorLocked(m *meta) (*frontDoor, error) {
	if d := b.doors[m.UID]; d != nil {
		m.Ports.APIServer = d.port
		return d, nil
	}
	d, err := openDoor(b.ports.host, m.Ports.APIServer)
	if err != nil {
		return nil, err
	}
	if m.Ports.APIServer != 0 && d.port != m.Ports.APIServer {
		b.log.Info("The cluster's endpoint port was taken by another process; its endpoint moves", "cluster", m.Namespace+"/"+m.Name, "oldPort", m.Ports.APIServer, "port", d.port)
	}
	m.Ports.APIServer = d.port
	b.ports.taken[d.port] = true
	b.doors[m.UID] = d
	d.uid = m.UID
	go d.serve(func(c net.Conn) { b.pass(d, c) })
	return d, nil
}

// closeDoorLocked closes the front door of the cluster with uid, if it has one, and returns it
// (the caller waits for it with close outside b.mu: its connections end).
func (b *Backend) takeDoorLocked(uid types.UID) *frontDoor {
	d := b.doors[uid]
	delete(b.doors, uid)
	if d != nil {
		delete(b.ports.taken, d.port)
	}
	return d
}

// pass hands the client connection c to the API server of d's cluster once it serves:
// at once when it does, after waking it when it is hibernated, after its restart when it
// restarts. A connection to a cluster pinned in hibernation, or one whose API server does not
// serve within wakeTimeout, is closed.
func (b *Backend) pass(d *frontDoor, c net.Conn) {
	b.mu.Lock()
	uid := d.uid
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	in, err := b.serving(ctx, uid, triggerRequest)
	if err != nil {
		b.log.V(1).Info("Closed a connection to a cluster's endpoint", "uid", uid, "remote", c.RemoteAddr().String(), "why", err.Error())
		return
	}
	var dialer net.Dialer
	up, err := dialer.DialContext(ctx, "tcp", in.upstream())
	if err != nil {
		in.logger().V(1).Info("The API server did not take a connection of the front door", "err", err.Error())
		return
	}
	splice(d, c, up)
}
