package accessrequest_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/test/idp"
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
// when many arrive at once (they queue behind the profile's workers: the operator's default
// number, profile.DefaultWorkers; BENCH_AR_WORKERS overrides it).
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkGrant -benchtime 1x ./controllers/accessrequest/
func BenchmarkGrant(b *testing.B) {
	counter := &clusterRequests{byVerb: map[string]int{}}
	workers := profile.DefaultWorkers
	if n, err := strconv.Atoi(os.Getenv("BENCH_AR_WORKERS")); err == nil {
		workers.AccessRequest = n
	}
	operator.Start(b, env, operator.Options{ProviderName: testProvider, Labeller: true, Workers: workers,
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
	s := sortedMillis(ds)
	b.ReportMetric(nearestRank(s, 0.50), "p50-ms")
	b.ReportMetric(nearestRank(s, 0.99), "p99-ms")
	b.ReportMetric(s[len(s)-1], "max-ms")
}

// sortedMillis is ds in milliseconds, sorted.
func sortedMillis(ds []time.Duration) []float64 {
	s := make([]float64, len(ds))
	for i, d := range ds {
		s[i] = float64(d) / float64(time.Millisecond)
	}
	slices.Sort(s)
	return s
}

// nearestRank is the p-quantile of sorted by the nearest-rank method.
func nearestRank(sorted []float64, p float64) float64 {
	return sorted[int(math.Ceil(p*float64(len(sorted))))-1]
}

// clusterRequests counts the provider's requests to clusters by method.
type clusterRequests struct {
	mu     sync.Mutex
	byVerb map[string]int
}

func (c *clusterRequests) wrap(rt http.RoundTripper) http.RoundTripper {
	return testenv.RoundTripperFunc(func(r *http.Request) (*http.Response, error) {
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

// benchOIDCRequests is how many OIDC AccessRequests BenchmarkOIDCGrant creates.
const benchOIDCRequests = 20

// BenchmarkOIDCGrant measures OIDC AccessRequest create → Granted and create → first JWT the
// cluster accepts, one request at a time, against one Ready local cluster and a test identity
// provider. Every request has a client ID of its own on the same issuer, so every grant changes
// the cluster's authentication configuration and its API server reloads it. The first accepted
// JWT is found by presenting a fresh token (a SelfSubjectReview) every 20 ms from the Create call
// on: a measurement, not a synchronisation.
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkOIDCGrant -benchtime 1x ./controllers/accessrequest/
func BenchmarkOIDCGrant(b *testing.B) {
	operator.Start(b, env, operator.Options{ProviderName: testProvider, Labeller: true})
	provider := idp.Start(b)
	ns := env.Namespace(b)
	pc := &providersv1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-oidc-"},
		Spec:       providersv1alpha1.ProviderConfigSpec{Backend: providersv1alpha1.BackendLocal, OIDC: &providersv1alpha1.OIDCSettings{IssuerCABundle: provider.CAPEM, AllowPrivateIssuers: true}},
	}
	require.NoError(b, env.Client.Create(b.Context(), pc))
	cl := newCluster(b, ns, "bench-oidc", "default."+testProvider+"."+pc.Name)
	waitClusterReady(b, cl)

	var granted, accepted []time.Duration
	b.ResetTimer()
	for i := range b.N {
		for j := range benchOIDCRequests {
			name, clientID := fmt.Sprintf("oidc-%d-%d", i, j), fmt.Sprintf("client-%d-%d", i, j)
			g, a := grantOIDCOnce(b, provider, ns, cl.Name, name, clientID)
			granted, accepted = append(granted, g), append(accepted, a)
		}
	}
	b.StopTimer()
	reportQuantilesAs(b, granted, "granted")
	reportQuantilesAs(b, accepted, "jwt")
}

// grantOIDCOnce creates one OIDC request and returns the times from its Create call until it is
// Granted and until the cluster accepts a JWT for its client ID.
func grantOIDCOnce(b *testing.B, provider *idp.IdP, ns, cluster, name, clientID string) (time.Duration, time.Duration) {
	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clustersv1alpha1.AccessRequestSpec{ClusterRef: &common.ObjectReference{Name: cluster}, OIDC: &clustersv1alpha1.OIDCConfig{
			OIDCProviderConfig: common.OIDCProviderConfig{Name: "idp", Issuer: provider.Issuer, ClientID: clientID},
		}},
	}
	token := provider.Token(b, clientID, "someone", nil)
	var host string
	var ca []byte
	start := time.Now()
	require.NoError(b, env.Client.Create(b.Context(), ar))
	var grantedAt, acceptedAt time.Duration
	deadline := time.Now().Add(within)
	for (grantedAt == 0 || acceptedAt == 0) && time.Now().Before(deadline) {
		if grantedAt == 0 {
			got := &clustersv1alpha1.AccessRequest{}
			if env.Client.Get(b.Context(), client.ObjectKeyFromObject(ar), got) == nil && got.Status.Phase == common.PhaseGranted {
				grantedAt = time.Since(start)
				s := secretOf(b, got)
				host, ca = string(s.Data[clustersv1alpha1.SecretKeyHost]), s.Data[clustersv1alpha1.SecretKeyCACert]
			}
		}
		if acceptedAt == 0 && host != "" {
			cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: host, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}})
			if _, err := cs.AuthenticationV1().SelfSubjectReviews().Create(b.Context(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{}); err == nil {
				acceptedAt = time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond) // the measurement's resolution
	}
	require.NotZero(b, grantedAt, "%s was not Granted within %s", name, within)
	require.NotZero(b, acceptedAt, "the cluster did not accept a JWT for %s within %s", clientID, within)
	return grantedAt, acceptedAt
}

// reportQuantilesAs reports p50, p99 and the maximum of ds in milliseconds, named after what.
func reportQuantilesAs(b *testing.B, ds []time.Duration, what string) {
	s := sortedMillis(ds)
	b.ReportMetric(nearestRank(s, 0.50), what+"-p50-ms")
	b.ReportMetric(nearestRank(s, 0.99), what+"-p99-ms")
	b.ReportMetric(s[len(s)-1], what+"-max-ms")
}
