package backend

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// metricCertificateExpiry is when each certificate of a cluster's control plane ends.
var metricCertificateExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "cluster_provider_certificate_expiry_seconds",
	Help: "When a certificate of a cluster's control plane ends (its NotAfter, Unix seconds), as last seen by its backend; " +
		"the backend issues it anew 30 days before. Alert on cluster_provider_certificate_expiry_seconds - time() < 7*86400.",
}, []string{"cluster", "certificate"})

// metricHostedComponent is how long each step of a hosted control plane's component takes.
var metricHostedComponent = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "cluster_provider_hosted_component_seconds",
	Help: "How long one step of a component of a hosted control plane takes (namespace, pki, etcd, apiserver, ...), " +
		"observed at every Ensure: the slow step of a creation shows here.",
	Buckets: []float64{0.001, 0.005, 0.02, 0.1, 0.5, 1, 2, 5, 10, 30},
}, []string{"component"})

func init() { metrics.Registry.MustRegister(metricCertificateExpiry, metricHostedComponent) }

// ObserveHostedComponent records that a step of a hosted control plane's component took took.
func ObserveHostedComponent(component string, took time.Duration) {
	metricHostedComponent.WithLabelValues(component).Observe(took.Seconds())
}

// RecordCertificates sets the expiry gauge of each certificate (by name) of the cluster ref.
func RecordCertificates(ref Ref, notAfter map[string]time.Time) {
	for name, t := range notAfter {
		metricCertificateExpiry.WithLabelValues(ref.String(), name).Set(float64(t.Unix()))
	}
}

// ForgetCertificates drops the expiry gauges of the cluster ref (deleted).
func ForgetCertificates(ref Ref) {
	metricCertificateExpiry.DeletePartialMatch(prometheus.Labels{"cluster": ref.String()})
}

// CertificateExpiry is the gauge's value for the cluster ref's certificate name (0 if none), as a
// scrape would read it: for tests.
func CertificateExpiry(ref Ref, name string) float64 {
	var m dto.Metric
	if err := metricCertificateExpiry.WithLabelValues(ref.String(), name).Write(&m); err != nil {
		return 0
	}
	return m.GetGauge().GetValue()
}
