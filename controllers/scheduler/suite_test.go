package scheduler

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

// testLabel partitions the shared API server between tests: each test's scheduler selects only
// the Clusters and ClusterRequests labelled with its namespace.
const testLabel = "scheduler.test/ns"

// fixture is one test's namespace and the scheduler running for it.
type fixture struct {
	ns  string
	cfg *Config
	r   *Reconciler
}

// startScheduler creates a namespace and runs a scheduler with cfg, limited by selectors to the
// test's objects: every template gets the test label, and the global selectors require it (ANDed
// with any the test sets). The scheduler stops when t ends.
func startScheduler(t testing.TB, cfg *Config, opts ...func(*Reconciler)) *fixture {
	t.Helper()
	ns := env.Namespace(t)
	mine := map[string]string{testLabel: ns}
	cfg.Selectors.Clusters = withLabels(cfg.Selectors.Clusters, mine)
	cfg.Selectors.Requests = withLabels(cfg.Selectors.Requests, mine)
	for _, pm := range cfg.PurposeMappings {
		if pm.Template.Metadata.Labels == nil {
			pm.Template.Metadata.Labels = map[string]string{}
		}
		pm.Template.Metadata.Labels[testLabel] = ns
	}
	cfg.Default()
	require.NoError(t, cfg.Validate())
	return runScheduler(t, ns, cfg, env.Config, opts...)
}

// runScheduler runs a scheduler with cfg (already complete) on restCfg until t ends.
func runScheduler(t testing.TB, ns string, cfg *Config, restCfg *rest.Config, opts ...func(*Reconciler)) *fixture {
	t.Helper()
	logger := logr.Discard() // a benchmark's log is always printed
	if _, ok := t.(*testing.T); ok {
		logger = testenv.Logger(t)
	}
	mgr := testenv.NewManager(t, restCfg, logger)
	r := &Reconciler{Config: cfg}
	for _, o := range opts {
		o(r)
	}
	require.NoError(t, r.SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(context.Background())
	testenv.RunManager(t, ctx, cancel, mgr)
	require.True(t, mgr.GetCache().WaitForCacheSync(ctx), "the caches did not sync")
	return &fixture{ns: ns, cfg: cfg, r: r}
}

func withLabels(s *metav1.LabelSelector, l map[string]string) *metav1.LabelSelector {
	if s == nil {
		s = &metav1.LabelSelector{}
	}
	if s.MatchLabels == nil {
		s.MatchLabels = map[string]string{}
	}
	for k, v := range l {
		s.MatchLabels[k] = v
	}
	return s
}

// exclusive and shared are purpose mappings on profile "prof".
func exclusive() *PurposeMapping {
	return &PurposeMapping{Template: ClusterTemplate{Spec: clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyExclusive}}}
}

func shared(tenancyCount int) *PurposeMapping {
	return &PurposeMapping{TenancyCount: tenancyCount, Template: ClusterTemplate{Spec: clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyShared}}}
}

// request creates a ClusterRequest of purpose in the fixture's namespace, with the test label.
func (f *fixture) request(t testing.TB, name, purpose string, opts ...func(*clustersv1alpha1.ClusterRequest)) *clustersv1alpha1.ClusterRequest {
	t.Helper()
	cr := &clustersv1alpha1.ClusterRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: map[string]string{testLabel: f.ns}},
		Spec:       clustersv1alpha1.ClusterRequestSpec{Purpose: purpose},
	}
	for _, o := range opts {
		o(cr)
	}
	require.NoError(t, env.Client.Create(context.Background(), cr))
	require.NotEmpty(t, cr.UID, "the API server gives every request a UID")
	return cr
}

// cluster creates a Cluster of the fixture (test label) in ns with purposes, serving the requests
// whose UIDs are given.
func (f *fixture) cluster(t testing.TB, ns, name string, purposes []string, finalizers ...string) *clustersv1alpha1.Cluster {
	t.Helper()
	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{testLabel: f.ns}, Finalizers: finalizers},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: "prof", Tenancy: clustersv1alpha1.TenancyShared, Purposes: purposes},
	}
	require.NoError(t, env.Client.Create(context.Background(), cl))
	return cl
}

// awaitRequest polls the request until ok holds and returns it.
func awaitRequest(t testing.TB, cr *clustersv1alpha1.ClusterRequest, what string, ok func(*clustersv1alpha1.ClusterRequest) bool) *clustersv1alpha1.ClusterRequest {
	t.Helper()
	got := &clustersv1alpha1.ClusterRequest{}
	require.Eventually(t, func() bool {
		return env.Client.Get(context.Background(), client.ObjectKeyFromObject(cr), got) == nil && ok(got)
	}, waitTimeout, pollInterval, "ClusterRequest %s never %s; last seen: finalizers %v, status %+v",
		client.ObjectKeyFromObject(cr), what, got.Finalizers, got.Status)
	return got
}

// awaitGranted waits until cr is Granted and returns it with its Cluster.
func awaitGranted(t testing.TB, cr *clustersv1alpha1.ClusterRequest) (*clustersv1alpha1.ClusterRequest, *clustersv1alpha1.Cluster) {
	t.Helper()
	got := awaitRequest(t, cr, "Granted", func(cr *clustersv1alpha1.ClusterRequest) bool {
		return cr.Status.Phase == common.PhaseGranted && cr.Status.Cluster != nil
	})
	cl := &clustersv1alpha1.Cluster{}
	require.NoError(t, env.Client.Get(context.Background(), got.Status.Cluster.Key(got.Namespace), cl))
	assert.Contains(t, cl.Finalizers, RequestFinalizer(got.UID), "a granted Cluster carries the request's finalizer")
	assert.Contains(t, got.Finalizers, Finalizer)
	c := meta.FindStatusCondition(got.Status.Conditions, ConditionScheduled)
	if assert.NotNil(t, c) {
		assert.Equal(t, metav1.ConditionTrue, c.Status)
		assert.Equal(t, ReasonGranted, c.Reason)
	}
	assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
	return got, cl
}

// awaitPending waits until cr is Pending with the Scheduled condition's reason and returns the
// condition's message.
func awaitPending(t testing.TB, cr *clustersv1alpha1.ClusterRequest, reason string) string {
	t.Helper()
	got := awaitRequest(t, cr, "Pending with reason "+reason, func(cr *clustersv1alpha1.ClusterRequest) bool {
		c := meta.FindStatusCondition(cr.Status.Conditions, ConditionScheduled)
		return cr.Status.Phase == common.PhasePending && c != nil && c.Reason == reason
	})
	return meta.FindStatusCondition(got.Status.Conditions, ConditionScheduled).Message
}

// awaitGone waits until obj no longer exists.
func awaitGone(t testing.TB, obj client.Object) {
	t.Helper()
	require.Eventually(t, func() bool {
		err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj.DeepCopyObject().(client.Object))
		return apierrors.IsNotFound(err)
	}, waitTimeout, pollInterval, "%T %s is not gone; finalizers %v", obj, client.ObjectKeyFromObject(obj), obj.GetFinalizers())
}

// getCluster reads a Cluster.
func getCluster(t testing.TB, ns, name string) *clustersv1alpha1.Cluster {
	t.Helper()
	cl := &clustersv1alpha1.Cluster{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cl))
	return cl
}

// update changes obj with fn and a merge patch, retrying on nothing: tests own their objects.
func update[T client.Object](t testing.TB, obj T, fn func(T)) {
	t.Helper()
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	base := obj.DeepCopyObject().(T)
	fn(obj)
	require.NoError(t, env.Client.Patch(context.Background(), obj, client.MergeFrom(base)))
}

func remove(t testing.TB, obj client.Object) {
	t.Helper()
	require.NoError(t, env.Client.Delete(context.Background(), obj))
}
