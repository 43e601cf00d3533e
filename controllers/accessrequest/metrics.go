package accessrequest

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the AccessRequest reconcilers, on the operator's /metrics.
var (
	// metricAnswers counts AccessRequests entering a phase, by access type and reason.
	metricAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_provider_accessrequest_answers_total",
		Help: "AccessRequests that entered a phase (Granted, Denied, Pending), by access (token, oidc) and condition reason.",
	}, []string{"access", "phase", "reason"})
	// metricTokens counts tokens issued, by why: grant, rotation, restore.
	metricTokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_provider_accessrequest_tokens_total",
		Help: "ServiceAccount tokens issued for token AccessRequests, by cause (grant, rotation, restore); a grant made again because the cluster lost it counts as grant.",
	}, []string{"cause"})
)

func init() {
	metrics.Registry.MustRegister(metricAnswers, metricTokens)
}
