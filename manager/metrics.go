package manager

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Metrics of the engine, registered in controller-runtime's registry (served on /metrics).
// Per-profile series are deleted when the profile stops.
var (
	metricRunning = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "cluster_provider_engine_profiles_running",
		Help: "Number of profiles whose controllers run.",
	})
	metricStarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_provider_engine_profile_starts_total",
		Help: "Profile starts, restarts included.",
	})
	metricStops = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_provider_engine_profile_stops_total",
		Help: "Profile stops, restarts included.",
	})
	metricStartErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "cluster_provider_engine_profile_start_errors_total",
		Help: "Profile starts that failed.",
	})
	metricReconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cluster_provider_engine_reconcile_total",
		Help: "Reconciles per profile, kind and result (success, requeue, requeue_after, error, panic).",
	}, []string{"profile", "kind", "result"})
	metricReconcileTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cluster_provider_engine_reconcile_duration_seconds",
		Help:    "Duration of reconciles per profile and kind.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"profile", "kind"})
)

func init() {
	metrics.Registry.MustRegister(metricRunning, metricStarts, metricStops, metricStartErrors, metricReconciles, metricReconcileTime)
}

func observeReconcile(profile, kind string, d time.Duration, res reconcile.Result, err error) {
	result := "success"
	switch {
	case errors.Is(err, errPanic):
		result = "panic"
	case err != nil:
		result = "error"
	case res.RequeueAfter > 0:
		result = "requeue_after"
	case res.Requeue: //nolint:staticcheck // counted like controller-runtime does
		result = "requeue"
	}
	metricReconciles.WithLabelValues(profile, kind, result).Inc()
	metricReconcileTime.WithLabelValues(profile, kind).Observe(d.Seconds())
}

func deleteProfileSeries(profile string) {
	metricReconciles.DeletePartialMatch(prometheus.Labels{"profile": profile})
	metricReconcileTime.DeletePartialMatch(prometheus.Labels{"profile": profile})
}
