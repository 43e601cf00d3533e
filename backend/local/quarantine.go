package local

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// QuarantineDir is the folder, in --state-dir, where the local backend moves the folders of
// clusters it cannot match to a Cluster at start. It deletes a cluster's folder only through that
// Cluster's deletion: a folder without a Cluster may be the data of a Cluster that is there but
// not seen (a wrong kubeconfig, a restore from a backup with new UIDs, a reinstalled CRD), and
// etcd's data cannot be had back once removed.
//
// To restore a folder: stop the operator, move <state-dir>/quarantine/<uid>-<time> back to
// <state-dir>/<uid> of the Cluster that owns it (a restored Cluster has a new UID: rename the
// folder to it), start the operator. To purge: delete the folder.
const QuarantineDir = "quarantine"

// metricQuarantined counts the cluster folders moved aside.
var metricQuarantined = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "cluster_provider_local_quarantined_folders_total",
	Help: "Cluster folders of the local backend moved to <state-dir>/quarantine at start because no Cluster has their UID (never deleted: restore or purge them by hand).",
})

func init() { metrics.Registry.MustRegister(metricQuarantined) }

// quarantine moves the cluster folder name of stateDir to stateDir/quarantine/<name>-<now, UTC>
// and returns the new path.
func quarantine(stateDir, name string, now time.Time) (string, error) {
	q := filepath.Join(stateDir, QuarantineDir)
	if err := os.MkdirAll(q, 0o700); err != nil {
		return "", fmt.Errorf("making %s: %w", q, err)
	}
	to := filepath.Join(q, name+"-"+now.UTC().Format("20060102T150405Z"))
	if err := os.Rename(filepath.Join(stateDir, name), to); err != nil {
		return "", fmt.Errorf("moving the folder aside: %w", err)
	}
	return to, nil
}
