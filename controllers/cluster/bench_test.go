package cluster_test

// BenchmarkManyClusters starts many local clusters at once through the whole operator (envtest,
// the engine, the Cluster reconciler, the real local backend). One iteration is the intended run;
// it needs about 10 GiB of memory for 40 clusters:
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkManyClusters -benchtime 1x -timeout 60m ./controllers/cluster/

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/test/operator"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// manyWithin bounds the wait for every cluster of a burst: 40 on two cores take minutes.
const manyWithin = 20 * time.Minute

// BenchmarkManyClusters creates BENCH_CLUSTERS (default 40) Clusters at the same moment.
//
// all-fit: --local-max-clusters equals their number. Reported: create → Ready per Cluster
// (p50/p95/max, polled every 250 ms), the clusters' total RSS and PSS once all are Ready, and the
// operator's own CPU time (in core-seconds and in cores on average) and its peak RSS while they
// start. The operator here is the benchmark's process: it also holds the test's client, a small
// part.
//
// capacity: --local-max-clusters is 10 lower. The 10 beyond wait with CapacityExhausted; then 10
// Ready ones are deleted, and the waiting ones must start by themselves. Reported:
// freed-ready-max-s, from the deletions to the last of them Ready.
func BenchmarkManyClusters(b *testing.B) {
	n := 40
	if v := os.Getenv("BENCH_CLUSTERS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err, "BENCH_CLUSTERS")
	}
	require.Greater(b, n, 10, "BENCH_CLUSTERS must exceed 10: the capacity case keeps 10 waiting")
	b.Run("all-fit", func(b *testing.B) {
		for range b.N {
			op := operator.Start(b, env, operator.Options{ProviderName: testProvider, Environment: testEnvironment, StateDir: b.TempDir(), MaxClusters: n})
			cpu0, err := testenv.CPUSeconds(os.Getpid())
			require.NoError(b, err)
			t0 := time.Now()
			cls, created := createClusters(b, n)
			ready := awaitPhases(b, cls, created, n, 0)
			wall := time.Since(t0)
			cpu1, err := testenv.CPUSeconds(os.Getpid())
			require.NoError(b, err)
			var lat []float64
			for _, d := range ready {
				lat = append(lat, d.Seconds())
			}
			slices.Sort(lat)
			b.ReportMetric(testenv.Quantile(lat, 0.5), "p50-s")
			b.ReportMetric(testenv.Quantile(lat, 0.95), "p95-s")
			b.ReportMetric(lat[len(lat)-1], "max-s")
			var rss, pss float64
			for _, cl := range cls {
				for _, pid := range op.Local.PIDs(cl.UID) {
					r, err := testenv.ProcKiB(pid, "status", "VmRSS:")
					require.NoError(b, err)
					p, err := testenv.ProcKiB(pid, "smaps_rollup", "Pss:")
					require.NoError(b, err)
					rss, pss = rss+float64(r), pss+float64(p)
				}
			}
			b.ReportMetric(rss/(1<<20), "clusters-rss-GiB")
			b.ReportMetric(pss/(1<<20), "clusters-pss-GiB")
			b.ReportMetric(cpu1-cpu0, "operator-cpu-s")
			b.ReportMetric((cpu1-cpu0)/wall.Seconds(), "operator-cores")
			hwm, err := testenv.ProcKiB(os.Getpid(), "status", "VmHWM:")
			require.NoError(b, err)
			b.ReportMetric(float64(hwm)/1024, "operator-peak-rss-MiB")
			deleteClusters(b, cls)
		}
	})
	b.Run("capacity", func(b *testing.B) {
		for range b.N {
			limit := n - 10
			operator.Start(b, env, operator.Options{ProviderName: testProvider, Environment: testEnvironment, StateDir: b.TempDir(), MaxClusters: limit})
			cls, created := createClusters(b, n)
			ready := awaitPhases(b, cls, created, limit, n-limit)
			var freed []*clustersv1alpha1.Cluster
			for _, cl := range cls {
				if _, ok := ready[cl.Name]; ok && len(freed) < n-limit {
					freed = append(freed, cl)
				}
			}
			t0 := time.Now()
			deleteClusters(b, freed)
			awaitPhases(b, cls, created, n-len(freed), 0)
			b.ReportMetric(time.Since(t0).Seconds(), "freed-ready-max-s")
			deleteClusters(b, cls)
		}
	})
}

// createClusters creates n Clusters of a new local ProviderConfig in a new namespace, 16 at a time,
// and returns them with their creation times.
func createClusters(b *testing.B, n int) ([]*clustersv1alpha1.Cluster, map[string]time.Time) {
	ns := env.Namespace(b)
	profileName := profile.Name(testEnvironment, testProvider, newProviderConfig(b).Name)
	cls := make([]*clustersv1alpha1.Cluster, n)
	created := make([]time.Time, n)
	errs := make([]error, n)
	testenv.Parallel(16, n, func(i int) {
		cls[i] = &clustersv1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("many-%02d", i)},
			Spec:       clustersv1alpha1.ClusterSpec{Profile: profileName, Tenancy: clustersv1alpha1.TenancyExclusive},
		}
		created[i] = time.Now()
		errs[i] = env.Client.Create(b.Context(), cls[i])
	})
	require.NoError(b, errors.Join(errs...))
	byName := map[string]time.Time{}
	for i, cl := range cls {
		byName[cl.Name] = created[i]
	}
	return cls, byName
}

// awaitPhases polls the Clusters every 250 ms until ready of them are Ready and waiting of them
// say CapacityExhausted, and returns, for each Ready one, the time from its creation to the poll
// that first saw it Ready.
func awaitPhases(b *testing.B, cls []*clustersv1alpha1.Cluster, created map[string]time.Time, ready, waiting int) map[string]time.Duration {
	seen := map[string]time.Duration{}
	deadline := time.Now().Add(manyWithin)
	for {
		list := &clustersv1alpha1.ClusterList{}
		require.NoError(b, env.Client.List(b.Context(), list, client.InNamespace(cls[0].Namespace)))
		nWaiting := 0
		var notReady []string
		for _, cl := range list.Items {
			p := meta.FindStatusCondition(cl.Status.Conditions, cluster.ConditionProvisioned)
			switch {
			case cl.Status.Phase == common.PhaseReady:
				if _, ok := seen[cl.Name]; !ok {
					seen[cl.Name] = time.Since(created[cl.Name])
				}
			case p != nil && p.Reason == backend.ReasonCapacityExhausted:
				nWaiting++
				delete(seen, cl.Name)
			default:
				delete(seen, cl.Name)
				notReady = append(notReady, cl.Name)
			}
		}
		if len(seen) == ready && nWaiting == waiting {
			return seen
		}
		if time.Now().After(deadline) {
			b.Fatalf("after %s: %d Ready (want %d), %d waiting for capacity (want %d); neither: %s",
				manyWithin, len(seen), ready, nWaiting, waiting, strings.Join(notReady, ", "))
		}
		time.Sleep(250 * time.Millisecond) // the poll interval, the latencies' resolution
	}
}

// deleteClusters deletes the Clusters and waits until they are gone.
func deleteClusters(b *testing.B, cls []*clustersv1alpha1.Cluster) {
	var wg sync.WaitGroup
	for _, cl := range cls {
		wg.Go(func() { _ = client.IgnoreNotFound(env.Client.Delete(b.Context(), cl)) })
	}
	wg.Wait()
	for _, cl := range cls {
		gone(b, cl)
	}
}
