package local

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/openmcp-local/cluster-provider/backend"
)

// Hibernation (docs/hibernation.md): a hibernated cluster has no process; its folder (data,
// certificates, keys) stays, and its front door (frontdoor.go) keeps listening on its endpoint. The
// first connection wakes it: etcd starts on its data, then the API server (nothing of the
// bootstrap is done again; certificates that ended while it slept are issued anew first), and the
// connection is passed on once the API server serves. Its record says it is hibernated, so a
// restarted operator keeps it so.

// What woke a cluster (the trigger label of cluster_provider_wakes_total).
const (
	triggerRequest    = backend.TriggerRequest
	triggerOperator   = backend.TriggerOperator
	triggerAnnotation = backend.TriggerAnnotation
)

// idleTick is how often the idle clusters are looked for.
const idleTick = time.Second

// hibernated is the record of a hibernated cluster (meta.Hibernated).
type hibernated struct {
	// Since is when it was hibernated; Reason why (backend.ReasonIdle, backend.ReasonOnDemand).
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
}

// errPinned: the cluster is hibernated and pinned: nothing wakes it.
var errPinned = errors.New("the cluster is hibernated and pinned (annotation " + backend.AnnotationHibernate + ": pinned): remove the annotation or set it to \"true\" to let a request wake it")

// asleepLocked reports whether in is hibernated (in.mu held).
func (in *instance) asleepLocked() bool { return in.meta.Hibernated != nil }

// serving returns the instance of the cluster with uid once its API server serves, waking it if it
// is hibernated (trigger says why), or an error when ctx ends first or it is pinned.
func (b *Backend) serving(ctx context.Context, uid types.UID, trigger string) (*instance, error) {
	for {
		b.mu.Lock()
		in, door := b.instances[uid], b.doors[uid]
		b.mu.Unlock()
		if door == nil {
			return nil, errors.New("the cluster was deleted, or this operator stopped running clusters")
		}
		if in != nil {
			in.mu.Lock()
			ready, asleep, pinned := in.api.Ready, in.asleepLocked(), in.meta.Demanded == backend.HibernatePinned
			in.mu.Unlock()
			switch {
			case asleep && pinned:
				return nil, errPinned
			case asleep:
				b.wake(in, trigger)
			case ready:
				return in, nil
			}
		}
		// An instance being replaced (an upgrade, a restore) or starting: looked at again soon.
		if in == nil || !in.waitServing(ctx, 100*time.Millisecond) {
			if !sleep(ctx, 20*time.Millisecond) {
				return nil, fmt.Errorf("the cluster did not serve within %s: %w", wakeTimeout, ctx.Err())
			}
		}
	}
}

// waitServing waits up to d (or until ctx ends) for in's API server to be declared Ready, and
// reports whether it was.
func (in *instance) waitServing(ctx context.Context, d time.Duration) bool {
	in.mu.Lock()
	if in.api.Ready {
		in.mu.Unlock()
		return true
	}
	if in.readyCh == nil {
		in.readyCh = make(chan struct{})
	}
	ch := in.readyCh
	in.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// kcmHeldForWakes is how long a woken cluster's controller manager waits at most for the other
// wakes under way to be served (ten woken at once: each first request must be answered within the
// client's TLS handshake timeout, so the cores go to the API servers first).
const kcmHeldForWakes = 30 * time.Second

// wake starts waking the hibernated cluster of in, unless it is waking already; it returns at
// once. The wake waits for a place of --local-max-clusters, issues the certificates that are due,
// starts the processes and, once the API server serves, records the wake (metric, Notice).
func (b *Backend) wake(in *instance, trigger string) {
	in.mu.Lock()
	if !in.asleepLocked() || in.waking {
		in.mu.Unlock()
		return
	}
	in.waking = true
	in.mu.Unlock()
	b.waking.Add(1)
	go b.doWake(in, trigger, time.Now())
}

func (b *Backend) doWake(in *instance, trigger string, began time.Time) {
	defer func() {
		in.mu.Lock()
		in.waking = false
		in.mu.Unlock()
		b.waking.Add(-1)
	}()
	uid := in.meta.UID
	// A place first: a hibernated cluster holds none. Taking it marks the cluster awake, so that
	// the front door waits for its API server from then on.
	var h *hibernated
	for h == nil {
		b.mu.Lock()
		if !b.started || b.instances[uid] != in {
			b.mu.Unlock()
			return
		}
		if b.roomLocked() {
			in.mu.Lock()
			h, in.meta.Hibernated = in.meta.Hibernated, nil
			in.mu.Unlock()
			b.countHibernatedLocked()
			b.mu.Unlock()
			break
		}
		ch := b.placeFreedLocked()
		b.mu.Unlock()
		in.logger().Info("A wake waits for a place: --local-max-clusters clusters are awake; it wakes once one hibernates or is deleted", "max", b.opts.MaxClusters)
		select {
		case <-ch:
		case <-time.After(retryCapacity):
		}
	}
	// Wakes beyond the cores wait their turn: started together, every one of them would take as
	// long as all of them (two cores, ten API servers), past the clients' 10 s TLS handshake
	// timeout; in turn, the first are served in about two seconds each.
	b.wakeSlots <- struct{}{}
	defer func() { <-b.wakeSlots }()
	if !b.startWoken(in, h) {
		return
	}
	in.logger().Info("Waking the cluster", "trigger", trigger)
	b.notify(in)
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	for !in.waitServing(ctx, time.Second) {
		if ctx.Err() != nil {
			in.logger().Info("The woken cluster's API server does not serve yet; its condition says why", "after", time.Since(began).Round(time.Millisecond).String())
			return
		}
	}
	took := time.Since(began)
	backend.RecordWake(Name, trigger, took)
	in.logger().Info("Woke the cluster", "trigger", trigger, "took", took.Round(time.Millisecond).String())
	in.notice(backend.Warning{Reason: backend.ReasonWoken, Message: fmt.Sprintf(
		"Woke from hibernation (%s): the API server served %.2f s after it was asked for; data, endpoint, CA and kubeconfigs are those from before.", backend.WakeWhy(trigger), took.Seconds())})
	b.notify(in)
}

// startWoken issues the certificates of in's cluster that are due (they may have ended while it
// slept), records it awake and starts its processes, unless it was deleted or the backend stopped
// meanwhile. On failure the cluster is hibernated again as h says, and its place freed.
func (b *Backend) startWoken(in *instance, h *hibernated) bool {
	in.mu.Lock()
	m := in.meta
	in.mu.Unlock()
	p, err := b.loadPKI(in.dir, m)
	if err == nil {
		err = in.persist()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil || !b.started || b.instances[m.UID] != in {
		in.mu.Lock()
		in.meta.Hibernated = h
		in.mu.Unlock()
		b.countHibernatedLocked()
		b.freedLocked()
		if err != nil {
			in.logger().Error(err, "Waking the cluster failed; the next request tries again")
			in.setCAError(err)
		}
		return false
	}
	in.mu.Lock()
	in.pki, in.woken = p, true
	in.api.Part = backend.Part{Reason: backend.ReasonWaking, Message: "kube-apiserver " + in.bins.Version + " wakes: etcd, then the API server start on the cluster's data; requests wait for it."}
	in.kcm.Part = backend.Part{Reason: backend.ReasonWaking, Message: "kube-controller-manager " + in.bins.Version + " starts once the API server answers."}
	in.mu.Unlock()
	in.start()
	return true
}

// wakeFor wakes the hibernated cluster of in for the operator's own use and waits until it
// serves; at once for a cluster that is awake.
func (b *Backend) wakeFor(ctx context.Context, in *instance) error {
	in.mu.Lock()
	asleep, pinned := in.asleepLocked(), in.meta.Demanded == backend.HibernatePinned
	in.mu.Unlock()
	if !asleep {
		return nil
	}
	if pinned {
		return errPinned
	}
	ctx, cancel := context.WithTimeout(ctx, wakeTimeout)
	defer cancel()
	_, err := b.serving(ctx, in.meta.UID, triggerOperator)
	return err
}

// hibernate stops the processes of in's cluster and records it hibernated for reason, unless it is
// asleep already, waking, being upgraded, restored or deleted. OnDemand closes the connections
// through its front door first (a client that connects again wakes it, unless pinned).
func (b *Backend) hibernate(in *instance, reason string) {
	uid := in.meta.UID
	// A snapshot under way ends first (the idle loop does not come here meanwhile).
	for in.holds.Load() > 0 {
		time.Sleep(200 * time.Millisecond)
	}
	b.mu.Lock()
	if !b.started || b.instances[uid] != in || b.upgrades[uid] != nil || b.restores[uid] != nil || b.deleting[uid] {
		b.mu.Unlock()
		return
	}
	in.mu.Lock()
	if in.asleepLocked() || in.waking || in.sleeping {
		in.mu.Unlock()
		b.mu.Unlock()
		return
	}
	in.sleeping = true
	// From now on the front door holds new connections until the cluster is asleep, then wakes it.
	in.api.epoch++
	in.api.Part = backend.Part{Reason: backend.ReasonHibernated, Message: "The cluster is going into hibernation."}
	in.mu.Unlock()
	d := b.doors[uid]
	b.mu.Unlock()

	if reason == backend.ReasonOnDemand && d != nil {
		d.CloseAll()
	}
	in.stop(false)
	in.probe.CloseIdleConnections()
	now := time.Now().UTC().Truncate(time.Millisecond)
	in.mu.Lock()
	m := in.meta
	m.Hibernated = &hibernated{Since: now, Reason: reason}
	in.meta = m
	in.sleeping, in.woken = false, false
	in.api.epoch++
	in.kcm.epoch++
	in.api.Part = backend.Part{Reason: backend.ReasonHibernated}
	in.kcm.Part = backend.Part{Reason: backend.ReasonHibernated}
	in.etcdPart = nil
	in.mu.Unlock()
	if err := in.persist(); err != nil {
		// It sleeps all the same; a restarted operator starts it (awake) from the old record.
		in.logger().Error(err, "Recording the hibernation in the cluster's record failed; the cluster is hibernated until this operator restarts")
	}
	backend.RecordHibernation(Name, reason)
	idle := ""
	if reason == backend.ReasonIdle {
		idle = fmt.Sprintf(" after %s without a client", in.idleAfterNow())
	}
	in.logger().Info("Hibernated the cluster", "reason", reason)
	in.notice(backend.Warning{Reason: backend.ReasonHibernated, Message: fmt.Sprintf(
		"Hibernated (%s%s): etcd, kube-apiserver and kube-controller-manager stopped; data, certificates and keys kept; the first connection to %s wakes it.",
		reason, idle, endpoint(b.opts.AdvertiseHost, m.Ports.APIServer))})
	b.mu.Lock()
	b.countHibernatedLocked()
	b.freedLocked()
	b.mu.Unlock()
	b.notify(in)
}

func (in *instance) idleAfterNow() time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.idleAfter
}

// countHibernatedLocked sets the hibernated clusters gauge (spares are counted apart: pool.go).
func (b *Backend) countHibernatedLocked() {
	n := 0
	for _, in := range b.instances {
		in.mu.Lock()
		if in.asleepLocked() && in.meta.Spare == "" {
			n++
		}
		in.mu.Unlock()
	}
	backend.SetHibernated(Name, n)
}

// notice queues a Normal Event for the Cluster's next reconcile (takeNotices).
func (in *instance) notice(n backend.Warning) {
	in.mu.Lock()
	in.notices = append(in.notices, n)
	in.mu.Unlock()
}

func (in *instance) takeNotices() []backend.Warning {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := in.notices
	in.notices = nil
	return n
}

// hibernateIdle runs until ctx ends, hibernating every cluster that is complete (API server and
// controller manager Ready), has an idle time (its profile's spec.hibernation.idleAfter) and had
// no client through its front door for that long.
func (b *Backend) hibernateIdle(ctx context.Context) {
	t := time.NewTicker(idleTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var due []*instance
		b.mu.Lock()
		for uid, in := range b.instances {
			d := b.doors[uid]
			if d == nil || b.upgrades[uid] != nil || b.restores[uid] != nil {
				continue
			}
			last, idle := d.IdleSince()
			in.mu.Lock()
			// The idle clock starts when the run is first seen complete at the latest: a start
			// slower than idleAfter is not hibernated the moment it serves.
			if in.served.IsZero() && in.api.Ready && in.kcm.Ready {
				in.served = now
			}
			if in.served.After(last) {
				last = in.served
			}
			p := b.pools[in.meta.Spare]
			spare := p != nil && p.Hibernated // a spare kept hibernated once made (pool.go)
			if in.holds.Load() == 0 && !in.asleepLocked() && !in.waking && !in.sleeping && in.api.Ready && in.kcm.Ready &&
				(spare || (in.idleAfter > 0 && idle && now.Sub(last) >= in.idleAfter)) {
				due = append(due, in)
			}
			in.mu.Unlock()
		}
		b.countSparesLocked()
		b.mu.Unlock()
		for _, in := range due {
			in.mu.Lock()
			reason := backend.ReasonIdle
			if in.meta.Spare != "" {
				reason = reasonSpare
			}
			in.mu.Unlock()
			go b.hibernate(in, reason)
		}
	}
}

// setHibernation applies what cl asks of hibernation to its running cluster: idle, the profile's
// spec.hibernation.idleAfter (0: never); demand, the value of annotation
// backend.AnnotationHibernate. A new demand hibernates it now; a removed one wakes a cluster it
// hibernated.
func (b *Backend) setHibernation(in *instance, idle time.Duration, demand string) {
	if demand != "" && demand != backend.HibernatePinned {
		demand = backend.HibernateNow
	}
	in.mu.Lock()
	in.idleAfter = idle
	prev := in.meta.Demanded
	// A new demand waits until the cluster is complete (its bootstrap done): the Ensure that
	// follows its controller manager's readiness carries it out.
	if prev == demand || (demand != "" && !in.asleepLocked() && !(in.api.Ready && in.kcm.Ready)) {
		in.mu.Unlock()
		return
	}
	m := in.meta
	m.Demanded = demand
	asleep := in.asleepLocked()
	wakeIt := demand == "" && asleep && m.Hibernated.Reason == backend.ReasonOnDemand
	if demand != "" && asleep {
		h := *m.Hibernated
		h.Reason = backend.ReasonOnDemand // pinned, or asked for, from now on
		m.Hibernated = &h
	}
	in.meta = m
	in.mu.Unlock()
	if err := in.persist(); err != nil {
		in.logger().Error(err, "Recording the hibernate annotation in the cluster's record failed")
	}
	switch {
	case wakeIt:
		b.wake(in, triggerAnnotation)
	case demand != "" && !asleep:
		go b.hibernate(in, backend.ReasonOnDemand)
	}
}

// hibernationPartLocked is the Hibernated part of in's cluster, and whether it reports one
// (backend.HibernationPart).
func (in *instance) hibernationPartLocked() (backend.Part, bool) {
	var since *time.Time
	reason := ""
	if h := in.meta.Hibernated; h != nil {
		since, reason = &h.Since, h.Reason
	}
	return backend.HibernationPart(since, reason, in.idleAfter, in.meta.Demanded, "no process runs")
}

// persist writes in's record as it is now. Writes are serialized, each of the record of its
// moment, so the last one written is the newest.
func (in *instance) persist() error {
	in.metaMu.Lock()
	defer in.metaMu.Unlock()
	in.mu.Lock()
	m := in.meta
	in.mu.Unlock()
	return writeMeta(in.dir, m)
}
