package local

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// The load of BenchmarkNoisyNeighbour.
const (
	noisyObjects     = 100       // ConfigMaps in the noisy cluster
	noisyObjectBytes = 500 << 10 // of about 500 KiB each: 50 MiB per LIST
	noisyClients     = 8         // goroutines listing them in a loop
	noisyFor         = 30 * time.Second
	quietFor         = 10 * time.Second
	victimEvery      = 100 * time.Millisecond
	victimTimeout    = 5 * time.Second
)

// BenchmarkNoisyNeighbour: one tenant hammers its cluster A with LISTs of large objects (8
// clients, each listing 100 ConfigMaps of 500 KiB in a loop, as a ServiceAccount: API Priority
// and Fairness applies to it, unlike to system:masters) while a client of another cluster B,
// and another user of A, each make a small request every 100 ms. It reports the small requests'
// failures and latency, first with the clusters quiet, then under the load:
//
//	KUBEBUILDER_ASSETS=$PWD/bin/k8s/1.37.1-etcd3.7.0 go test -run '^$' -bench BenchmarkNoisyNeighbour -benchtime 1x -timeout 30m ./backend/local/
//
// Goal (issue 25, item 9): the neighbour B sees no failed request.
func BenchmarkNoisyNeighbour(b *testing.B) {
	h := startBenchBackend(b, 2, nil)
	ctx := b.Context()
	a, v := newCluster("noisy"), newCluster("neighbour")
	for _, cl := range []*clustersv1alpha1.Cluster{a, v} {
		_, _, err := h.awaitReady(ctx, cl)
		require.NoError(b, err)
	}
	adminA, err := h.b.AdminConfig(ctx, a)
	require.NoError(b, err)
	adminB, err := h.b.AdminConfig(ctx, v)
	require.NoError(b, err)
	csA := kubernetes.NewForConfigOrDie(unthrottled(adminA))

	// The noisy tenant's data.
	payload := strings.Repeat("x", noisyObjectBytes)
	for i := range noisyObjects {
		_, err := csA.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "big-" + strconv.Itoa(i)},
			Data:       map[string]string{"payload": payload},
		}, metav1.CreateOptions{})
		require.NoError(b, err)
	}
	noisy := serviceAccountConfig(b, adminA, "noisy")
	otherUser := serviceAccountConfig(b, adminA, "other-user")
	neighbour := serviceAccountConfig(b, adminB, "user")

	for b.Loop() {
		quietB, quietA := probe(ctx, neighbour, otherUser, quietFor)

		var lists, throttled, failed atomic.Int64
		loadCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range noisyClients {
			wg.Go(func() {
				cs := kubernetes.NewForConfigOrDie(unthrottled(noisy))
				for loadCtx.Err() == nil {
					_, err := cs.CoreV1().ConfigMaps("default").List(loadCtx, metav1.ListOptions{})
					switch {
					case err == nil:
						lists.Add(1)
					case loadCtx.Err() != nil:
					case isTooMany(err):
						throttled.Add(1)
					default:
						failed.Add(1)
					}
				}
			})
		}
		loadB, loadA := probe(ctx, neighbour, otherUser, noisyFor)
		stop()
		wg.Wait()

		quietB.report(b, "quiet-neighbour")
		quietA.report(b, "quiet-same-cluster")
		loadB.report(b, "neighbour")
		loadA.report(b, "same-cluster")
		b.ReportMetric(float64(lists.Load())/noisyFor.Seconds(), "noisy-lists/s")
		b.ReportMetric(float64(throttled.Load()), "noisy-429")
		b.ReportMetric(float64(failed.Load()), "noisy-failed")
	}
}

// probed is what one prober saw: latencies of the requests that succeeded, and failures.
type probed struct {
	latencies []time.Duration
	failures  int
	firstErr  error
}

func (p probed) report(b *testing.B, name string) {
	ms := make([]float64, len(p.latencies))
	for i, d := range p.latencies {
		ms[i] = float64(d.Microseconds()) / 1000
	}
	slices.Sort(ms)
	b.ReportMetric(float64(p.failures), name+"-failed")
	if len(ms) > 0 {
		b.ReportMetric(testenv.Quantile(ms, 0.50), name+"-p50-ms")
		b.ReportMetric(testenv.Quantile(ms, 0.99), name+"-p99-ms")
	}
	if p.firstErr != nil {
		b.Logf("%s: first failure: %v", name, p.firstErr)
	}
}

// probe makes a small request (GET the namespace default) every victimEvery for d, with each of
// the two configs in parallel, each bounded by victimTimeout.
func probe(ctx context.Context, neighbour, sameCluster *rest.Config, d time.Duration) (probed, probed) {
	var out [2]probed
	var wg sync.WaitGroup
	for i, cfg := range []*rest.Config{neighbour, sameCluster} {
		wg.Go(func() {
			cs := kubernetes.NewForConfigOrDie(unthrottled(cfg))
			tick := time.NewTicker(victimEvery)
			defer tick.Stop()
			end := time.After(d)
			for {
				select {
				case <-end:
					return
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				rctx, cancel := context.WithTimeout(ctx, victimTimeout)
				start := time.Now()
				_, err := cs.CoreV1().Namespaces().Get(rctx, "default", metav1.GetOptions{})
				cancel()
				if err != nil {
					out[i].failures++
					if out[i].firstErr == nil {
						out[i].firstErr = err
					}
					continue
				}
				out[i].latencies = append(out[i].latencies, time.Since(start))
			}
		})
	}
	wg.Wait()
	return out[0], out[1]
}

// serviceAccountConfig makes a ServiceAccount name in the cluster of admin, bound to the stock
// ClusterRole view, and returns a config that authenticates as it with a TokenRequest token.
func serviceAccountConfig(b *testing.B, admin *rest.Config, name string) *rest.Config {
	ctx := b.Context()
	cs := kubernetes.NewForConfigOrDie(admin)
	_, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(b, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: name}},
	}, metav1.CreateOptions{})
	require.NoError(b, err)
	var tr *authenticationv1.TokenRequest
	require.Eventually(b, func() bool { // the token controller needs the ServiceAccount in its cache
		tr, err = cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "a token for %s", name)
	cfg := rest.AnonymousClientConfig(admin)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

// unthrottled is cfg without client-side rate limits: the server alone decides.
func unthrottled(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	return c
}

func isTooMany(err error) bool {
	var status interface{ Status() metav1.Status }
	return errors.As(err, &status) && status.Status().Code == 429
}
