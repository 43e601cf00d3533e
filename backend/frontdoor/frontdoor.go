// Package frontdoor is a cluster's endpoint that is not its API server: it accepts TCP
// connections and passes each, TLS untouched, to the API server, and it keeps the clock of its
// use (open client connections, and when one last came or went). A cluster whose clients all go
// through its door can hibernate while nobody uses it: the door keeps the endpoint answering, and
// its first connection is the request that wakes the cluster.
//
// The local backend runs one Door per cluster in the operator (backend/local); the hosted backend
// runs cmd/front-door, a Door in a pod of the control plane's namespace, in front of the API
// server's Service.
package frontdoor

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Door accepts connections on its listener and hands each to the pass function of Serve.
type Door struct {
	ln   net.Listener
	port int
	done chan struct{} // closed when the accept loop has ended

	// open counts the client connections passed on now; last is when one was last opened or
	// closed (Unix nanoseconds): the cluster is idle while open is 0 and last is old enough.
	open atomic.Int64
	last atomic.Int64

	// changed, when set, is called (in the connection's goroutine) after every change of open.
	changed func(open int64)

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // client and upstream connections, closed by CloseAll
	closed bool
}

// Listen opens a door on addr (host:port; port 0: one the kernel picks).
func Listen(addr string) (*Door, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for the cluster's endpoint on %s: %w", addr, err)
	}
	d := &Door{ln: ln, port: ln.Addr().(*net.TCPAddr).Port, done: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	d.last.Store(time.Now().UnixNano())
	return d, nil
}

// Port is the port the door listens on.
func (d *Door) Port() int { return d.port }

// OnChange makes f be called with the number of open client connections after each one opens or
// closes. Call it before Serve.
func (d *Door) OnChange(f func(open int64)) { d.changed = f }

// IdleSince is when the door last had a client, and whether it has none now.
func (d *Door) IdleSince() (time.Time, bool) {
	return time.Unix(0, d.last.Load()), d.open.Load() == 0
}

// Open is the number of client connections passed on now.
func (d *Door) Open() int64 { return d.open.Load() }

// Serve accepts connections until Close, each handed to pass in a goroutine of its own; pass
// owns the connection (Splice closes it).
func (d *Door) Serve(pass func(net.Conn)) {
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
		d.last.Store(time.Now().UnixNano())
		n := d.open.Add(1)
		if d.changed != nil {
			d.changed(n)
		}
		go func() {
			defer func() {
				d.untrack(c)
				d.last.Store(time.Now().UnixNano())
				n := d.open.Add(-1)
				if d.changed != nil {
					d.changed(n)
				}
			}()
			pass(c)
		}()
	}
}

// track remembers c for CloseAll; false once the door is closed.
func (d *Door) track(c net.Conn) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return false
	}
	d.conns[c] = struct{}{}
	return true
}

func (d *Door) untrack(c net.Conn) {
	d.mu.Lock()
	delete(d.conns, c)
	d.mu.Unlock()
	c.Close()
}

// CloseAll closes every connection passed on now (the door stays open).
func (d *Door) CloseAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c := range d.conns {
		c.Close()
	}
}

// Close stops accepting, closes every connection and waits for the accept loop.
func (d *Door) Close() {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.ln.Close()
	d.CloseAll()
	<-d.done
}

// Splice copies between the client c and the API server up in both directions until both are
// done (io.Copy between TCP connections splices in the kernel), half-closing each side when the
// other has finished sending. CloseAll closes up too.
func (d *Door) Splice(c, up net.Conn) {
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
