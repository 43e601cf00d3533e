package etcdmaint

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// A snapshot is taken from a member that is in the quorum (Pick): one cut off from its peers
// still answers reads from its own, stale, state, and a snapshot of it would lack what the
// quorum wrote since; pruning would then drop good snapshots for it. Each member is asked, at
// once, for its health as etcd's /health checks it without serializable (it knows a leader and
// completes a linearizable read; NOSPACE excluded: a full etcd is snapshotted all the more) and
// for its status (its member ID, the leader it follows, its raft term and index). Choose picks:
//
//   - the leader, when it is healthy (as etcd-backup-restore and etcdctl's own advice do);
//   - else the healthy member with the highest raft term, then index (it has applied the most);
//   - none healthy: no snapshot, and an error that names each member's state.

// Probe is what one member answered to Pick.
type Probe struct {
	// Name is the member's name.
	Name string `json:"name"`
	// Healthy: its /health (linearizable, NOSPACE excluded) said true.
	Healthy bool `json:"healthy"`
	// MemberID, Leader, RaftTerm and RaftIndex are from its status (zero when it did not answer).
	MemberID  uint64 `json:"memberID,omitempty"`
	Leader    uint64 `json:"leader,omitempty"`
	RaftTerm  uint64 `json:"raftTerm,omitempty"`
	RaftIndex uint64 `json:"raftIndex,omitempty"`
	// Error says why it is not healthy.
	Error string `json:"error,omitempty"`
}

// IsLeader reports whether the member said it leads.
func (p Probe) IsLeader() bool { return p.MemberID != 0 && p.MemberID == p.Leader }

// raftStatus is what /v3/maintenance/status answers about raft (the fields used).
type raftStatus struct {
	Header struct {
		MemberID uint64 `json:"member_id,string"`
	} `json:"header"`
	Leader    uint64 `json:"leader,string"`
	RaftTerm  uint64 `json:"raftTerm,string"`
	RaftIndex uint64 `json:"raftIndex,string"`
}

// Pick asks every member at once and returns the one to take a snapshot from (Choose), and what
// each answered.
func Pick(ctx context.Context, members []Member) (Member, []Probe, error) {
	probes := make([]Probe, len(members))
	var wg sync.WaitGroup
	for i, m := range members {
		wg.Go(func() { probes[i] = m.probe(ctx) })
	}
	wg.Wait()
	i, err := Choose(probes)
	if err != nil {
		return Member{}, probes, err
	}
	return members[i], probes, nil
}

// probe asks m for its health and its status.
func (m Member) probe(ctx context.Context) Probe {
	p := Probe{Name: m.Name}
	var st raftStatus
	if err := m.post(ctx, m.timeout(), "/v3/maintenance/status", struct{}{}, &st); err == nil {
		p.MemberID, p.Leader, p.RaftTerm, p.RaftIndex = st.Header.MemberID, st.Leader, st.RaftTerm, st.RaftIndex
	}
	if err := m.Health(ctx); err != nil {
		p.Error = err.Error()
		return p
	}
	p.Healthy = true
	return p
}

// Health asks m's /health, linearizable (a leader, a read through the quorum), a NOSPACE alarm
// excluded; nil when it is healthy.
func (m Member) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(m.URL, "/")+"/health?exclude="+AlarmNoSpace, nil)
	if err != nil {
		return err
	}
	resp, err := m.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(data, &h); err != nil {
		return fmt.Errorf("/health: %s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	if h.Health != "true" {
		reason := h.Reason
		if reason == "" {
			reason = resp.Status
		}
		return fmt.Errorf("not healthy: %s", reason)
	}
	return nil
}

// Choose is the index in probes of the member to take a snapshot from: the healthy leader, else
// the healthy member with the highest raft term, then index (the first of equals); an error that
// names every member's state when none is healthy.
func Choose(probes []Probe) (int, error) {
	best := -1
	for i, p := range probes {
		switch {
		case !p.Healthy:
			continue
		case p.IsLeader():
			return i, nil
		case best < 0 || p.RaftTerm > probes[best].RaftTerm ||
			(p.RaftTerm == probes[best].RaftTerm && p.RaftIndex > probes[best].RaftIndex):
			best = i
		}
	}
	if best >= 0 {
		return best, nil
	}
	if len(probes) == 0 {
		return -1, fmt.Errorf("no etcd member to take a snapshot from")
	}
	states := make([]string, len(probes))
	for i, p := range probes {
		states[i] = fmt.Sprintf("%s (%s)", p.Name, p.Error)
	}
	return -1, fmt.Errorf("no etcd member is in the quorum (a leader and a linearizable read), so no snapshot is taken "+
		"(one from a member cut off from its peers would miss what was written since): %s", strings.Join(states, ", "))
}
