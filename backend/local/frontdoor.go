package local

import (
	"context"
	"net"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend/frontdoor"
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
	*frontdoor.Door
	// uid is the cluster's (its key in Backend.doors); a claimed spare's door changes it.
	// Guarded by the Backend's mu.
	uid types.UID
}

// openDoor listens on host:port, or on a port the kernel picks when that one is taken (the
// endpoint then moves: the caller records the door's port).
func openDoor(host string, port int) (*frontDoor, error) {
	d, err := frontdoor.Listen(net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil && port != 0 {
		d, err = frontdoor.Listen(net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return nil, err
	}
	return &frontDoor{Door: d}, nil
}

// openDoorLocked opens the front door of cluster m on m.Ports.APIServer (another port if that one
// is taken: m's port is updated) and serves it. A door that exists is kept.
func (b *Backend) openDoorLocked(m *meta) (*frontDoor, error) {
	if d := b.doors[m.UID]; d != nil {
		m.Ports.APIServer = d.Port()
		return d, nil
	}
	d, err := openDoor(b.ports.host, m.Ports.APIServer)
	if err != nil {
		return nil, err
	}
	if m.Ports.APIServer != 0 && d.Port() != m.Ports.APIServer {
		b.log.Info("The cluster's endpoint port was taken by another process; its endpoint moves", "cluster", m.Namespace+"/"+m.Name, "oldPort", m.Ports.APIServer, "port", d.Port())
	}
	m.Ports.APIServer = d.Port()
	b.ports.taken[d.Port()] = true
	b.doors[m.UID] = d
	d.uid = m.UID
	go d.Serve(func(c net.Conn) { b.pass(d, c) })
	return d, nil
}

// closeDoorLocked closes the front door of the cluster with uid, if it has one, and returns it
// (the caller waits for it with close outside b.mu: its connections end).
func (b *Backend) takeDoorLocked(uid types.UID) *frontDoor {
	d := b.doors[uid]
	delete(b.doors, uid)
	if d != nil {
		delete(b.ports.taken, d.Port())
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
	d.Splice(c, up)
}
