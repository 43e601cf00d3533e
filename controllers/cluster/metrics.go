package cluster

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
)

// metricReady is the per-Cluster status gauge (as kamaji_tenant_control_plane_status is per
// tenant control plane): 1 while the Cluster's phase is Ready, 0 otherwise.
var metricReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "cluster_provider_cluster_ready",
	Help: "1 while a Cluster's phase is Ready (its API server serves, and its controller manager and etcd where the backend reports them), 0 otherwise. Alert on it being 0 for some minutes.",
}, []string{"cluster", "profile"})

func init() { metrics.Registry.MustRegister(metricReady) }

// recordReady sets cl's status gauge from its phase.
func recordReady(cl *clustersv1alpha1.Cluster) {
	v := 0.0
	if cl.Status.Phase == common.PhaseReady {
		v = 1
	}
	metricReady.WithLabelValues(refName(cl), cl.Spec.Profile).Set(v)
}

// forgetReady drops the status gauge of a deleted Cluster.
func forgetReady(cl *clustersv1alpha1.Cluster) {
	metricReady.DeleteLabelValues(refName(cl), cl.Spec.Profile)
}
