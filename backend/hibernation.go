package backend

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// AnnotationHibernate on a Cluster hibernates its cluster now, for a Backend that hibernates
// (local). HibernateNow ("true"): hibernated at once; the first connection through its endpoint
// wakes it, and it then stays awake (hibernating again when idle, if its profile sets
// spec.hibernation.idleAfter). HibernatePinned ("pinned"): hibernated, and no connection wakes
// it (refused) until the annotation is removed or set to "true". Removing the annotation wakes a
// cluster it hibernated.
const AnnotationHibernate = "hibernation.clusters.openmcp.cloud/hibernate"

// Values of AnnotationHibernate.
const (
	HibernateNow    = "true"
	HibernatePinned = "pinned"
)

// PartHibernated: the cluster's control plane is stopped with its data kept, and its endpoint
// wakes it on the first connection (for a Backend that hibernates: local). True with reason
// ReasonIdle or ReasonOnDemand; False with reason ReasonAwake. Informational: a hibernated
// cluster stays Ready, since its endpoint answers.
const PartHibernated = "Hibernated"

// Reasons of PartHibernated, and of a hibernated cluster's APIServerReady (ReasonHibernated) and
// of one waking (ReasonWaking).
const (
	ReasonIdle       = "Idle"
	ReasonOnDemand   = "OnDemand"
	ReasonAwake      = "Awake"
	ReasonHibernated = "Hibernated"
	ReasonWaking     = "Waking"
	// ReasonWoken is the Event of a wake (a Notice).
	ReasonWoken = "Woken"
)

// metricWakes counts the wakes of hibernated clusters, by what woke them.
var metricWakes = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "cluster_provider_wakes_total",
	Help: "Wakes of hibernated clusters, by backend and by what woke them: request (a client's connection), " +
		"operator (an AccessRequest, a snapshot, an upgrade), annotation (hibernate annotation removed).",
}, []string{"backend", "trigger"})

// metricWakeSeconds is how long a wake takes: from the first connection (or the operator's need)
// to the API server serving.
var metricWakeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    "cluster_provider_wake_seconds",
	Help:    "How long a hibernated cluster took to wake: from what woke it to its API server serving (the first request's extra wait).",
	Buckets: []float64{0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60},
}, []string{"backend"})

// metricHibernations counts hibernations, by reason (Idle, OnDemand).
var metricHibernations = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "cluster_provider_hibernations_total",
	Help: "Hibernations of clusters, by backend and reason: Idle (spec.hibernation.idleAfter) or OnDemand (the hibernate annotation).",
}, []string{"backend", "reason"})

// metricHibernated is how many clusters are hibernated now.
var metricHibernated = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "cluster_provider_hibernated_clusters",
	Help: "Clusters whose control plane is hibernated now (no process runs; the first connection wakes it), by backend.",
}, []string{"backend"})

func init() {
	metrics.Registry.MustRegister(metricWakes, metricWakeSeconds, metricHibernations, metricHibernated)
}

// RecordWake counts a wake of a cluster of backend by trigger that took took.
func RecordWake(backend, trigger string, took time.Duration) {
	metricWakes.WithLabelValues(backend, trigger).Inc()
	metricWakeSeconds.WithLabelValues(backend).Observe(took.Seconds())
}

// RecordHibernation counts a hibernation of a cluster of backend for reason.
func RecordHibernation(backend, reason string) {
	metricHibernations.WithLabelValues(backend, reason).Inc()
}

// SetHibernated sets how many clusters of backend are hibernated now.
func SetHibernated(backend string, n int) { metricHibernated.WithLabelValues(backend).Set(float64(n)) }

// Wakes is the count of wakes of clusters of backend by trigger, as a scrape would read it: for
// tests.
func Wakes(backend, trigger string) float64 {
	var m dto.Metric
	if err := metricWakes.WithLabelValues(backend, trigger).Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// Hibernations is the count of hibernations of clusters of backend for reason: for tests.
func Hibernations(backend, reason string) float64 {
	var m dto.Metric
	if err := metricHibernations.WithLabelValues(backend, reason).Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// What woke a cluster: the trigger label of cluster_provider_wakes_total (WakeWhy says it in words).
const (
	TriggerRequest    = "request"
	TriggerOperator   = "operator"
	TriggerAnnotation = "annotation"
	TriggerClaim      = "claim"
)

// WakeWhy says in words what a trigger is, for the Event of a wake.
func WakeWhy(trigger string) string {
	switch trigger {
	case TriggerRequest:
		return "a client connected to its endpoint"
	case TriggerAnnotation:
		return "annotation " + AnnotationHibernate + " removed"
	case TriggerClaim:
		return "a new Cluster claimed it from its profile's pool of hibernated spares"
	default:
		return "the operator needed it: an AccessRequest, a snapshot, an upgrade or a restore"
	}
}

// HibernationPart is the PartHibernated of a cluster hibernated since since for reason (nil: it is
// awake), of a profile that hibernates it after idleAfter without a client (0: never), with the
// value demanded of AnnotationHibernate; stopped says what hibernation stopped ("no process runs").
// ok is false where there is nothing to say: awake, no idle time, no annotation.
func HibernationPart(since *time.Time, reason string, idleAfter time.Duration, demanded, stopped string) (p Part, ok bool) {
	if since == nil {
		if idleAfter == 0 && demanded == "" {
			return Part{}, false
		}
		msg := "The cluster is awake."
		if idleAfter > 0 {
			msg += fmt.Sprintf(" It hibernates after %s without a client connection (spec.hibernation.idleAfter of its ProviderConfig).", idleAfter)
		}
		return Part{Type: PartHibernated, Reason: ReasonAwake, Message: msg}, true
	}
	msg := fmt.Sprintf("Hibernated since %s", since.UTC().Format(time.RFC3339))
	if reason == ReasonIdle {
		msg += fmt.Sprintf(", after %s without a client", idleAfter)
	} else {
		msg += ", on demand (annotation " + AnnotationHibernate + ")"
	}
	msg += ": " + stopped + "; data, certificates and keys are kept. "
	if demanded == HibernatePinned {
		msg += "Pinned: connections are refused until the annotation is removed or set to \"true\"."
	} else {
		msg += "The first connection to its endpoint wakes it; that request waits for the API server to start."
	}
	return Part{Type: PartHibernated, Ready: true, Reason: reason, Message: msg}, true
}
