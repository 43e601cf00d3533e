package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the scheduler, on the operator's /metrics.
var (
	// metricAnswers counts ClusterRequests entering a state of their Scheduled condition.
	metricAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_provider_scheduler_answers_total",
		Help: "ClusterRequests whose Scheduled condition took a reason (Granted, NoPurposeMapping, ClusterConflict, ...), by phase and reason.",
	}, []string{"phase", "reason"})
	// metricClusters counts the scheduler's writes to Clusters, by action.
	metricClusters = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_provider_scheduler_cluster_actions_total",
		Help: "Cluster writes of the scheduler, by action (created, recreated, reused, released, deleted).",
	}, []string{"action"})
)

func init() {
	metrics.Registry.MustRegister(metricAnswers, metricClusters)
}
