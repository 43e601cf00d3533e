package local

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// upgrade is a cluster moving in place to another version.
type upgrade struct {
	change *backend.VersionChange
	// old is the instance of the version it moves from while it stops; nil once the new
	// version's processes were started.
	old *instance
}

// moveLocked starts the upgrade of the running cluster in that want allows (in the background:
// upgrade), and returns the version change, refused or allowed, or nil.
func (b *Backend) moveLocked(cl *clustersv1alpha1.Cluster, in *instance, want backend.Want) (*backend.VersionChange, error) {
	in.mu.Lock()
	running := in.meta.Version
	in.mu.Unlock()
	_, ch, err := backend.Resolve(running, want)
	if err != nil {
		return nil, err
	}
	change := b.checkChangeLocked(ch)
	if change != nil && !change.Refused {
		up := &upgrade{change: change, old: in}
		b.upgrades[cl.UID] = up
		go b.upgrade(in, up)
	}
	return change, nil
}

// checkChangeLocked adds the local backend's refusals to an allowed change: a version no
// --local-binaries folder serves, and an etcd that would skip or go back a release line.
func (b *Backend) checkChangeLocked(c *backend.VersionChange) *backend.VersionChange {
	if c == nil || c.Refused {
		return c
	}
	to, ok := b.binaries(c.To)
	if !ok {
		return backend.Refuse(c.From, c.To, fmt.Sprintf(
			"upgrade from %s to %s is refused: no --local-binaries folder serves Kubernetes %s (served: %s); add one, or set spec.kubernetes.version back to %s",
			c.From, c.To, c.To, strings.Join(b.Versions(), ", "), c.From))
	}
	fromLine, _ := backend.EtcdLine(c.From)
	if from, ok := b.binaries(c.From); ok {
		fromLine = from.EtcdLine()
	}
	switch toLine := to.EtcdLine(); {
	case toLine < fromLine:
		return backend.Refuse(c.From, c.To, fmt.Sprintf(
			"change from %s to %s is refused: it would move etcd back from 3.%d to 3.%d, which etcd cannot do with the cluster's data; set spec.kubernetes.version back to %s",
			c.From, c.To, fromLine, toLine, c.From))
	case toLine > fromLine+1:
		return backend.Refuse(c.From, c.To, fmt.Sprintf(
			"upgrade from %s to %s is refused: it would move etcd from 3.%d to 3.%d, and etcd moves one release line at a time; upgrade through a version whose etcd is 3.%d first",
			c.From, c.To, fromLine, toLine, fromLine+1))
	}
	return c
}

// upgrade stops the cluster of old gracefully (kube-apiserver and kube-controller-manager, then
// etcd), records the new version and starts the cluster again in the same folder on the same
// ports: etcd first, then kube-apiserver, then kube-controller-manager. Data, CA, certificates
// and every issued kubeconfig stay. A Delete or a stop of the backend meanwhile wins.
func (b *Backend) upgrade(old *instance, up *upgrade) {
	old.logger().Info("Upgrading a cluster in place", "from", up.change.From, "to", up.change.To)
	old.stop(false)
	old.mu.Lock()
	m := old.meta
	old.mu.Unlock()
	b.mu.Lock()
	if b.instances[m.UID] != old || !b.started {
		delete(b.upgrades, m.UID) // deleted, or the backend stopped: the record still names From
		b.mu.Unlock()
		return
	}
	delete(b.instances, m.UID)
	b.ports.release(m.Ports) // and kept again at once: the endpoint stays
	m.Version = up.change.To
	m.Hibernated = nil // an upgrade of a hibernated cluster wakes it
	_, err := b.runLocked(old.dir, m)
	up.old = nil
	if err != nil {
		delete(b.upgrades, m.UID) // the next Ensure starts the cluster from its record
		old.logger().Error(err, "Starting the upgraded cluster failed; the next reconcile tries again", "version", m.Version)
		b.freedLocked()
	}
	b.mu.Unlock()
	b.notify(old)
}

// upgradeStateLocked is the state of a cluster that moves to another version: not Ready while its
// old processes stop and its new ones start; done (and forgotten) once the new API server serves
// and reports the new version and the new controller manager runs.
func (b *Backend) upgradeStateLocked(uid types.UID, in *instance, up *upgrade) backend.State {
	c := *up.change
	if up.old != nil || in == nil {
		from := up.old
		if from == nil {
			from = in
		}
		var s backend.State
		if from != nil {
			s = from.state()
		}
		msg := fmt.Sprintf("Upgrading from Kubernetes %s to %s: the cluster's processes stop and start again with the new binaries.", c.From, c.To)
		s.Ready, s.Reason, s.Message, s.RetryAfter = false, backend.ReasonUpgrading, msg, time.Second
		s.SetPart(backend.Part{Type: backend.PartControllerManager, Reason: backend.ReasonUpgrading, Message: msg})
		s.Runs, s.Version, s.VersionChange = c.From, "", &c
		return s
	}
	s := in.state()
	// Done only when every process runs the new binaries, ready: etcd (the API server waited for
	// it), the API server answering the new version, and the controller manager (started after
	// the API server answers).
	if kcm := s.Part(backend.PartControllerManager); s.Ready && kcm != nil && kcm.Ready && backend.SameVersion(s.Version, c.To) {
		delete(b.upgrades, uid)
		b.log.Info("Upgraded a cluster", "cluster", s.Info, "from", c.From, "to", c.To)
		return s
	}
	c.Message = fmt.Sprintf("Upgrading from Kubernetes %s to %s: the new API server starts on the same data.", c.From, c.To)
	s.Runs, s.VersionChange = c.From, &c
	return s
}
