// Command audit-log is the hosted backend's audit sidecar, in the control-plane image beside
// kube-apiserver (the image has no shell). It runs in a container next to the API server, which
// writes its audit log to a shared volume (--audit-log-path, rotated by --audit-log-maxsize and
// --audit-log-maxbackup), and streams that file to its stdout (backend/auditlog), so that
// `kubectl logs POD -c audit` shows the audit log and the kubelet rotates it:
//
//	audit-log --file PATH [--poll 1s]
//	    waits for PATH, copies it from its beginning, then follows it across rotations, until
//	    SIGTERM or SIGINT (exit 0). An error is written to stderr (exit 1).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/openmcp-local/cluster-provider/backend/auditlog"
)

func main() {
	file := flag.String("file", "", "the audit log file to follow (kube-apiserver's --audit-log-path)")
	poll := flag.Duration("poll", time.Second, "how often to look for new lines and rotations")
	flag.Parse()
	if *file == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: audit-log --file PATH [--poll 1s]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := auditlog.Follow(ctx, *file, os.Stdout, *poll); err != nil {
		fmt.Fprintln(os.Stderr, "audit-log:", err)
		os.Exit(1)
	}
}
