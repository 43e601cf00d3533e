// Package etcdmaint keeps an etcd cluster's database healthy, through each member's gRPC gateway
// (JSON over its client URL), for every backend that runs etcd: the local backend's health checks
// call Maintain on their one member every few seconds; the hosted backend's maintenance Jobs
// (cmd/etcd-snapshot maintain) call it on every member of a control plane.
//
// One pass (Maintain):
//
//   - NOSPACE (the database reached its quota: etcd takes reads and deletes, no writes): its
//     history is compacted to the current revision (once per revision) and each member
//     defragmented, one after the other (at the same revision again only a member with free
//     pages left: a follower frees what the compaction released in its own time); once every
//     member is below DisarmAt of the quota, the alarm is disarmed and writes work again. Until
//     then the report says NoSpace, and how to free space: delete objects; the next pass frees
//     and disarms.
//   - Otherwise, when a periodic defragmentation is due (Policy.Defrag), each member of at least
//     DefragMinBytes whose free pages are half of its database or more is defragmented, one at a
//     time, and only while every member answers: a member pauses while it defragments, and with
//     another one down a three-member cluster would lose its quorum.
package etcdmaint

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

const (
	// DisarmAt is the share of the quota under which a NOSPACE alarm is disarmed: room for writes
	// before it is raised again. Closer to 1, a database of live data just under it would be
	// disarmed, refuse the next write and be full again at once, over and over.
	DisarmAt = 0.8
	// DefragMinBytes is the smallest database a periodic defragmentation bothers with.
	DefragMinBytes = 64 << 20
	// MaintenanceTimeout bounds one compaction or defragmentation.
	MaintenanceTimeout = 5 * time.Minute
	// AlarmNoSpace is etcd's alarm of a database at its quota.
	AlarmNoSpace = "NOSPACE"
)

// Member is one etcd member's gateway.
type Member struct {
	// Name names the member in reports (its pod, "default").
	Name string
	// URL is its client URL (http://etcd for a unix socket client, https://etcd-0.…:2379).
	URL string
	// Client reaches URL (TLS, client certificate); it must not time out by itself: a
	// defragmentation takes its time (MaintenanceTimeout).
	Client *http.Client
	// Timeout bounds a question (status, alarms): a hung etcd must not hold a health check up.
	// Default 5 s.
	Timeout time.Duration
}

// Status is what /v3/maintenance/status answers (the fields used).
type Status struct {
	Header struct {
		MemberID uint64 `json:"member_id,string"`
		Revision int64  `json:"revision,string"`
	} `json:"header"`
	DBSize      int64 `json:"dbSize,string"`
	DBSizeInUse int64 `json:"dbSizeInUse,string"`
}

// alarms is what /v3/maintenance/alarm answers (the fields used).
type alarms struct {
	Alarms []alarm `json:"alarms"`
}

type alarm struct {
	MemberID uint64 `json:"memberID,string"`
	Alarm    string `json:"alarm"`
}

// Status asks m for its status.
func (m Member) Status(ctx context.Context) (Status, error) {
	var st Status
	err := m.post(ctx, m.timeout(), "/v3/maintenance/status", struct{}{}, &st)
	return st, err
}

// alarms lists the cluster's alarms (any member answers for all).
func (m Member) alarms(ctx context.Context) ([]alarm, error) {
	var a alarms
	err := m.post(ctx, m.timeout(), "/v3/maintenance/alarm", map[string]string{"action": "GET"}, &a)
	return a.Alarms, err
}

func (m Member) compact(ctx context.Context, rev int64) error {
	return m.post(ctx, MaintenanceTimeout, "/v3/kv/compaction", map[string]any{"revision": fmt.Sprint(rev), "physical": true}, nil)
}

func (m Member) defragment(ctx context.Context) error {
	return m.post(ctx, MaintenanceTimeout, "/v3/maintenance/defragment", struct{}{}, nil)
}

func (m Member) disarm(ctx context.Context, a alarm) error {
	return m.post(ctx, m.timeout(), "/v3/maintenance/alarm",
		map[string]string{"action": "DEACTIVATE", "memberID": fmt.Sprint(a.MemberID), "alarm": a.Alarm}, nil)
}

func (m Member) timeout() time.Duration {
	if m.Timeout > 0 {
		return m.Timeout
	}
	return 5 * time.Second
}

// Post posts in as JSON to path of m's gateway (a question: within m's Timeout) and decodes its
// answer into out (nil: none).
func (m Member) Post(ctx context.Context, path string, in, out any) error {
	return m.post(ctx, m.timeout(), path, in, out)
}

// post posts in as JSON to path of m's gateway and decodes its answer into out, within timeout.
func (m Member) post(ctx context.Context, timeout time.Duration, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(m.URL, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := m.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// Policy is what one pass may do.
type Policy struct {
	// Quota is etcd's --quota-backend-bytes.
	Quota int64
	// Defrag: a periodic defragmentation is due.
	Defrag bool
	// DefragMinBytes is the smallest database Defrag bothers with; 0: DefragMinBytes.
	DefragMinBytes int64
	// FreedAt is the revision at which a full etcd was last compacted and defragmented (a previous
	// report's FreedAt): not again at the same revision, nothing would be freed.
	FreedAt int64
}

// Report is what one pass found and did. It is JSON: the hosted backend reads it from its Jobs'
// termination message.
type Report struct {
	Members []MemberReport `json:"members"`
	// Revision is the cluster's revision when the pass began.
	Revision int64 `json:"revision,omitempty"`
	// Quota is the quota the pass compared with.
	Quota int64 `json:"quota"`
	// NoSpace: the NOSPACE alarm stays; the cluster takes no writes.
	NoSpace bool `json:"noSpace,omitempty"`
	// FreedAt is the revision a full etcd was compacted and defragmented at (Policy.FreedAt).
	FreedAt int64 `json:"freedAt,omitempty"`
	// Disarmed: this pass disarmed the NOSPACE alarm.
	Disarmed bool `json:"disarmed,omitempty"`
	// Defragmented are the members this pass defragmented, in order.
	Defragmented []string `json:"defragmented,omitempty"`
	// Unreachable: no member answered; nothing was done.
	Unreachable bool `json:"unreachable,omitempty"`
	// Message says it in a sentence.
	Message string `json:"message"`
}

// MemberReport is one member's database after the pass, or why it did not answer.
type MemberReport struct {
	Name        string `json:"name"`
	DBSize      int64  `json:"dbSize,omitempty"`
	DBSizeInUse int64  `json:"dbSizeInUse,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Largest is the largest database of the members that answered.
func (r Report) Largest() int64 {
	var n int64
	for _, m := range r.Members {
		n = max(n, m.DBSize)
	}
	return n
}

// Maintain makes one pass over members (see the package's comment). log, if not nil, is told of
// what it changes (key-value pairs after the message).
func Maintain(ctx context.Context, members []Member, p Policy, log func(msg string, kv ...any)) Report {
	if log == nil {
		log = func(string, ...any) {}
	}
	r := Report{Quota: p.Quota, FreedAt: p.FreedAt}
	status, answered := r.survey(ctx, members)
	if answered == nil {
		r.Unreachable = true
		r.Message = "No etcd member answers: nothing was checked."
		return r
	}
	list, err := answered.alarms(ctx)
	if err != nil {
		r.Unreachable = true
		r.Message = fmt.Sprintf("etcd does not list its alarms: %v", err)
		return r
	}
	var full []alarm
	for _, a := range list {
		if a.Alarm == AlarmNoSpace {
			full = append(full, a)
		}
	}
	if len(full) == 0 {
		if p.Defrag {
			r.defragFragmented(ctx, members, status, cmp.Or(p.DefragMinBytes, DefragMinBytes), log)
		}
		r.Message = r.healthy()
		return r
	}
	// Full: the history goes (the API server compacts every 5 minutes anyway; watchers re-list),
	// once per revision, then the free pages: of every member at a new revision, later of each
	// member that still has some (a follower frees what a compaction released in its own time).
	fresh := p.FreedAt != r.Revision
	r.FreedAt = r.Revision
	if fresh {
		if err := answered.compact(ctx, r.Revision); err != nil && !strings.Contains(err.Error(), "compacted") {
			log("Compacting a full etcd failed", "err", err.Error())
		}
	}
	for i, m := range members {
		if st := status[i]; st != nil && (fresh || st.DBSizeInUse < st.DBSize/10*9) {
			r.defrag(ctx, m, log)
		}
	}
	status, _ = r.survey(ctx, members)
	if r.belowDisarm(status) {
		var errs []error
		for _, a := range full {
			errs = append(errs, answered.disarm(ctx, a))
		}
		err := errors.Join(errs...)
		if err == nil {
			log("etcd's database is below its quota again: disarmed its NOSPACE alarm", "bytes", r.Largest(), "quota", p.Quota)
			r.Disarmed = true
			r.Message = "etcd's database was full; the provider freed space and disarmed its NOSPACE alarm: it takes writes again. " + r.healthy()
			return r
		}
		log("Disarming etcd's NOSPACE alarm failed", "err", err.Error())
	}
	r.NoSpace = true
	r.Message = fmt.Sprintf("etcd's database reached its quota (%d of %d bytes, %d in use after compaction and defragmentation): the cluster serves reads and deletes but takes no writes. "+
		"Delete objects you do not need (kubectl delete); the provider frees the space and takes writes again at its next check.",
		r.Largest(), p.Quota, r.largestInUse())
	return r
}

// survey asks every member for its status, fills r.Members (and r.Revision, the first time) and
// returns the statuses (nil for a member that did not answer) and the member that answered with
// the latest revision (a follower may lag behind a write by a moment).
func (r *Report) survey(ctx context.Context, members []Member) ([]*Status, *Member) {
	status := make([]*Status, len(members))
	r.Members = make([]MemberReport, len(members))
	var answered *Member
	var rev int64
	for i, m := range members {
		r.Members[i].Name = m.Name
		st, err := m.Status(ctx)
		if err != nil {
			r.Members[i].Error = err.Error()
			continue
		}
		status[i] = &st
		r.Members[i].DBSize, r.Members[i].DBSizeInUse = st.DBSize, st.DBSizeInUse
		if answered == nil || st.Header.Revision > rev {
			answered, rev = &members[i], st.Header.Revision
		}
	}
	if r.Revision == 0 {
		r.Revision = rev
	}
	return status, answered
}

// defragFragmented defragments, one after the other, the members whose database is worth it,
// only while every member answers.
func (r *Report) defragFragmented(ctx context.Context, members []Member, status []*Status, minBytes int64, log func(string, ...any)) {
	for _, st := range status {
		if st == nil {
			return // one member down: a defragmentation could take the quorum
		}
	}
	for i, st := range status {
		if st.DBSize >= minBytes && st.DBSizeInUse <= st.DBSize/2 {
			r.defrag(ctx, members[i], log)
		}
	}
	r.survey(ctx, members)
}

// defrag defragments m and reports whether it did.
func (r *Report) defrag(ctx context.Context, m Member, log func(string, ...any)) bool {
	start := time.Now()
	if err := m.defragment(ctx); err != nil {
		log("Defragmenting an etcd member failed; the next pass tries again", "member", m.Name, "err", err.Error())
		return false
	}
	r.Defragmented = append(r.Defragmented, m.Name)
	log("Defragmented an etcd member", "member", m.Name, "took", time.Since(start).Round(time.Millisecond).String())
	return true
}

// belowDisarm reports whether every member that answered is below DisarmAt of the quota.
func (r *Report) belowDisarm(status []*Status) bool {
	answered := false
	for _, st := range status {
		if st == nil {
			continue
		}
		answered = true
		if float64(st.DBSize) >= DisarmAt*float64(r.Quota) {
			return false
		}
	}
	return answered
}

func (r *Report) largestInUse() int64 {
	var n int64
	for _, m := range r.Members {
		n = max(n, m.DBSizeInUse)
	}
	return n
}

// DownClause is what a report's message says of the members that did not answer ("" for none).
func DownClause(down []string) string {
	if len(down) == 0 {
		return ""
	}
	return fmt.Sprintf("; member %s does not answer", strings.Join(down, ", "))
}

// healthy is the message of an etcd that takes writes.
func (r *Report) healthy() string {
	msg := fmt.Sprintf("etcd takes writes: its database is %s of its %s quota", mib(r.Largest()), mib(r.Quota))
	var down []string
	for _, m := range r.Members {
		if m.Error != "" {
			down = append(down, m.Name)
		}
	}
	msg += DownClause(down)
	if len(r.Defragmented) > 0 {
		msg += fmt.Sprintf("; defragmented %s", strings.Join(r.Defragmented, ", "))
	}
	return msg + "."
}

func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
