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

// metricCAExpiry is when each CA a cluster's control plane trusts ends.
var metricCAExpiry = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "cluster_provider_ca_expiry_timestamp_seconds",
	Help: "When a CA of a cluster's control plane ends (its NotAfter, Unix seconds), by role: current (signs the certificates), " +
		"next (trusted, signs after the rotation's phase Trusting), previous (signed before, still trusted in phase Signing). " +
		"The local backend rotates it a year before its end. Alert on cluster_provider_ca_expiry_timestamp_seconds{ca=\"current\"} - time() < 180*86400.",
}, []string{"cluster", "ca"})

// metricHostedComponent is how long each step of a hosted control plane's component takes.
var metricHostedComponent = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "cluster_provider_hosted_component_seconds",
	Help: "How long one step of a component of a hosted control plane takes (namespace, pki, etcd, apiserver, ...), " +
		"observed at every Ensure: the slow step of a creation shows here.",
	Buckets: []float64{0.001, 0.005, 0.02, 0.1, 0.5, 1, 2, 5, 10, 30},
}, []string{"component"})

func init() {
	metrics.Registry.MustRegister(metricCertificateExpiry, metricCAExpiry, metricHostedComponent)
}

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

// RecordCAs sets the expiry gauge of each CA (by role) of the cluster ref, and drops those of the
// roles it no longer has (a rotation ended).
func RecordCAs(ref Ref, notAfter map[string]time.Time) {
	metricCAExpiry.DeletePartialMatch(prometheus.Labels{"cluster": ref.String()})
	for role, t := range notAfter {
		metricCAExpiry.WithLabelValues(ref.String(), role).Set(float64(t.Unix()))
	}
}

// ForgetCertificates drops the expiry gauges of the cluster ref (deleted), its CAs' too.
func ForgetCertificates(ref Ref) {
	metricCertificateExpiry.DeletePartialMatch(prometheus.Labels{"cluster": ref.String()})
	metricCAExpiry.DeletePartialMatch(prometheus.Labels{"cluster": ref.String()})
}

// CAExpiry is the CA expiry gauge's value for the cluster ref's CA role (0 if none), as a scrape
// would read it: for tests. It does not create the series.
func CAExpiry(ref Ref, role string) float64 {
	ch := make(chan prometheus.Metric, 16)
	go func() { metricCAExpiry.Collect(ch); close(ch) }()
	var v float64
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		labels := map[string]string{}
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["cluster"] == ref.String() && labels["ca"] == role {
			v = d.GetGauge().GetValue()
		}
	}
	return v
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
