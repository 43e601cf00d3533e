package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// Sizes of BenchmarkSchedule: the figure.
const (
	benchRequests      = 1000
	benchClusters      = 100
	benchTenancyCount  = 10
	benchSetupWorkers  = 8
	benchPurpose       = "bench"
	benchClusterPrefix = "cluster-"
)

// BenchmarkSchedule answers benchRequests pre-created ClusterRequests of a Shared purpose with
// tenancyCount benchTenancyCount against benchClusters existing Clusters, with a scheduler
// (default workers) started after they exist. The time runs from the manager's start until the
// last Granted status was written. Requests of the scheduler's manager are counted by verb at its
// transport; afterwards every request must be Granted and every Cluster serve exactly
// benchTenancyCount requests (the Balanced spread). Each of b.N iterations schedules a fresh set.
//
// For scale, the same run has a raw client do a grant's three API writes (the request's finalizer,
// the Cluster's finalizer, the Granted status) for as many fresh requests over as many fresh
// Clusters, from as many goroutines as the scheduler has workers, half before and half after
// the scheduler: rawGrants/s is what the API server allows for that work on this machine.
func BenchmarkSchedule(b *testing.B) {
	var total, steady, raw time.Duration
	var counts map[string]int64
	for range b.N {
		b.StopTimer()
		ns, cfg := benchSetup(b)
		rawNS, rawReqs := rawSetup(b)
		raw += rawGrantLoop(b, rawNS, rawReqs[:benchRequests/2], 0)
		b.StartTimer()
		d, st, c := runBench(b, cfg)
		b.StopTimer()
		raw += rawGrantLoop(b, rawNS, rawReqs[benchRequests/2:], benchRequests/2)
		verifySpread(b, ns)
		total += d
		steady += st
		counts = c
	}
	n := float64(benchRequests * b.N)
	b.ReportMetric(n/total.Seconds(), "grants/s")
	b.ReportMetric(float64((benchRequests-1)*b.N)/steady.Seconds(), "steady-grants/s")
	b.ReportMetric(n/raw.Seconds(), "rawGrants/s")
	for _, verb := range []string{"GET", "LIST", "WATCH", "PATCH", "statusPATCH", "POST", "other"} {
		b.ReportMetric(float64(counts[verb])/benchRequests, verb+"/grant")
	}
	b.Logf("requests of the scheduler's manager in the last run: %v", counts)
}

// benchSetup creates a namespace with benchClusters Clusters of the bench purpose and
// benchRequests ClusterRequests, and returns the scheduler configuration that selects them.
func benchSetup(b *testing.B) (string, *Config) {
	ctx := context.Background()
	ns := env.Namespace(b)
	mine := map[string]string{testLabel: ns}
	testenv.Parallel(benchSetupWorkers, benchClusters, func(i int) {
		require.NoError(b, env.Client.Create(ctx, &clustersv1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s%03d", benchClusterPrefix, i), Labels: mine},
			Spec:       clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyShared, Purposes: []string{benchPurpose}},
		}))
	})
	testenv.Parallel(benchSetupWorkers, benchRequests, func(i int) {
		require.NoError(b, env.Client.Create(ctx, &clustersv1alpha1.ClusterRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("request-%04d", i), Labels: mine},
			Spec:       clustersv1alpha1.ClusterRequestSpec{Purpose: benchPurpose},
		}))
	})
	pm := shared(benchTenancyCount)
	pm.Template.Metadata.Labels = map[string]string{testLabel: ns}
	cfg := &Config{
		Selectors:       Selectors{Clusters: &metav1.LabelSelector{MatchLabels: mine}, Requests: &metav1.LabelSelector{MatchLabels: mine}},
		PurposeMappings: map[string]*PurposeMapping{benchPurpose: pm},
	}
	cfg.Default()
	require.NoError(b, cfg.Validate())
	return ns, cfg
}

// rawSetup creates, in a namespace of their own, benchClusters Clusters (each with a finalizer, so
// that a JSON patch can append to the list) and benchRequests ClusterRequests for the raw loop.
func rawSetup(b *testing.B) (string, []*clustersv1alpha1.ClusterRequest) {
	ctx := context.Background()
	ns := env.Namespace(b)
	testenv.Parallel(benchSetupWorkers, benchClusters, func(i int) {
		require.NoError(b, env.Client.Create(ctx, &clustersv1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s%03d", benchClusterPrefix, i), Finalizers: []string{"bench/hold"}},
			Spec:       clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyShared, Purposes: []string{benchPurpose}},
		}))
	})
	reqs := make([]*clustersv1alpha1.ClusterRequest, benchRequests)
	testenv.Parallel(benchSetupWorkers, benchRequests, func(i int) {
		reqs[i] = &clustersv1alpha1.ClusterRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("raw-%04d", i)},
			Spec:       clustersv1alpha1.ClusterRequestSpec{Purpose: benchPurpose},
		}
		require.NoError(b, env.Client.Create(ctx, reqs[i]))
	})
	return ns, reqs
}

// rawGrantLoop does a grant's three writes for each of reqs (the i-th on Cluster (offset+i) mod
// benchClusters) from DefaultMaxConcurrentReconciles goroutines and returns how long it took: an
// optimistically locked merge patch of the request's finalizer, a JSON patch appending the
// request finalizer to the Cluster, and a status merge patch.
func rawGrantLoop(b *testing.B, ns string, reqs []*clustersv1alpha1.ClusterRequest, offset int) time.Duration {
	ctx := context.Background()
	c, err := client.New(env.Config, client.Options{Scheme: testenv.Scheme})
	require.NoError(b, err)
	start := time.Now()
	testenv.Parallel(DefaultMaxConcurrentReconciles, len(reqs), func(i int) {
		cr := reqs[i]
		base := cr.DeepCopy()
		cr.Finalizers = append(cr.Finalizers, Finalizer)
		require.NoError(b, c.Patch(ctx, cr, kit.LockedMergeFrom(base)))
		cl := &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s%03d", benchClusterPrefix, (offset+i)%benchClusters)}}
		add := fmt.Sprintf(`[{"op":"add","path":"/metadata/finalizers/-","value":%q}]`, RequestFinalizer(cr.UID))
		require.NoError(b, c.Patch(ctx, cl, client.RawPatch(types.JSONPatchType, []byte(add))))
		base = cr.DeepCopy()
		setGranted(cr, cl, "shared")
		require.NoError(b, c.Status().Patch(ctx, cr, client.MergeFrom(base)))
	})
	return time.Since(start)
}

// runBench runs a scheduler until it has written benchRequests status patches and returns the
// time from its start, the time from the first status patch to the last, and its requests.
func runBench(b *testing.B, cfg *Config) (time.Duration, time.Duration, map[string]int64) {
	counter := testenv.NewRequestCounter("statusPATCH", benchRequests)
	restCfg := rest.CopyConfig(env.Config)
	restCfg.WrapTransport = counter.Wrap
	mgr := testenv.NewManager(b, restCfg, logr.Discard())
	require.NoError(b, (&Reconciler{Config: cfg}).SetupWithManager(mgr))
	elapsed := testenv.RunUntil(b, mgr, counter.Finished(), 5*time.Minute)
	return elapsed, counter.Steady(), counter.Snapshot()
}

// verifySpread checks, outside the timing, that every request is Granted and every Cluster serves
// exactly benchTenancyCount of them, and that no Cluster was created.
func verifySpread(b *testing.B, ns string) {
	ctx := context.Background()
	crs := &clustersv1alpha1.ClusterRequestList{}
	require.NoError(b, env.Client.List(ctx, crs, client.InNamespace(ns)))
	require.Len(b, crs.Items, benchRequests)
	for _, cr := range crs.Items {
		require.Equal(b, common.PhaseGranted, cr.Status.Phase, "%s", cr.Name)
	}
	cls := &clustersv1alpha1.ClusterList{}
	require.NoError(b, env.Client.List(ctx, cls, client.InNamespace(ns)))
	require.Len(b, cls.Items, benchClusters, "no Cluster is created while the existing ones have room")
	for i := range cls.Items {
		require.Equal(b, benchTenancyCount, TenancyCount(&cls.Items[i]), "%s", cls.Items[i].Name)
	}
}
