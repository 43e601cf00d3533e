package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/openmcp-local/cluster-provider/backend/etcdmaint"
)

// snapshotSource is the etcdctl connection of save: with members (--member), the one in the
// quorum etcdmaint.Pick chooses (the leader when it is healthy), reached with the TLS files
// given, then extra (the flags after --, an --endpoints among them dropped: etcdctl snapshots
// one endpoint); without, extra as given. It returns the connection and the member's name ("":
// none chosen).
func snapshotSource(ctx context.Context, ms members, cacert, cert, key string, extra []string) ([]string, string, error) {
	if len(ms) == 0 {
		return extra, "", nil
	}
	c, err := tlsClient(cacert, cert, key)
	if err != nil {
		return nil, "", err
	}
	for i := range ms {
		ms[i].Client = c
	}
	m, probes, err := etcdmaint.Pick(ctx, ms)
	for _, p := range probes {
		fmt.Printf("member %s: healthy %t, leader %t, raft term %d index %d %s\n", p.Name, p.Healthy, p.IsLeader(), p.RaftTerm, p.RaftIndex, p.Error)
	}
	if err != nil {
		return nil, "", err
	}
	conn := []string{"--endpoints=" + m.URL}
	for _, f := range []struct{ name, file string }{{"cacert", cacert}, {"cert", cert}, {"key", key}} {
		if f.file != "" {
			conn = append(conn, "--"+f.name+"="+f.file)
		}
	}
	for i := 0; i < len(extra); i++ {
		switch a := extra[i]; {
		case a == "--endpoints":
			i++ // and its value
		case strings.HasPrefix(a, "--endpoints="):
		default:
			conn = append(conn, a)
		}
	}
	return conn, m.Name, nil
}
