package hosted

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/frontdoor"
)

// hibernationComponent hibernates a control plane with a front door (Spec.FrontDoor) once no
// client used it for spec.hibernation.idleAfter, or on annotation backend.AnnotationHibernate:
// etcd and the API servers are scaled to zero, their claims, Secrets and record kept, and the
// rest of the pipeline does not run (nothing of the control plane is there to act on). The door
// keeps the endpoint; a connection that opens after the hibernation (its Lease says so) wakes it:
// the record loses its hibernation and the later components scale etcd and the API servers up,
// both at once (the API server retries etcd until it answers), while the door holds the
// connection until the API server takes it.
//
// The idle clock starts when the control plane last began to serve behind its door (the record's
// WokeAt: the first time, or after a wake) at the latest, so that one slow to start is not
// hibernated the moment it serves. Before an idle hibernation the door's Lease is read again from
// the host's API server, not the cache; a connection the door reports open while the control
// plane sleeps for idleness wakes it, even one opened just before the scale-down.
type hibernationComponent struct{}

func (hibernationComponent) name() string { return "hibernation" }

// hibernation is a control plane's hibernation in its record: since when and why (backend.ReasonIdle,
// backend.ReasonOnDemand).
type hibernation struct {
	Since  time.Time `json:"since"`
	Reason string    `json:"reason"`
}

// wakeTimeout is how long a wake may take before the Cluster is no longer Ready for it: the front
// door holds a connection this long (cmd/front-door --wake-timeout).
const wakeTimeout = 90 * time.Second

// waking is a wake under way in the record: what woke the control plane (backend.Trigger*) and
// when it was asked for (the client's connection).
type waking struct {
	Since   time.Time `json:"since"`
	Trigger string    `json:"trigger"`
}

func (hibernationComponent) step(ctx context.Context, sc *scope) (result, error) {
	s, ps := sc.s, &sc.ps
	idle := sc.pc.Spec.Hibernation.Idle()
	demand := sc.cl.Annotations[backend.AnnotationHibernate]
	if demand != "" && demand != backend.HibernatePinned {
		demand = backend.HibernateNow
	}
	if !s.FrontDoor {
		if ps.Hibernated != nil { // spec.hibernation removed while it slept
			sc.wake(backend.TriggerOperator, time.Now())
		}
		if demand != "" {
			sc.hibPart = &backend.Part{Type: backend.PartHibernated, Reason: backend.ReasonAwake, Message: fmt.Sprintf(
				"Annotation %s is ignored: a hosted control plane hibernates behind a front door, which only a ProviderConfig with spec.hibernation gives it (set spec.hibernation on ProviderConfig %s; idleAfter may stay unset).",
				backend.AnnotationHibernate, sc.pc.Name)}
		}
		return result{}, nil
	}
	if s.StorageClassName == "" {
		if demand != "" || idle > 0 {
			sc.hibPart = &backend.Part{Type: backend.PartHibernated, Reason: backend.ReasonAwake, Message: fmt.Sprintf(
				"This control plane does not hibernate: its etcd keeps its data on an emptyDir, which scaling it to zero would lose. "+
					"New Clusters of a ProviderConfig with spec.hosted.storageClassName keep it on a claim (ProviderConfig %s).", sc.pc.Name)}
		}
		return result{}, nil
	}
	use, err := sc.doorUse(ctx, sc.h.cache)
	if err != nil {
		return result{}, err
	}
	now := time.Now()
	if h := ps.Hibernated; h != nil {
		if demand != ps.Demanded {
			ps.Demanded = demand
			if demand != "" {
				h.Reason = backend.ReasonOnDemand // pinned, or asked for, from now on
			}
		}
		switch {
		case demand == "" && h.Reason == backend.ReasonOnDemand:
			sc.wake(backend.TriggerAnnotation, now)
		case demand != backend.HibernatePinned && use.lastOpened.After(h.Since):
			sc.wake(backend.TriggerRequest, use.lastOpened)
		case demand != backend.HibernatePinned && h.Reason == backend.ReasonIdle && use.open > 0:
			// A connection the door reported after the last read before the scale-down.
			sc.wake(backend.TriggerRequest, now)
		case demand != backend.HibernatePinned && (sc.b.wantedAwake(sc.cl.UID) || sc.ps.Restore != nil || sc.change != nil && !sc.change.Refused):
			sc.wake(backend.TriggerOperator, now) // an OIDC configuration, a snapshot, a restore, an upgrade
		default:
			return sc.sleep(ctx, idle)
		}
		return result{}, nil
	}
	sc.b.wantedAwake(sc.cl.UID) // awake: nothing to wake
	serving := sc.apiServing(ctx)
	if w := ps.Waking; w != nil {
		if !serving {
			return result{}, nil // the later components bring it up; its status notifies
		}
		took := now.Sub(w.Since)
		backend.RecordWake(Name, w.Trigger, took)
		sc.notices = append(sc.notices, backend.Warning{Reason: backend.ReasonWoken, Message: fmt.Sprintf(
			"Woke from hibernation (%s): the API server served %.1f s after it was asked for; data, endpoint, CA and kubeconfigs are those from before.",
			backend.WakeWhy(w.Trigger), took.Seconds())})
		ps.Waking, ps.WokeAt = nil, &now
	} else if serving && s.DoorServes && ps.WokeAt == nil {
		ps.WokeAt = &now // first served behind its door: the idle clock starts here at the latest
	}
	// Idle: no connection open, and none opened or closed for idleAfter since it began to serve.
	idleNow := func(u doorUse) bool { return idle > 0 && u.open == 0 && now.Sub(u.since(ps.WokeAt)) >= idle }
	reason := ""
	switch {
	case demand == "":
		ps.Demanded = ""
	case demand != ps.Demanded:
		reason = backend.ReasonOnDemand // a new demand, carried out once the control plane serves
	}
	if reason == "" && idleNow(use) {
		reason = backend.ReasonIdle
	}
	// Only behind a door that serves: the endpoint must answer while the control plane sleeps.
	canSleep := serving && s.DoorServes && ps.UpgradeFrom == "" && ps.Restore == nil
	if reason == backend.ReasonIdle && canSleep {
		// The cache may lag behind the door's last report: idle only if the host says so too.
		if use, err = sc.doorUse(ctx, sc.h.client); err != nil {
			return result{}, err
		}
		if !idleNow(use) {
			reason = ""
		}
	}
	if reason != "" && canSleep {
		ps.Demanded = demand
		ps.Hibernated = &hibernation{Since: now, Reason: reason}
		s.Hibernated = true
		backend.RecordHibernation(Name, reason)
		why := "on demand (annotation " + backend.AnnotationHibernate + ")"
		if reason == backend.ReasonIdle {
			why = fmt.Sprintf("after %s without a client connection", idle)
		}
		sc.notices = append(sc.notices, backend.Warning{Reason: backend.ReasonHibernated, Message: "Hibernated " + why +
			": etcd and the API servers are scaled to zero, their data, certificates and keys kept; the first connection to the endpoint wakes them."})
		sc.b.opts.Logger.Info("Hibernating a hosted control plane", "cluster", backend.RefOf(sc.cl).String(), "reason", reason)
		return sc.sleep(ctx, idle)
	}
	if p, ok := backend.HibernationPart(nil, "", idle, demand, ""); ok {
		sc.hibPart = &p
	}
	if idle > 0 && use.open == 0 {
		sc.retryWithin(time.Until(use.since(ps.WokeAt).Add(idle)) + time.Second)
	}
	return result{}, nil
}

// sleep keeps the control plane hibernated: etcd and the API servers at zero replicas (applied
// when they are not), the state of a hibernated cluster (Ready: its endpoint answers), and the
// pipeline stopped.
func (sc *scope) sleep(ctx context.Context, idle time.Duration) (result, error) {
	sc.b.setHibernated(sc.cl.UID, true)
	for _, w := range sc.s.Workloads() {
		if _, err := sc.h.applyPlanned(ctx, w, nil); err != nil {
			return result{}, err
		}
	}
	h := sc.ps.Hibernated
	since := h.Since
	sc.st = sc.baseState() // the State the serving component would start: it does not run
	st := &sc.st
	st.HibernatedSince = &since
	st.RetryAfter = 0
	p, _ := backend.HibernationPart(&since, h.Reason, idle, sc.ps.Demanded, "etcd and the API servers are scaled to zero")
	sc.hibPart = &p
	st.Ready, st.Reason = true, backend.ReasonHibernated
	st.Message = fmt.Sprintf("The control plane is hibernated: its endpoint %s answers, and the first request wakes it (condition Hibernated).", sc.external)
	st.SetPart(backend.Part{Type: backend.PartControllerManager, Ready: true, Reason: backend.ReasonHibernated,
		Message: "kube-controller-manager is hibernated with the control plane; it starts when the control plane wakes."})
	st.SetPart(backend.Part{Type: backend.PartEtcd, Ready: true, Reason: backend.ReasonHibernated,
		Message: "etcd is scaled to zero with its data kept on its claim; it starts when the control plane wakes."})
	return result{stop: true}, nil
}

// wake records the control plane awake, woken by trigger asked for at since: the later components
// scale etcd and the API servers up.
func (sc *scope) wake(trigger string, since time.Time) {
	sc.ps.Hibernated, sc.s.Hibernated = nil, false
	sc.ps.Waking = &waking{Since: since, Trigger: trigger}
	sc.b.setHibernated(sc.cl.UID, false)
	sc.b.opts.Logger.Info("Waking a hosted control plane", "cluster", backend.RefOf(sc.cl).String(), "trigger", trigger)
}

// apiServing reports whether the API server's Deployment has an available pod.
func (sc *scope) apiServing(ctx context.Context) bool {
	dep := &appsv1.Deployment{}
	return sc.h.cache.Get(ctx, client.ObjectKey{Namespace: sc.s.Namespace, Name: NameAPIServer}, dep) == nil && serves(dep)
}

// doorUse is what the front door pods report (their Lease): the open client connections of the
// pods that exist, and when a client connection last opened and last opened or closed on any
// (the Lease's creation before the first report).
type doorUse struct {
	open                 int64
	lastOpened, lastUsed time.Time
}

// since is when the idle clock started: the door's last use, or wokeAt (when the control plane
// last began to serve) if later.
func (u doorUse) since(wokeAt *time.Time) time.Time {
	if wokeAt != nil && wokeAt.After(u.lastUsed) {
		return *wokeAt
	}
	return u.lastUsed
}

// doorUse reads the Lease from r (the cache, or the host's API server); the pods from the cache.
func (sc *scope) doorUse(ctx context.Context, r client.Reader) (doorUse, error) {
	lease := &coordinationv1.Lease{}
	key := client.ObjectKey{Namespace: sc.s.Namespace, Name: NameFrontDoor}
	if err := r.Get(ctx, key, lease); err != nil {
		if apierrors.IsNotFound(err) {
			return doorUse{lastUsed: time.Now()}, nil // just made: not in the cache yet
		}
		return doorUse{}, fmt.Errorf("reading the front door's Lease %s: %w", key, err)
	}
	pods := &corev1.PodList{}
	if err := sc.h.cache.List(ctx, pods, client.InNamespace(sc.s.Namespace), client.MatchingLabels(sc.s.selector(ComponentFrontDoor))); err != nil {
		return doorUse{}, err
	}
	live := map[string]bool{}
	for _, p := range pods.Items {
		live[p.Name] = p.DeletionTimestamp == nil
	}
	u := doorUse{lastUsed: lease.CreationTimestamp.Time}
	for pod, r := range frontdoor.Usages(lease.Annotations) {
		if live[pod] {
			u.open += r.Open
		}
		if r.LastOpened.After(u.lastOpened) {
			u.lastOpened = r.LastOpened
		}
		if r.LastUsed.After(u.lastUsed) {
			u.lastUsed = r.LastUsed
		}
	}
	return u, nil
}

// setHibernated records whether the control plane of uid is hibernated, for the gauge.
func (b *Backend) setHibernated(uid types.UID, asleep bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if asleep {
		b.asleep[uid] = true
	} else {
		delete(b.asleep, uid)
	}
	backend.SetHibernated(Name, len(b.asleep))
}

// wakeForSnapshot wakes the control plane of s, hibernated (its record says so), for a snapshot,
// without an Ensure (a snapshot before deletion comes when none runs any more): the record says it
// wakes, and etcd's StatefulSet and the API servers' Deployment are scaled to their replicas (the
// next Ensure applies them whole, as after any wake). woke is false for a control plane awake.
func (b *Backend) wakeForSnapshot(ctx context.Context, h *host, s *Spec, cl *clustersv1alpha1.Cluster) (woke bool, err error) {
	ps, found, err := readRecord(ctx, h, s.Namespace)
	if err != nil || !found || ps.Hibernated == nil {
		return false, err
	}
	ps.Hibernated, ps.Waking = nil, &waking{Since: time.Now(), Trigger: backend.TriggerOperator}
	if err := writeRecord(ctx, h, s, ps); err != nil {
		return false, err
	}
	b.setHibernated(cl.UID, false)
	b.opts.Logger.Info("Waking a hosted control plane for a snapshot", "cluster", backend.RefOf(cl).String())
	for _, w := range []struct {
		obj      client.Object
		replicas int32
	}{
		{&appsv1.StatefulSet{}, s.replicas(ComponentEtcd)},
		{&appsv1.Deployment{}, s.replicas(ComponentAPIServer)},
	} {
		w.obj.SetNamespace(s.Namespace)
		w.obj.SetName(NameEtcd)
		if _, ok := w.obj.(*appsv1.Deployment); ok {
			w.obj.SetName(NameAPIServer)
		}
		patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, w.replicas)))
		if err := h.client.Patch(ctx, w.obj, patch); err != nil {
			return false, fmt.Errorf("scaling %s/%s up for a snapshot: %w", s.Namespace, w.obj.GetName(), err)
		}
	}
	return true, nil
}
