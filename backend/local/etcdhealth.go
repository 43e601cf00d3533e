package local

import (
	"context"
	"time"

	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/etcdmaint"
)

// A cluster's etcd is kept healthy by its instance's health checks (keepEtcdHealthy), with
// backend/etcdmaint on its one member, through its client socket:
//
//   - The liveness check asks /health?exclude=NOSPACE: an etcd whose database reached its quota
//     is full, not hung, and restarting it would not help.
//   - NOSPACE: each check (at a new revision) compacts, defragments and, once the database is
//     below etcdmaint.DisarmAt of the quota, disarms; until then the part backend.PartEtcd is
//     not Ready (reason EtcdNoSpace) and says how to free space.
//   - A fragmented database is defragmented at most once every backend.MaintenanceInterval: the single member
//     pauses for as long as it takes (tens of milliseconds for a small database).
const (
	// ReasonEtcdNoSpace: etcd's database reached its quota; it takes no writes.
	ReasonEtcdNoSpace = backend.ReasonEtcdNoSpace
)

// keepEtcdHealthy frees and disarms a full etcd, and defragments a fragmented one. It returns
// the part to report: nil while etcd is fine.
func (in *instance) keepEtcdHealthy(ctx context.Context) *backend.Part {
	in.mu.Lock()
	policy := etcdmaint.Policy{Quota: in.b.opts.Tuning.etcdQuota(), Defrag: time.Since(in.defragged) >= backend.MaintenanceInterval, FreedAt: in.freedAt}
	in.mu.Unlock()
	member := etcdmaint.Member{Name: "etcd", URL: "http://etcd", Client: in.etcdMaint, Timeout: probeTimeout}
	r := etcdmaint.Maintain(ctx, []etcdmaint.Member{member}, policy, func(msg string, kv ...any) { in.logger().Info(msg, kv...) })
	in.mu.Lock()
	in.freedAt = r.FreedAt
	if len(r.Defragmented) > 0 {
		in.defragged = time.Now()
	}
	in.mu.Unlock()
	if !r.NoSpace {
		return nil // Unreachable too: the liveness check reports an etcd that does not answer
	}
	return &backend.Part{Reason: ReasonEtcdNoSpace, Message: r.Message}
}
