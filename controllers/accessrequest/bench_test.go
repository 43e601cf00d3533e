package accessrequest_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/test/operator"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// benchRequests is how many AccessRequests each variant of BenchmarkGrant creates.
const benchRequests = 200

// BenchmarkGrant measures AccessRequest create → Granted against one Ready local cluster, with the
// central labeller and the provider running as in production (the requests are created without
// labels). Each request asks for one ClusterRole and one Role in a namespace. It also counts the
// requests the provider sends to the cluster's API server, at its transport.
//
// sequential: one request at a time, each created once the previous one is Granted: the latency
// of a single grant.
// burst: benchRequests requests created as fast as one client can, then waited for: the latency
// when many arrive at once (they queue behind the profile's one worker).
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkGrant -benchtime 1x ./controllers/accessrequest/
func BenchmarkGrant(b *testing.B) {
	counter := &clusterRequests{byVerb: map[string]int{}}
	operator.Start(b, env, operator.Options{ProviderName: testProvider, Labeller: true,
		Access: accessrequest.Options{WrapTransport: counter.wrap}})
	ns := env.Namespace(b)
	profileName := newProviderConfig(b)
	cl := newCluster(b, ns, "bench", profileName)
	waitClusterReady(b, cl)

	for _, variant := range []string{"sequential", "burst"} {
		b.Run(variant, func(b *testing.B) {
			var lat []time.Duration
			counter.reset()
			for i := range b.N {
				prefix := fmt.Sprintf("%s-%d-", variant, i)
				lat = append(lat, grantAll(b, ns, cl.Name, prefix, variant == "sequential")...)
			}
			reportQuantiles(b, lat)
			n := float64(len(lat))
			total := 0
			for verb, c := range counter.snapshot() {
				b.ReportMetric(float64(c)/n, verb+"/grant")
				total += c
			}
			b.ReportMetric(float64(total)/n, "requests/grant")
		})
	}
}

// grantAll creates benchRequests AccessRequests named prefix<i> and returns, for each, the time from
// its Create call to the first watch event that shows it Granted.
func grantAll(b *testing.B, ns, cluster, prefix string, sequential bool) []time.Duration {
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: testenv.Scheme})
	require.NoError(b, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	w, err := wc.Watch(ctx, &clustersv1alpha1.AccessRequestList{}, client.InNamespace(ns))
	require.NoError(b, err)
	defer w.Stop()

	var mu sync.Mutex
	created := map[string]time.Time{}
	granted := map[string]time.Duration{}
	done := make(chan string, benchRequests)
	go func() {
		for ev := range w.ResultChan() {
			ar, ok := ev.Object.(*clustersv1alpha1.AccessRequest)
			if !ok || ev.Type == watch.Deleted || ar.Status.Phase != common.PhaseGranted {
				continue
			}
			now := time.Now()
			mu.Lock()
			start, mine := created[ar.Name]
			_, seen := granted[ar.Name]
			if mine && !seen {
				granted[ar.Name] = now.Sub(start)
				done <- ar.Name
			}
			mu.Unlock()
		}
	}()
	create := func(i int) {
		ar := &clustersv1alpha1.AccessRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s%d", prefix, i)},
			Spec: clustersv1alpha1.AccessRequestSpec{
				ClusterRef: &common.ObjectReference{Name: cluster},
				Token: &clustersv1alpha1.TokenConfig{Permissions: []clustersv1alpha1.PermissionsRequest{
					{Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"namespaces"}, []string{"get"})}},
					{Namespace: "bench", Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"configmaps"}, []string{"*"})}},
				}},
			},
		}
		mu.Lock()
		created[ar.Name] = time.Now()
		mu.Unlock()
		require.NoError(b, env.Client.Create(ctx, ar))
	}
	wait := func() {
		select {
		case <-done:
		case <-ctx.Done():
			b.Fatalf("not every AccessRequest was Granted: %v", ctx.Err())
		}
	}
	b.StartTimer()
	for i := range benchRequests {
		create(i)
		if sequential {
			wait()
		}
	}
	if !sequential {
		for range benchRequests {
			wait()
		}
	}
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	out := make([]time.Duration, 0, len(granted))
	for _, d := range granted {
		out = append(out, d)
	}
	return out
}

func waitClusterReady(b *testing.B, cl *clustersv1alpha1.Cluster) {
	b.Helper()
	require.Eventually(b, func() bool {
		got := &clustersv1alpha1.Cluster{}
		return env.Client.Get(context.Background(), client.ObjectKeyFromObject(cl), got) == nil && got.Status.Phase == common.PhaseReady
	}, within, poll, "the Cluster is Ready")
}

// reportQuantiles reports p50, p99 and the maximum of ds in milliseconds.
func reportQuantiles(b *testing.B, ds []time.Duration) {
	s := make([]float64, len(ds))
	for i, d := range ds {
		s[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(s)
	q := func(p float64) float64 { return s[int(math.Ceil(p*float64(len(s))))-1] } // nearest rank
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(s[len(s)-1], "max-ms")
}

// clusterRequests counts the provider's requests to clusters by method.
type clusterRequests struct {
	mu     sync.Mutex
	byVerb map[string]int
}

func (c *clusterRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.byVerb[r.Method]++
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (c *clusterRequests) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byVerb = map[string]int{}
}

func (c *clusterRequests) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.byVerb))
	for k, v := range c.byVerb {
		out[k] = v
	}
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
