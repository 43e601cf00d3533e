package labeller

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// Sizes of BenchmarkLabeller.
const (
	benchAccessRequests = 2000 // half direct, half through a granted ClusterRequest
	benchClusters       = 100  // the AccessRequests are spread over these
	benchSetupWorkers   = 8    // parallel writers for the (untimed) setup
	benchInstance       = "bench"
)

// BenchmarkLabeller labels benchAccessRequests pre-created AccessRequests, half with
// spec.clusterRef and half through a granted ClusterRequest, with a labeller manager (default
// workers) started after they exist: the time runs from the manager's start until the last
// AccessRequest was handed to its provider (its status PATCH, phase Pending, answered: openMCP's
// handshake). In the same run, against the same API server, a raw client does the same two writes
// (the two labels, then phase Pending, each optimistically locked) on as many fresh AccessRequests
// of the same shape, at the labeller's concurrency (its worker count).
// Requests of the labeller's manager are counted by verb at its transport; the setup and the raw
// loop use other clients, and b.N iterations each label a fresh set.
func BenchmarkLabeller(b *testing.B) {
	var labelled, steady, raw time.Duration
	var counts map[string]int64
	for range b.N {
		b.StopTimer()
		ns := benchSetup(b)
		// Half of the raw loop runs before and half after the labeller, so that a change of
		// load on the (shared) machine weighs on both alike.
		raw += rawPatchLoop(b, ns, 0, benchAccessRequests/2)
		b.StartTimer()
		d, st, c := runLabeller(b, ns)
		steady += st
		b.StopTimer()
		raw += rawPatchLoop(b, ns, benchAccessRequests/2, benchAccessRequests)
		labelled += d
		counts = c
		verifyLabelled(b, ns)
	}
	n := float64(benchAccessRequests * b.N)
	labelledRate, rawRate := n/labelled.Seconds(), n/raw.Seconds()
	b.ReportMetric(labelledRate, "labelled/s")
	b.ReportMetric(rawRate, "rawPATCH/s")
	b.ReportMetric(labelledRate/rawRate, "ratio")
	// From the first labels PATCH to the last: without the manager's start and cache sync.
	steadyRate := float64((benchAccessRequests-1)*b.N) / steady.Seconds()
	b.ReportMetric(steadyRate, "steady-labelled/s")
	b.ReportMetric(steadyRate/rawRate, "steady-ratio")
	// counts are of the last iteration.
	for _, verb := range []string{"GET", "LIST", "WATCH", "PATCH", "statusPATCH", "other"} {
		b.ReportMetric(float64(counts[verb])/benchAccessRequests, verb+"/AR")
	}
	b.Logf("requests of the labeller's manager in the last run: %v", counts)
}

// benchSetup creates a namespace with a ClusterProfile, benchClusters Clusters and the
// AccessRequests to label, with the granted ClusterRequests of the indirect ones.
func benchSetup(b *testing.B) string {
	ctx := context.Background()
	ns := env.Namespace(b)
	profile := "bench-" + ns
	require.NoError(b, env.Client.Create(ctx, &clustersv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Name: profile},
		Spec: clustersv1alpha1.ClusterProfileSpec{
			ProviderRef:       common.LocalObjectReference{Name: "bench-provider"},
			ProviderConfigRef: common.LocalObjectReference{Name: "config"},
		},
	}))
	parallel(b, benchClusters, func(i int) {
		newCluster(b, ns, clusterName(i), profile)
	})
	parallel(b, benchAccessRequests, func(i int) {
		if i%2 == 0 {
			newAccessRequest(b, ns, arName(i), withLabel(instanceLabel, benchInstance), clusterRef(clusterName(i)))
			return
		}
		request := fmt.Sprintf("request-%d", i)
		newClusterRequest(b, ns, request, clusterName(i))
		newAccessRequest(b, ns, arName(i), withLabel(instanceLabel, benchInstance), requestRef(request))
	})
	return ns
}

func arName(i int) string { return fmt.Sprintf("ar-%d", i) }

func clusterName(i int) string { return fmt.Sprintf("cluster-%d", i%benchClusters) }

// parallel runs f(0..n-1) on benchSetupWorkers goroutines.
func parallel(b *testing.B, n int, f func(i int)) { testenv.Parallel(benchSetupWorkers, n, f) }

// rawPatchLoop creates the AccessRequests raw-from … raw-(to-1), shaped like the bench ones but
// outside the labeller's selector (not timed), then does the labeller's two writes on each, the
// two labels and then phase Pending, with optimistically locked merge patches like the
// labeller's, from as many goroutines as the labeller has workers
// (DefaultMaxConcurrentReconciles), and returns how long they took. The labeller is not running
// meanwhile.
func rawPatchLoop(b *testing.B, ns string, from, to int) time.Duration {
	ctx := context.Background()
	ars := make([]*clustersv1alpha1.AccessRequest, to-from)
	parallel(b, to-from, func(i int) {
		ars[i] = newAccessRequest(b, ns, fmt.Sprintf("raw-%d", from+i), withLabel(instanceLabel, "raw"), clusterRef(clusterName(from+i)))
	})
	c, err := client.New(env.Config, client.Options{Scheme: testenv.Scheme})
	require.NoError(b, err)
	start := time.Now()
	var failed atomic.Value
	testenv.Parallel(DefaultMaxConcurrentReconciles, len(ars), func(i int) {
		ar := ars[i]
		base := ar.DeepCopy()
		ar.Labels[clustersv1alpha1.ProviderLabel] = "bench-provider"
		ar.Labels[clustersv1alpha1.ProfileLabel] = "bench-profile"
		if err := c.Patch(ctx, ar, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			failed.Store(err)
			return
		}
		base = ar.DeepCopy()
		ar.Status.Phase, ar.Status.ObservedGeneration = common.PhasePending, ar.Generation
		if err := c.Status().Patch(ctx, ar, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
			failed.Store(err)
		}
	})
	d := time.Since(start)
	if err, _ := failed.Load().(error); err != nil {
		b.Fatalf("a raw PATCH failed: %v", err)
	}
	return d
}

// runLabeller starts a labeller manager for the bench instance, waits until it has answered a
// hand-over (status PATCH) for every AccessRequest, stops it, and returns the time from the start,
// the time from the first answered hand-over to the last, and the manager's requests by verb.
func runLabeller(b *testing.B, ns string) (time.Duration, time.Duration, map[string]int64) {
	counter := testenv.NewRequestCounter("statusPATCH", benchAccessRequests)
	cfg := rest.CopyConfig(env.Config)
	cfg.WrapTransport = counter.Wrap
	mgr := newManager(b, cfg, benchInstance, logr.Discard(), 0) // default workers
	elapsed := testenv.RunUntil(b, mgr, counter.Finished(), 5*time.Minute)
	return elapsed, counter.Steady(), counter.Snapshot()
}

// verifyLabelled checks, outside the timing, that every bench AccessRequest was prepared.
func verifyLabelled(b *testing.B, ns string) {
	list := &clustersv1alpha1.AccessRequestList{}
	require.NoError(b, env.Client.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{instanceLabel: benchInstance}))
	require.Len(b, list.Items, benchAccessRequests)
	for i := range list.Items {
		ar := &list.Items[i]
		require.False(b, lacksLabel(ar), "%s is not labelled", ar.Name)
		require.NotNil(b, ar.Spec.ClusterRef, "%s has no clusterRef", ar.Name)
		require.Equal(b, common.PhasePending, ar.Status.Phase, "%s is not handed to its provider", ar.Name)
		require.NotNil(b, meta.FindStatusCondition(ar.Status.Conditions, ConditionProviderResolved), "%s", ar.Name)
	}
}
