package local

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/openmcp-local/cluster-provider/backend"
)

// A cluster's etcd is kept healthy by its instance's health checks (keepEtcdHealthy), through
// etcd's gRPC gateway (JSON over its client socket):
//
//   - The liveness check asks /health?exclude=NOSPACE: an etcd whose database reached its quota
//     is full, not hung, and restarting it would not help.
//   - NOSPACE (etcd takes reads and deletes, no writes): its history is compacted to the current
//     revision and the database defragmented, and once it is below nospaceDisarmAt of the quota
//     the alarm is disarmed and writes work again. Until then State.Etcd is not Ready (reason
//     EtcdNoSpace) and says how to free space: delete objects; the next check frees and disarms.
//   - A database of at least defragMinBytes whose free pages are half of it or more is
//     defragmented, at most once every defragEvery: the single member pauses for as long as it
//     takes (tens of milliseconds for a small database).
const (
	// nospaceDisarmAt is the share of the quota under which a NOSPACE alarm is disarmed: room for
	// writes before it is raised again. Closer to 1, a database of live data just under it would
	// be disarmed, refuse the next write and be full again at once, over and over.
	nospaceDisarmAt = 0.8
	defragMinBytes  = 64 << 20
	defragEvery     = 6 * time.Hour
	// etcdMaintenanceTimeout bounds one compaction or defragmentation.
	etcdMaintenanceTimeout = 5 * time.Minute
	// ReasonEtcdNoSpace: etcd's database reached its quota; it takes no writes.
	ReasonEtcdNoSpace = "EtcdNoSpace"
)

// etcdStatus is what the gateway's /v3/maintenance/status answers (the fields used).
type etcdStatus struct {
	Header struct {
		MemberID uint64 `json:"member_id,string"`
		Revision int64  `json:"revision,string"`
	} `json:"header"`
	DBSize      int64 `json:"dbSize,string"`
	DBSizeInUse int64 `json:"dbSizeInUse,string"`
}

// etcdAlarms is what /v3/maintenance/alarm answers (the fields used).
type etcdAlarms struct {
	Alarms []struct {
		Alarm string `json:"alarm"`
	} `json:"alarms"`
}

func (a etcdAlarms) has(alarm string) bool {
	for _, x := range a.Alarms {
		if x.Alarm == alarm {
			return true
		}
	}
	return false
}

// keepEtcdHealthy frees and disarms a full etcd, and defragments a fragmented one. It returns
// the part to report: nil while etcd is fine.
func (in *instance) keepEtcdHealthy(ctx context.Context) *backend.Part {
	quota := in.b.opts.Tuning.etcdQuota()
	var alarms etcdAlarms
	if err := etcdPost(ctx, in.etcdMaint, probeTimeout, "/v3/maintenance/alarm", map[string]string{"action": "GET"}, &alarms); err != nil {
		return nil // the liveness check reports an etcd that does not answer
	}
	var st etcdStatus
	if err := etcdPost(ctx, in.etcdMaint, probeTimeout, "/v3/maintenance/status", struct{}{}, &st); err != nil {
		return nil
	}
	if !alarms.has("NOSPACE") {
		in.mu.Lock()
		due := time.Since(in.defragged) >= defragEvery
		in.mu.Unlock()
		if due && st.DBSize >= defragMinBytes && st.DBSizeInUse <= st.DBSize/2 {
			in.defrag(ctx, st)
		}
		return nil
	}
	// Full: the history goes (the API server compacts every 5 minutes anyway; watchers re-list),
	// then the free pages; once per revision: nothing changed, nothing to free.
	in.mu.Lock()
	tried := in.freedAt == st.Header.Revision
	in.freedAt = st.Header.Revision
	in.mu.Unlock()
	if tried {
		return in.noSpace(st, quota)
	}
	if err := etcdPost(ctx, in.etcdMaint, etcdMaintenanceTimeout, "/v3/kv/compaction", map[string]any{"revision": fmt.Sprint(st.Header.Revision), "physical": true}, nil); err != nil {
		in.log.V(1).Info("Compacting a full etcd failed", "err", err.Error())
	}
	if st = in.defrag(ctx, st); st.DBSize > 0 && float64(st.DBSize) < nospaceDisarmAt*float64(quota) {
		disarm := map[string]string{"action": "DEACTIVATE", "memberID": fmt.Sprint(st.Header.MemberID), "alarm": "NOSPACE"}
		if err := etcdPost(ctx, in.etcdMaint, probeTimeout, "/v3/maintenance/alarm", disarm, nil); err == nil {
			in.log.Info("etcd's database is below its quota again: disarmed its NOSPACE alarm", "bytes", st.DBSize, "quota", quota)
			return nil
		}
	}
	return in.noSpace(st, quota)
}

// noSpace is the part of an etcd whose NOSPACE alarm stays.
func (in *instance) noSpace(st etcdStatus, quota int64) *backend.Part {
	return &backend.Part{Reason: ReasonEtcdNoSpace, Message: fmt.Sprintf(
		"etcd's database reached its quota (%d of %d bytes, %d in use after compaction and defragmentation): the cluster serves reads and deletes but takes no writes. "+
			"Delete objects you do not need (kubectl delete); the provider frees the space and takes writes again at its next health check.",
		st.DBSize, quota, st.DBSizeInUse)}
}

// defrag defragments etcd and returns its status after.
func (in *instance) defrag(ctx context.Context, before etcdStatus) etcdStatus {
	start := time.Now()
	if err := etcdPost(ctx, in.etcdMaint, etcdMaintenanceTimeout, "/v3/maintenance/defragment", struct{}{}, nil); err != nil {
		in.log.Error(err, "Defragmenting etcd failed; the next health check tries again")
		return before
	}
	in.mu.Lock()
	in.defragged = time.Now()
	in.mu.Unlock()
	var after etcdStatus
	if err := etcdPost(ctx, in.etcdMaint, probeTimeout, "/v3/maintenance/status", struct{}{}, &after); err != nil {
		return before
	}
	in.log.Info("Defragmented etcd", "bytesBefore", before.DBSize, "bytesAfter", after.DBSize, "took", time.Since(start).Round(time.Millisecond).String())
	return after
}

// etcdPost posts in as JSON to the gateway path of etcd and decodes its answer into out, within
// timeout: probeTimeout for a question (a hung etcd must not hold the health checks up; its
// liveness check restarts it), etcdMaintenanceTimeout for a compaction or defragmentation.
func etcdPost(ctx context.Context, c *http.Client, timeout time.Duration, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://etcd"+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
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
