package labeller

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	// The managers log through their own Logger option; this silences controller-runtime's
	// global logger, which would otherwise complain that it was never set.
	ctrl.SetLogger(logr.Discard())
	os.Exit(testenv.Main(m, &env))
}

// waitTimeout bounds every wait; pollInterval is how often a wait looks.
const (
	waitTimeout  = 30 * time.Second
	pollInterval = 20 * time.Millisecond
)

// instanceLabel partitions AccessRequests between labeller instances: each instance's selector
// is instanceLabel=<its name>, so instances never share an AccessRequest.
const instanceLabel = "labeller.test/instance"

// suiteInstance is the instance the package-level labeller (TestLabeller) serves.
const suiteInstance = "suite"

// newManager builds a manager on cfg with a labeller for instance (selector
// instanceLabel=instance). Requests carry the user agent "labeller-<instance>", so the fields a
// labeller writes are managed by that name.
func newManager(tb testing.TB, cfg *rest.Config, instance string, logger logr.Logger, workers int) ctrl.Manager {
	tb.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = "labeller-" + instance
	mgr := testenv.NewManager(tb, cfg, logger)
	sel, err := (&Config{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{instanceLabel: instance}}}).AsSelector()
	require.NoError(tb, err)
	require.NoError(tb, (&Reconciler{Selector: sel, MaxConcurrentReconciles: workers}).SetupWithManager(mgr))
	return mgr
}

// start runs mgr until tb ends and waits for its caches.
func start(tb testing.TB, mgr ctrl.Manager) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	tb.Cleanup(func() {
		cancel()
		assert.NoError(tb, <-done, "the manager failed")
	})
	require.True(tb, mgr.GetCache().WaitForCacheSync(ctx), "the caches did not sync")
}

// startLabeller starts a manager with a labeller for instance; it stops when t ends.
func startLabeller(t *testing.T, instance string) {
	t.Helper()
	start(t, newManager(t, env.Config, instance, testenv.Logger(t), 0))
}

// world is one test's namespace with a ClusterProfile and a Cluster of it.
type world struct {
	ns, provider, profile, cluster string
}

// newWorld creates a namespace, a ClusterProfile (cluster-scoped, so named after the namespace)
// and a Cluster of that profile.
func newWorld(t *testing.T) world {
	t.Helper()
	ns := env.Namespace(t)
	w := world{ns: ns, provider: "provider-" + ns, profile: "profile-" + ns, cluster: "cluster"}
	newProfile(t, w.profile, w.provider)
	newCluster(t, ns, w.cluster, w.profile)
	return w
}

func newProfile(t *testing.T, name, provider string) {
	t.Helper()
	require.NoError(t, env.Client.Create(context.Background(), &clustersv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: clustersv1alpha1.ClusterProfileSpec{
			ProviderRef:       common.LocalObjectReference{Name: provider},
			ProviderConfigRef: common.LocalObjectReference{Name: "config"},
		},
	}))
}

func newCluster(t testing.TB, ns, name, profile string) {
	t.Helper()
	require.NoError(t, env.Client.Create(context.Background(), &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyShared},
	}))
}

// newClusterRequest creates a ClusterRequest; with a non-empty cluster it is granted that
// Cluster (in its own namespace) right away.
func newClusterRequest(t testing.TB, ns, name, cluster string) *clustersv1alpha1.ClusterRequest {
	t.Helper()
	cr := &clustersv1alpha1.ClusterRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       clustersv1alpha1.ClusterRequestSpec{Purpose: "test"},
	}
	require.NoError(t, env.Client.Create(context.Background(), cr))
	if cluster != "" {
		grant(t, cr, cluster)
	}
	return cr
}

// grant answers cr with the Cluster named cluster, as the scheduler would.
func grant(t testing.TB, cr *clustersv1alpha1.ClusterRequest, cluster string) {
	t.Helper()
	base := cr.DeepCopy()
	cr.Status.Phase = common.PhaseGranted
	cr.Status.ObservedGeneration = cr.Generation
	cr.Status.Cluster = &common.ObjectReference{Name: cluster}
	require.NoError(t, env.Client.Status().Patch(context.Background(), cr, client.MergeFrom(base)))
}

// arOption shapes an AccessRequest before it is created.
type arOption func(*clustersv1alpha1.AccessRequest)

func clusterRef(name string) arOption {
	return func(ar *clustersv1alpha1.AccessRequest) { ar.Spec.ClusterRef = &common.ObjectReference{Name: name} }
}

func requestRef(name string) arOption {
	return func(ar *clustersv1alpha1.AccessRequest) { ar.Spec.RequestRef = &common.ObjectReference{Name: name} }
}

func withLabel(key, value string) arOption {
	return func(ar *clustersv1alpha1.AccessRequest) { ar.Labels[key] = value }
}

func withAnnotation(key, value string) arOption {
	return func(ar *clustersv1alpha1.AccessRequest) {
		if ar.Annotations == nil {
			ar.Annotations = map[string]string{}
		}
		ar.Annotations[key] = value
	}
}

// newAccessRequest creates a token AccessRequest of the suite instance.
func newAccessRequest(t testing.TB, ns, name string, opts ...arOption) *clustersv1alpha1.AccessRequest {
	t.Helper()
	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{instanceLabel: suiteInstance}},
		Spec:       clustersv1alpha1.AccessRequestSpec{Token: &clustersv1alpha1.TokenConfig{}},
	}
	for _, o := range opts {
		o(ar)
	}
	require.NoError(t, env.Client.Create(context.Background(), ar))
	return ar
}

// waitFor polls the AccessRequest until ok holds and returns it.
func waitFor(t *testing.T, ar *clustersv1alpha1.AccessRequest, what string, ok func(*clustersv1alpha1.AccessRequest) bool) *clustersv1alpha1.AccessRequest {
	t.Helper()
	got := &clustersv1alpha1.AccessRequest{}
	require.Eventually(t, func() bool {
		return env.Client.Get(context.Background(), client.ObjectKeyFromObject(ar), got) == nil && ok(got)
	}, waitTimeout, pollInterval, "AccessRequest %s never %s; last seen: labels %v, status %+v",
		client.ObjectKeyFromObject(ar), what, got.Labels, got.Status)
	return got
}

// waitLabelled waits until ar carries both labels and is handed to its provider (the status
// PATCH follows the labels PATCH: phase Pending for its generation, ProviderResolved True),
// checks them and returns the labelled AccessRequest.
func waitLabelled(t *testing.T, ar *clustersv1alpha1.AccessRequest, w world) *clustersv1alpha1.AccessRequest {
	t.Helper()
	got := waitFor(t, ar, "got labelled and Pending", func(ar *clustersv1alpha1.AccessRequest) bool {
		c := meta.FindStatusCondition(ar.Status.Conditions, ConditionProviderResolved)
		return !lacksLabel(ar) && c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == ar.Generation
	})
	assert.Equal(t, w.provider, got.Labels[clustersv1alpha1.ProviderLabel])
	assert.Equal(t, w.profile, got.Labels[clustersv1alpha1.ProfileLabel])
	requireCondition(t, got, metav1.ConditionTrue, ReasonResolved)
	return got
}

// waitCondition waits until ar's ProviderResolved condition has reason, and checks the rest of
// the status the labeller writes.
func waitCondition(t *testing.T, ar *clustersv1alpha1.AccessRequest, reason string) *clustersv1alpha1.AccessRequest {
	t.Helper()
	got := waitFor(t, ar, "got reason "+reason, func(ar *clustersv1alpha1.AccessRequest) bool {
		c := meta.FindStatusCondition(ar.Status.Conditions, ConditionProviderResolved)
		return c != nil && c.Reason == reason
	})
	requireCondition(t, got, metav1.ConditionFalse, reason)
	assert.True(t, lacksLabel(got), "a waiting AccessRequest is not labelled")
	return got
}

func requireCondition(t *testing.T, ar *clustersv1alpha1.AccessRequest, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(ar.Status.Conditions, ConditionProviderResolved)
	require.NotNil(t, c, "no %s condition", ConditionProviderResolved)
	assert.Equal(t, status, c.Status)
	assert.Equal(t, reason, c.Reason)
	assert.NotEmpty(t, c.Message)
	assert.Equal(t, ar.Generation, c.ObservedGeneration)
	assert.Equal(t, ar.Generation, ar.Status.ObservedGeneration)
	assert.Equal(t, common.PhasePending, ar.Status.Phase)
}

// requireUntouched proves that the suite labeller has seen the AccessRequests and left them
// alone. It creates a sentinel the labeller does label: the informer delivers events in order, so
// once the sentinel is labelled, the labeller has processed the events of everything written
// before it. Then each AccessRequest must be unchanged (same resourceVersion).
func requireUntouched(t *testing.T, w world, ars ...*clustersv1alpha1.AccessRequest) {
	t.Helper()
	sentinel := newAccessRequest(t, w.ns, fmt.Sprintf("sentinel-%d", time.Now().UnixNano()), clusterRef(w.cluster))
	waitLabelled(t, sentinel, w)
	for _, ar := range ars {
		got := &clustersv1alpha1.AccessRequest{}
		require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(ar), got))
		assert.Equal(t, ar.ResourceVersion, got.ResourceVersion, "%s was touched: labels %v, status %+v", ar.Name, got.Labels, got.Status)
	}
}
