package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// What the backend does with a damaged cluster folder. It never deletes what a person could still
// use: a file it cannot make anew without loss (the CA, the service-account key) stops the
// cluster with reason StateDamaged until it is restored; a file it can rebuild without loss (the
// record cluster.json, from the Cluster's status) is rebuilt, the damaged one kept beside it; a
// missing etcd data folder is reported as DataLost, like a missing cluster folder.

// damaged returns the StateDamaged error for files of the pki folder dir that do not load (err):
// why, a sentence, says what depends on them; alternative what to do without a backup.
func damaged(dir string, files []string, err error, why, alternative string) error {
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = filepath.Join(dir, f)
	}
	return &backend.Error{Reason: backend.ReasonStateDamaged, Err: fmt.Errorf(
		"%s: damaged (%v). %s, so the operator does not replace it and the cluster stays stopped: restore it from a backup of --state-dir, %s; the cluster starts by itself once it loads",
		strings.Join(paths, " and "), err, why, alternative)}
}

// stateError gives the errors of preparing a cluster's folder their reason: a full --state-dir
// becomes StateDirFull, and both it and StateDamaged are tried again after StateRetry, as their
// fix (space freed, a file restored) happens outside the platform's API.
func (b *Backend) stateError(err error) error {
	if err == nil {
		return nil
	}
	var e *backend.Error
	switch {
	case errors.Is(err, syscall.ENOSPC):
		return &backend.Error{Reason: backend.ReasonStateDirFull, RetryAfter: b.opts.StateRetry, Err: fmt.Errorf(
			"--state-dir %s is full: %w. Free space on its volume or grow it; the cluster starts by itself once its folder can be written",
			b.opts.StateDir, err)}
	case errors.As(err, &e) && e.Reason == backend.ReasonStateDamaged:
		return &backend.Error{Reason: e.Reason, RetryAfter: b.opts.StateRetry, Err: err}
	}
	return err
}

// repairMeta rebuilds the damaged record of cl's folder dir (readErr) from what the Cluster's
// status says of it: the same ports (so the endpoint and every kubeconfig stay), the same version,
// the same service range (a status without one is of a cluster made before it was recorded: the
// legacy range). The damaged file is kept beside it. It returns the record and what it did, for
// an Event.
func (b *Backend) repairMeta(dir string, cl *clustersv1alpha1.Cluster, version string, readErr error) (meta, string) {
	m := meta{UID: cl.UID, Version: version, ServiceCIDR: b.opts.ServiceCIDR}
	if ps, ok := localStatus(cl); ok {
		m.Ports, m.DataLost, m.ServiceCIDR = ps.Ports, ps.DataLost, ps.ServiceCIDR
		if v := strings.TrimPrefix(ps.Version, "v"); v != "" {
			m.Version = v
		}
	}
	path := filepath.Join(dir, metaFile)
	what, kept := "damaged", ""
	if errors.Is(readErr, os.ErrNotExist) {
		what = "missing"
	} else {
		aside := fmt.Sprintf("%s.damaged-%s", path, time.Now().UTC().Format("20060102T150405Z"))
		kept = "; the damaged file is kept as " + aside
		if err := os.Rename(path, aside); err != nil {
			kept = "; the damaged file could not be kept aside: " + err.Error()
		}
	}
	b.log.Error(readErr, "Rebuilt the cluster's record from the Cluster's status", "dir", dir, "was", what)
	return m, fmt.Sprintf("The cluster's record %s was %s (%v): it was rebuilt from the Cluster's status (API server port %d, Kubernetes %s), so the endpoint and kubeconfigs stay%s.",
		path, what, readErr, m.Ports.APIServer, m.Version, kept)
}

// etcdLost marks m as DataLost when the etcd data folder of dir is missing although cl ran here
// before: etcd would otherwise start EMPTY without anybody noticing.
func etcdLost(dir string, m *meta, cl *clustersv1alpha1.Cluster) bool {
	if m.DataLost != nil {
		return false
	}
	if _, err := os.Stat(filepath.Join(dir, etcdDataDir)); !errors.Is(err, os.ErrNotExist) {
		return false
	}
	if _, ran := localStatus(cl); !ran {
		return false
	}
	now := time.Now().UTC().Truncate(time.Second)
	m.DataLost, m.LostPart = &now, lostEtcd
	return true
}

// localStatus is cl's status.providerStatus if this backend wrote it: the cluster ran here.
func localStatus(cl *clustersv1alpha1.Cluster) (providerStatus, bool) {
	var ps providerStatus
	if cl == nil || cl.Status.ProviderStatus == nil || json.Unmarshal(cl.Status.ProviderStatus.Raw, &ps) != nil || ps.Backend != Name {
		return ps, false
	}
	return ps, true
}
