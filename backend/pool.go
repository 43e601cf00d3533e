package backend

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Pool is what a ProviderConfig's spec.pool asks of its bound Backend: Size spare clusters of
// Version kept ready, hibernated or running.
type Pool struct {
	Size       int
	Version    string
	Hibernated bool
}

// PoolState counts a profile's spares: Ready can be claimed now, Starting are being made.
type PoolState struct {
	Ready, Starting int
}

// Pooler is a bound Backend that keeps spare clusters for its profile (the local backend). A
// Cluster of the profile made with the pool's version claims a Ready spare: it becomes that
// Cluster's cluster (its own CA, keys and data, made for no other), and the pool makes another.
type Pooler interface {
	// SetPool keeps p for profile from now on (Size 0: no spares; the ones there are removed)
	// and returns the state of its spares.
	SetPool(profile string, p Pool) PoolState
}

// metricClaims counts Clusters made from a spare, and those made anew although the profile has a
// pool (none was ready).
var metricClaims = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "cluster_provider_pool_claims_total",
	Help: "New Clusters of a profile with a pool (spec.pool), by backend and result: claimed (a spare became the Cluster's) or missed (no spare was ready: made anew).",
}, []string{"backend", "result"})

// metricSpares is the number of spares, by backend and state (ready, starting).
var metricSpares = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "cluster_provider_pool_spares",
	Help: "Spare clusters kept for the profiles' pools, by backend and state: ready (claimable) or starting.",
}, []string{"backend", "state"})

func init() {
	metrics.Registry.MustRegister(metricClaims, metricSpares)
}

// Pool claim results (the result label of cluster_provider_pool_claims_total).
const (
	ClaimClaimed = "claimed"
	ClaimMissed  = "missed"
)

// RecordClaim counts a new Cluster of a profile with a pool: claimed or missed.
func RecordClaim(backend, result string) { metricClaims.WithLabelValues(backend, result).Inc() }

// SetSpares sets the spares gauge of backend.
func SetSpares(backend string, ready, starting int) {
	metricSpares.WithLabelValues(backend, "ready").Set(float64(ready))
	metricSpares.WithLabelValues(backend, "starting").Set(float64(starting))
}

// Claims is the count of new Clusters of a profile with a pool of backend, by result, as a scrape
// would read it: for tests and benchmarks.
func Claims(backend, result string) float64 {
	var m dto.Metric
	if err := metricClaims.WithLabelValues(backend, result).Write(&m); err != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}
