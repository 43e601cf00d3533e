package manager

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

const testProvider = "test-provider"

// testKinds routes Clusters by spec.profile and AccessRequests by their profile label when the
// provider label is testProvider, as the operator does.
func testKinds() []Kind {
	return []Kind{
		{
			Name:   "cluster",
			Object: &clustersv1alpha1.Cluster{},
			Key:    func(o client.Object) string { return o.(*clustersv1alpha1.Cluster).Spec.Profile },
		},
		{
			Name:   "accessrequest",
			Object: &clustersv1alpha1.AccessRequest{},
			Key: func(o client.Object) string {
				l := o.GetLabels()
				if l[clustersv1alpha1.ProviderLabel] != testProvider {
					return ""
				}
				return l[clustersv1alpha1.ProfileLabel]
			},
		},
	}
}

// startEngine starts a shared cache and an engine on it; both stop when the test ends, and the
// cleanup waits for them.
func startEngine(t testing.TB, c cache.Cache, opts Options) *Engine {
	t.Helper()
	if c == nil {
		var err error
		c, err = cache.New(env.Config, cache.Options{Scheme: testenv.Scheme})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if opts.Kinds == nil {
		opts.Kinds = testKinds()
	}
	opts.Scheme = testenv.Scheme
	e, err := New(ctx, c, opts)
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = c.Start(ctx) }()
	go func() { defer wg.Done(); require.NoError(t, e.Start(ctx)) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	select {
	case <-e.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the engine did not become ready")
	}
	return e
}

// recorder is a reconciler that records what it reconciled.
type recorder struct {
	name string
	mu   sync.Mutex
	seen map[types.NamespacedName]int
	// afterStop is set by a test once StopProfile returned; a reconcile after it is a violation.
	afterStop  atomic.Bool
	violations atomic.Int32
	// hook, if set, runs inside Reconcile.
	hook func(ctx context.Context, req reconcile.Request) error
}

func newRecorder(name string) *recorder {
	return &recorder{name: name, seen: map[types.NamespacedName]int{}}
}

func (r *recorder) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if r.afterStop.Load() {
		r.violations.Add(1)
	}
	r.mu.Lock()
	r.seen[req.NamespacedName]++
	r.mu.Unlock()
	if r.hook != nil {
		return reconcile.Result{}, r.hook(ctx, req)
	}
	return reconcile.Result{}, nil
}

func (r *recorder) count(key types.NamespacedName) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[key]
}

func (r *recorder) keys() map[types.NamespacedName]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[types.NamespacedName]int, len(r.seen))
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}

// waitSeen waits until r reconciled key at least once.
func waitSeen(t testing.TB, r *recorder, key types.NamespacedName) {
	t.Helper()
	require.Eventually(t, func() bool { return r.count(key) > 0 }, 30*time.Second, 5*time.Millisecond,
		"%s never reconciled %s", r.name, key)
}

func profileOf(name string, hash string, clusters, accessRequests reconcile.Reconciler) Profile {
	p := Profile{Name: name, Hash: hash, Reconcilers: map[string]reconcile.Reconciler{}}
	if clusters != nil {
		p.Reconcilers["cluster"] = clusters
	}
	if accessRequests != nil {
		p.Reconcilers["accessrequest"] = accessRequests
	}
	return p
}

func newCluster(t testing.TB, ns, name, profile string) types.NamespacedName {
	t.Helper()
	c := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyShared},
	}
	require.NoError(t, env.Client.Create(context.Background(), c))
	return client.ObjectKeyFromObject(c)
}

func newAccessRequest(t testing.TB, ns, name string, labels map[string]string) *clustersv1alpha1.AccessRequest {
	t.Helper()
	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: clustersv1alpha1.AccessRequestSpec{
			RequestRef: &common.ObjectReference{Name: "r", Namespace: ns},
			Token:      &clustersv1alpha1.TokenConfig{},
		},
	}
	require.NoError(t, env.Client.Create(context.Background(), ar))
	return ar
}

var profileSeq atomic.Int64

// uniqueProfile returns a profile name no other test uses: every test's engine sees the objects
// of all tests, so names must not repeat.
func uniqueProfile(base string) string {
	return fmt.Sprintf("%s-%d", base, profileSeq.Add(1))
}
