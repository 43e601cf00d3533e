package local

// Benchmark of the warm pool (pool.go): create → Ready of a Cluster that claims a spare.
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkPoolClaim -benchtime 1x -timeout 30m ./backend/local/

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// poolClaims is how many Clusters BenchmarkPoolClaim makes from the pool per variant.
const poolClaims = 10

// BenchmarkPoolClaim makes poolClaims Clusters one after the other from a pool of one spare,
// waiting for the pool to refill before each: running spares, and hibernated ones. It reports
// ready-p50-s and ready-max-s (create → the API server serves: the Cluster's APIServerReady;
// target p50 ≤ 1 s), complete-p50-s (→ the controller manager runs too: the Cluster Ready), and
// first-request-p50-s (create → a first `kubectl get ns` through the new endpoint answered, with
// client-go's defaults). Each Cluster is deleted after it is measured.
func BenchmarkPoolClaim(b *testing.B) {
	for _, hibernated := range []bool{false, true} {
		name := "running"
		if hibernated {
			name = "hibernated"
		}
		b.Run(name, func(b *testing.B) {
			h := startBenchBackend(b, 3, nil)
			const profile = "default.test.local"
			p := backend.Pool{Size: 1, Version: h.version, Hibernated: hibernated}
			for b.Loop() {
				var readyIn, completeIn, firstIn []time.Duration
				for i := range poolClaims {
					require.Eventually(b, func() bool {
						s := h.b.SetPool(profile, p)
						return s.Ready == 1 && s.Starting == 0 && (!hibernated || h.b.usedNow() == 0)
					}, benchReadyWithin, 10*time.Millisecond, "a spare ready")
					before := backend.Claims(Name, backend.ClaimClaimed)
					cl := newCluster(fmt.Sprintf("claim-%d", i))
					api, all, err := h.awaitReady(b.Context(), cl)
					require.NoError(b, err)
					require.Equal(b, before+1, backend.Claims(Name, backend.ClaimClaimed), "made from the spare")
					readyIn, completeIn = append(readyIn, api), append(completeIn, all)

					second := newCluster(fmt.Sprintf("first-%d", i))
					require.Eventually(b, func() bool {
						s := h.b.SetPool(profile, p)
						return s.Ready == 1 && s.Starting == 0 && (!hibernated || h.b.usedNow() == 1)
					}, benchReadyWithin, 10*time.Millisecond, "a spare ready")
					start := time.Now()
					s, err := h.b.Ensure(b.Context(), second, backend.Want{Version: h.version})
					require.NoError(b, err)
					_, err = firstRequest(b.Context(), h.endpointConfig(b, second))
					require.NoError(b, err, "the first request to %s", s.Endpoint)
					firstIn = append(firstIn, time.Since(start))
					require.NoError(b, h.deleteAll(b.Context(), []*clustersv1alpha1.Cluster{cl, second}))
				}
				r, c, f := seconds(readyIn), seconds(completeIn), seconds(firstIn)
				b.ReportMetric(quantile(r, 0.5), "ready-p50-s")
				b.ReportMetric(r[len(r)-1], "ready-max-s")
				b.ReportMetric(quantile(c, 0.5), "complete-p50-s")
				b.ReportMetric(quantile(f, 0.5), "first-request-p50-s")
			}
			h.b.SetPool(profile, backend.Pool{})
		})
	}
}
