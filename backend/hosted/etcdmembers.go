package hosted

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/etcdmaint"
)

// EtcdHealthy (backend.PartEtcd) follows the quorum at every Ensure: each member's state is read
// from its pod in the host's cache (no request; a pod's change notifies the Cluster, host.go), a
// member being ready when its readiness check, etcdQuorumHealth, passes: it has a leader and
// completes a linearizable read. The maintenance Jobs' last report (maintain.go) adds what pods
// cannot say: a full database (NOSPACE, which wins), its size.
//
//   - every member ready: True (Running);
//   - a member missing or not ready, a quorum of ready ones left: False, ReasonEtcdDegraded (etcd
//     takes writes; one more loss stops it). It does not keep the Cluster from Ready
//     (controllers/cluster: finish), as the API servers serve on;
//   - fewer ready members than a quorum: False, ReasonEtcdQuorumLost: the API servers can
//     neither write nor read linearizably.
//
// The message names every member that is not ready, and why, as its pod says.

// memberState is one etcd member as its pod shows it.
type memberState struct {
	// name is the member's (its pod's) name.
	name string
	// ready: its pod is ready (its readiness check, etcdQuorumHealth, passes).
	ready bool
	// why says, when it is not ready, what its pod shows.
	why string
}

// etcdMembers reads the state of every member of s's etcd from its pod, in the host's cache.
func etcdMembers(ctx context.Context, h *host, s *Spec) ([]memberState, error) {
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels(s.selector(ComponentEtcd))); err != nil {
		return nil, fmt.Errorf("listing the etcd pods of namespace %s: %w", s.Namespace, err)
	}
	byName := make(map[string]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		byName[pods.Items[i].Name] = &pods.Items[i]
	}
	members := make([]memberState, s.replicas(ComponentEtcd))
	for i := range members {
		name := fmt.Sprintf("%s-%d", NameEtcd, i)
		members[i] = memberOf(name, byName[name])
	}
	return members, nil
}

// memberOf is the state of member name from its pod p (nil: it has none).
func memberOf(name string, p *corev1.Pod) memberState {
	m := memberState{name: name}
	switch {
	case p == nil:
		m.why = "no pod"
	case p.DeletionTimestamp != nil:
		m.why = "pod terminating"
	case p.Status.Phase == corev1.PodPending:
		m.why = "pod Pending" + pendingWhy(p)
	case p.Status.Phase != corev1.PodRunning:
		m.why = "pod " + string(p.Status.Phase)
	case podReady(p):
		m.ready = true
	default:
		m.why = notReadyWhy(p)
	}
	return m
}

// podReady reports whether p's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pendingWhy says why a Pending pod does not run: the scheduler's message, or what a container
// waits for.
func pendingWhy(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return ": not scheduled: " + firstLine(c.Message)
		}
	}
	for _, c := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := c.State.Waiting; w != nil && w.Reason != "" {
			return fmt.Sprintf(": container %s waits: %s", c.Name, w.Reason)
		}
	}
	return ""
}

// notReadyWhy says why a running member's pod is not ready.
func notReadyWhy(p *corev1.Pod) string {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name != containerEtcd {
			continue
		}
		switch {
		case c.State.Waiting != nil && c.State.Waiting.Reason != "":
			return fmt.Sprintf("not ready: container %s waits: %s (%d restarts)", c.Name, c.State.Waiting.Reason, c.RestartCount)
		case c.State.Running == nil:
			return "not ready: container " + c.Name + " does not run"
		case c.Started != nil && !*c.Started:
			return "not ready: starting"
		}
	}
	return "not ready: no leader or no linearizable read (cut off from its peers, or the quorum is lost), or an alarm"
}

// firstLine is s up to its first line break, at most 200 bytes: a scheduler's message can be long.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// quorumPart is the EtcdHealthy part of members (none: nil).
func quorumPart(members []memberState) *backend.Part {
	if len(members) == 0 {
		return nil
	}
	var down []string
	for _, m := range members {
		if !m.ready {
			down = append(down, fmt.Sprintf("%s (%s)", m.name, m.why))
		}
	}
	n, ready := len(members), len(members)-len(down)
	if len(down) == 0 {
		return &backend.Part{Ready: true, Reason: backend.ReasonRunning,
			Message: fmt.Sprintf("all %d etcd members are ready (in the quorum: a leader, linearizable reads)", n)}
	}
	msg := fmt.Sprintf("%d of %d etcd members not ready: %s", len(down), n, strings.Join(down, ", "))
	if quorum := n/2 + 1; ready < quorum {
		return &backend.Part{Reason: backend.ReasonEtcdQuorumLost, Message: fmt.Sprintf(
			"%s; quorum lost (%d ready, %d needed): the API server can neither write nor read", msg, ready, quorum)}
	}
	return &backend.Part{Reason: backend.ReasonEtcdDegraded, Message: fmt.Sprintf(
		"%s; the quorum holds (%d of %d ready): etcd takes writes, one more member lost stops it", msg, ready, n)}
}

// etcdPart is the EtcdHealthy part from the members' states and the maintenance Jobs' last
// report e: nil before the control plane first served (e nil), e's alone while the members are
// not read (a restore under way); a full database (NOSPACE) first, then the quorum, and when every
// member is ready, the report's message beside.
func etcdPart(members []memberState, e *etcdHealth) *backend.Part {
	if e == nil {
		return nil
	}
	last := e.part()
	q := quorumPart(members)
	switch {
	case q == nil:
		return last
	case last != nil && last.Reason == backend.ReasonEtcdNoSpace:
		return last
	case !q.Ready || last == nil:
		return q
	}
	// Every member is ready now: what the report said of members that did not answer then is
	// past (they came back since), and would contradict the condition.
	q.Message += "; " + strings.Replace(last.Message, etcdmaint.DownClause(e.Down), "", 1)
	return q
}
