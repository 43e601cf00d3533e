package providerconfig

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/api/constants"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/controllers/kit"
	"github.com/openmcp-local/cluster-provider/controllers/profile"
	"github.com/openmcp-local/cluster-provider/manager"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

const wait = 30 * time.Second

var versions = []clustersv1alpha1.SupportedK8sVersion{{Version: "1.37.1"}, {Version: "1.36.3", Deprecated: true}}

func newProviderConfig(t *testing.T, mutate ...func(*providersv1alpha1.ProviderConfig)) *providersv1alpha1.ProviderConfig {
	t.Helper()
	pc := &providersv1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pc-"},
		Spec: providersv1alpha1.ProviderConfigSpec{
			Backend:           providersv1alpha1.BackendLocal,
			SupportedVersions: versions,
			DefaultVersion:    "1.37.1",
		},
	}
	for _, m := range mutate {
		m(pc)
	}
	require.NoError(t, env.Client.Create(context.Background(), pc))
	return pc
}

func get[T client.Object](t *testing.T, key client.ObjectKey, obj T) (T, bool) {
	t.Helper()
	err := env.Client.Get(context.Background(), key, obj)
	if apierrors.IsNotFound(err) {
		return obj, false
	}
	require.NoError(t, err)
	return obj, true
}

func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, wait, 10*time.Millisecond, append([]any{msg}, args...)...)
}

// waitPhase waits until the ProviderConfig's status describes its current generation with phase.
func waitPhase(t *testing.T, pc *providersv1alpha1.ProviderConfig, phase string) *providersv1alpha1.ProviderConfig {
	t.Helper()
	var got *providersv1alpha1.ProviderConfig
	eventually(t, func() bool {
		cur, ok := get(t, client.ObjectKeyFromObject(pc), &providersv1alpha1.ProviderConfig{})
		got = cur
		return ok && cur.Status.ObservedGeneration == cur.Generation && cur.Status.Phase == phase
	}, "ProviderConfig %s never reached phase %s", pc.Name, phase)
	return got
}

func requireCondition(t *testing.T, s common.Status, condType string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(s.Conditions, condType)
	require.NotNil(t, c, "condition %s missing in %+v", condType, s.Conditions)
	assert.Equal(t, status, c.Status, "condition %s", condType)
	assert.Equal(t, reason, c.Reason, "condition %s", condType)
	return c
}

func newCluster(t *testing.T, ns, name, profile string) *clustersv1alpha1.Cluster {
	t.Helper()
	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyExclusive},
	}
	require.NoError(t, env.Client.Create(context.Background(), cl))
	return cl
}

// waitClusterReconciled waits until the profile's Cluster controller has taken cl over.
func waitClusterReconciled(t *testing.T, cl *clustersv1alpha1.Cluster) *clustersv1alpha1.Cluster {
	t.Helper()
	var got *clustersv1alpha1.Cluster
	eventually(t, func() bool {
		cur, ok := get(t, client.ObjectKeyFromObject(cl), &clustersv1alpha1.Cluster{})
		got = cur
		return ok && cur.Status.ObservedGeneration == cur.Generation && len(cur.Finalizers) > 0
	}, "Cluster %s was never reconciled", cl.Name)
	return got
}

// TestProfileLifecycle creates a ProviderConfig and checks the published ClusterProfile, the
// status, the Events and that the profile's controllers run; then it changes the versions and
// checks that the profile follows and the controllers were restarted exactly once.
func TestProfileLifecycle(t *testing.T) {
	e := startOperator(t)
	ctx := context.Background()
	pc := newProviderConfig(t)
	name := profileName(pc)

	got := waitPhase(t, pc, common.PhaseReady)
	assert.Equal(t, name, got.Status.Profile)
	assert.Contains(t, got.Finalizers, kit.Finalizer(testProvider))
	for _, c := range []string{ConditionSpecValid, ConditionVersionsServed, ConditionProfilePublished, ConditionControllersRunning} {
		cond := requireCondition(t, got.Status.Status, c, metav1.ConditionTrue, map[string]string{
			ConditionSpecValid: ReasonValid, ConditionVersionsServed: ReasonVersionsServed,
			ConditionProfilePublished: ReasonPublished, ConditionControllersRunning: ReasonRunning,
		}[c])
		assert.Equal(t, got.Generation, cond.ObservedGeneration)
	}
	cp, ok := get(t, client.ObjectKey{Name: name}, &clustersv1alpha1.ClusterProfile{})
	require.True(t, ok, "ClusterProfile %s was not published", name)
	assert.Equal(t, clustersv1alpha1.ClusterProfileSpec{
		ProviderRef:       common.LocalObjectReference{Name: testProvider},
		ProviderConfigRef: common.LocalObjectReference{Name: pc.Name},
		SupportedVersions: versions,
	}, cp.Spec)
	_, running := e.Running(name)
	assert.True(t, running)
	assert.Equal(t, 1, e.startsOf(name))
	env.AwaitEvent(t, pc, ReasonStarted)

	// The profile's controllers run: a Cluster of the profile is taken over.
	ns := env.Namespace(t)
	cl := waitClusterReconciled(t, newCluster(t, ns, "c1", name))
	assert.Equal(t, common.PhaseProgressing, cl.Status.Phase)
	requireCondition(t, cl.Status.Status, cluster.ConditionProvisioned, metav1.ConditionTrue, cluster.ReasonProvisioned)
	requireCondition(t, cl.Status.Status, cluster.ConditionAPIServerReady, metav1.ConditionFalse, backend.ReasonStarting)

	// A spec change: the profile follows, the controllers restart once.
	cur := pc.DeepCopy()
	testenv.Update(ctx, t, env.Client, cur, func(cur *providersv1alpha1.ProviderConfig) {
		cur.Spec.SupportedVersions = append(cur.Spec.SupportedVersions, clustersv1alpha1.SupportedK8sVersion{Version: "1.38.0"})
	})
	waitPhase(t, cur, common.PhaseReady)
	eventually(t, func() bool {
		cp, _ := get(t, client.ObjectKey{Name: name}, &clustersv1alpha1.ClusterProfile{})
		return len(cp.Spec.SupportedVersions) == 3
	}, "the ClusterProfile did not follow the spec")
	assert.Equal(t, 2, e.startsOf(name), "one start and exactly one restart")
	env.AwaitEvent(t, pc, ReasonRestarted)

	// The restarted controllers still serve the profile.
	waitClusterReconciled(t, newCluster(t, ns, "c2", name))
}

// TestDeletionWaitsForClusters deletes a ProviderConfig whose profile still has a Cluster: it
// stays Terminating with a condition counting the Clusters and its controllers keep running;
// once the Cluster is deleted (its finalizer removed by those controllers) the ProviderConfig,
// the profile and the controllers are gone.
func TestDeletionWaitsForClusters(t *testing.T) {
	e := startOperator(t)
	ctx := context.Background()
	pc := newProviderConfig(t)
	name := profileName(pc)
	waitPhase(t, pc, common.PhaseReady)
	ns := env.Namespace(t)
	cl := waitClusterReconciled(t, newCluster(t, ns, "keep", name))

	require.NoError(t, env.Client.Delete(ctx, pc))
	got := waitPhase(t, pc, common.PhaseTerminating)
	cond := requireCondition(t, got.Status.Status, ConditionClustersDeleted, metav1.ConditionFalse, ReasonClustersRemaining)
	assert.Contains(t, cond.Message, "1 Cluster(s) still use ClusterProfile "+name)
	assert.Contains(t, cond.Message, ns+"/keep")
	_, running := e.Running(name)
	assert.True(t, running, "the controllers keep running while Clusters remain")
	_, ok := get(t, client.ObjectKey{Name: name}, &clustersv1alpha1.ClusterProfile{})
	assert.True(t, ok, "the profile stays while Clusters remain")

	require.NoError(t, env.Client.Delete(ctx, cl))
	eventually(t, func() bool {
		_, ok := get(t, client.ObjectKeyFromObject(cl), &clustersv1alpha1.Cluster{})
		return !ok
	}, "the profile's controllers did not release the Cluster")
	eventually(t, func() bool {
		_, ok := get(t, client.ObjectKeyFromObject(pc), &providersv1alpha1.ProviderConfig{})
		return !ok
	}, "the ProviderConfig was not released")
	_, ok = get(t, client.ObjectKey{Name: name}, &clustersv1alpha1.ClusterProfile{})
	assert.False(t, ok, "the ClusterProfile is deleted")
	_, running = e.Running(name)
	assert.False(t, running, "the controllers are stopped")
}

// TestInvalidSpec: an invalid spec is reported with a message naming the field, publishes and
// starts nothing, and recovers once fixed.
func TestInvalidSpec(t *testing.T) {
	e := startOperator(t)
	ctx := context.Background()
	pc := newProviderConfig(t, func(pc *providersv1alpha1.ProviderConfig) { pc.Spec.DefaultVersion = "1.30.0" })
	name := profileName(pc)
	got := waitPhase(t, pc, common.PhaseProgressing)
	cond := requireCondition(t, got.Status.Status, ConditionSpecValid, metav1.ConditionFalse, ReasonInvalidSpec)
	assert.Contains(t, cond.Message, `spec.defaultVersion: Invalid value: "1.30.0": not in spec.supportedVersions`)
	_, ok := get(t, client.ObjectKey{Name: name}, &clustersv1alpha1.ClusterProfile{})
	assert.False(t, ok, "no profile for an invalid spec")
	_, running := e.Running(name)
	assert.False(t, running)
	env.AwaitEvent(t, pc, ReasonInvalidSpec) // the Warning Event

	testenv.Update(ctx, t, env.Client, got, func(got *providersv1alpha1.ProviderConfig) { got.Spec.DefaultVersion = "1.37.1" })
	got = waitPhase(t, got, common.PhaseReady)
	requireCondition(t, got.Status.Status, ConditionSpecValid, metav1.ConditionTrue, ReasonValid)
	_, running = e.Running(name)
	assert.True(t, running)
}

// TestNameCollision: a ClusterProfile of the generated name that belongs to another provider is
// left alone, the ProviderConfig says so, and Clusters of that profile are never touched.
func TestNameCollision(t *testing.T) {
	e := startOperator(t)
	ctx := context.Background()
	ns := env.Namespace(t)
	configName := "collides-" + ns
	name := profileName(&providersv1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: configName}})
	foreign := &clustersv1alpha1.ClusterProfile{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: clustersv1alpha1.ClusterProfileSpec{
			ProviderRef:       common.LocalObjectReference{Name: "someone-else"},
			ProviderConfigRef: common.LocalObjectReference{Name: "theirs"},
		},
	}
	require.NoError(t, env.Client.Create(ctx, foreign))
	theirCluster := newCluster(t, ns, "theirs", name)

	pc := newProviderConfig(t, func(pc *providersv1alpha1.ProviderConfig) { pc.GenerateName, pc.Name = "", configName })
	got := waitPhase(t, pc, common.PhaseProgressing)
	cond := requireCondition(t, got.Status.Status, ConditionProfilePublished, metav1.ConditionFalse, ReasonProfileNameTaken)
	assert.Contains(t, cond.Message, `belongs to provider "someone-else"`)
	cp, _ := get(t, client.ObjectKey{Name: name}, &clustersv1alpha1.ClusterProfile{})
	assert.Equal(t, foreign.Spec, cp.Spec, "the other provider's profile is not overwritten")
	_, running := e.Running(name)
	assert.False(t, running)

	// A Cluster of a running profile, created after theirs, is reconciled; theirs never is.
	mine := newProviderConfig(t)
	waitPhase(t, mine, common.PhaseReady)
	waitClusterReconciled(t, newCluster(t, ns, "mine", profileName(mine)))
	untouched, _ := get(t, client.ObjectKeyFromObject(theirCluster), &clustersv1alpha1.Cluster{})
	assert.Equal(t, theirCluster.ResourceVersion, untouched.ResourceVersion, "another provider's Cluster was written to")
	assert.Empty(t, untouched.Finalizers)
}

// TestOperationAnnotations: ignore stops reconciliation until removed; reconcile forces a pass
// and is removed.
func TestOperationAnnotations(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	ignored := newProviderConfig(t, func(pc *providersv1alpha1.ProviderConfig) {
		pc.Annotations = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueIgnore}
	})
	// The controller works in order; once a later ProviderConfig is Ready the ignored one had
	// its turn.
	waitPhase(t, newProviderConfig(t), common.PhaseReady)
	got, _ := get(t, client.ObjectKeyFromObject(ignored), &providersv1alpha1.ProviderConfig{})
	assert.Empty(t, got.Finalizers, "an ignored ProviderConfig gets no finalizer")
	assert.Empty(t, got.Status.Phase, "an ignored ProviderConfig gets no status")
	_, ok := get(t, client.ObjectKey{Name: profileName(ignored)}, &clustersv1alpha1.ClusterProfile{})
	assert.False(t, ok)

	testenv.Update(ctx, t, env.Client, got, func(got *providersv1alpha1.ProviderConfig) {
		delete(got.Annotations, constants.OperationAnnotation)
	})
	got = waitPhase(t, got, common.PhaseReady)

	// Someone deletes the profile by hand; a reconcile annotation (or the profile watch)
	// restores it, and the annotation is removed.
	require.NoError(t, env.Client.Delete(ctx, &clustersv1alpha1.ClusterProfile{ObjectMeta: metav1.ObjectMeta{Name: profileName(got)}}))
	testenv.Update(ctx, t, env.Client, got, func(got *providersv1alpha1.ProviderConfig) {
		got.Annotations = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueReconcile}
	})
	eventually(t, func() bool {
		cur, _ := get(t, client.ObjectKeyFromObject(got), &providersv1alpha1.ProviderConfig{})
		_, hasProfile := get(t, client.ObjectKey{Name: profileName(got)}, &clustersv1alpha1.ClusterProfile{})
		_, annotated := cur.Annotations[constants.OperationAnnotation]
		return hasProfile && !annotated
	}, "the reconcile annotation was not handled")
}

// TestRestartRebuildsProfiles stops the operator and starts a new one: the running profiles are
// rebuilt from the ProviderConfigs.
func TestRestartRebuildsProfiles(t *testing.T) {
	var pc *providersv1alpha1.ProviderConfig
	// Each operator runs in its own subtest: the first one is stopped (its cleanup) before the
	// second one starts.
	t.Run("before restart", func(t *testing.T) {
		e := startOperator(t)
		pc = newProviderConfig(t)
		waitPhase(t, pc, common.PhaseReady)
		_, running := e.Running(profileName(pc))
		require.True(t, running)
	})
	t.Run("after restart", func(t *testing.T) {
		e := startOperator(t)
		eventually(t, func() bool { _, ok := e.Running(profileName(pc)); return ok }, "the profile was not rebuilt")
	})
}

// TestAccessRequests: an AccessRequest prepared for this provider's profile is answered (Denied:
// its Cluster does not exist); one of another provider is never touched.
func TestAccessRequests(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	pc := newProviderConfig(t)
	name := profileName(pc)
	waitPhase(t, pc, common.PhaseReady)
	ns := env.Namespace(t)
	newAR := func(arName, provider string) *clustersv1alpha1.AccessRequest {
		ar := &clustersv1alpha1.AccessRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: arName, Labels: map[string]string{
				clustersv1alpha1.ProviderLabel: provider, clustersv1alpha1.ProfileLabel: name,
			}},
			Spec: clustersv1alpha1.AccessRequestSpec{
				ClusterRef: &common.ObjectReference{Name: "c", Namespace: ns},
				Token:      &clustersv1alpha1.TokenConfig{},
			},
		}
		require.NoError(t, env.Client.Create(ctx, ar))
		testenv.HandOver(t, env.Client, ar)
		return ar
	}
	foreign := newAR("foreign", "someone-else")
	mine := newAR("mine", testProvider)
	var got *clustersv1alpha1.AccessRequest
	eventually(t, func() bool {
		got, _ = get(t, client.ObjectKeyFromObject(mine), &clustersv1alpha1.AccessRequest{})
		return got.Status.Phase == common.PhaseDenied
	}, "the AccessRequest was not answered")
	requireCondition(t, got.Status.Status, accessrequest.ConditionGranted, metav1.ConditionFalse, accessrequest.ReasonClusterGone)
	assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
	untouched, _ := get(t, client.ObjectKeyFromObject(foreign), &clustersv1alpha1.AccessRequest{})
	assert.Equal(t, foreign.ResourceVersion, untouched.ResourceVersion, "another provider's AccessRequest was written to")
}

// TestClusterOperationAnnotations: the per-profile Cluster reconciler leaves an ignored Cluster
// alone and handles (and removes) the reconcile annotation.
func TestClusterOperationAnnotations(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	pc := newProviderConfig(t)
	name := profileName(pc)
	waitPhase(t, pc, common.PhaseReady)
	ns := env.Namespace(t)

	ignored := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "ignored", Annotations: map[string]string{
			constants.OperationAnnotation: constants.OperationAnnotationValueIgnore,
		}},
		Spec: clustersv1alpha1.ClusterSpec{Profile: name, Tenancy: clustersv1alpha1.TenancyShared},
	}
	require.NoError(t, env.Client.Create(ctx, ignored))
	// Events of one informer are routed in order, and the profile has one worker.
	waitClusterReconciled(t, newCluster(t, ns, "sentinel", name))
	got, _ := get(t, client.ObjectKeyFromObject(ignored), &clustersv1alpha1.Cluster{})
	assert.Equal(t, ignored.ResourceVersion, got.ResourceVersion, "an ignored Cluster was written to")

	testenv.Update(ctx, t, env.Client, got, func(got *clustersv1alpha1.Cluster) {
		got.Annotations[constants.OperationAnnotation] = constants.OperationAnnotationValueReconcile
	})
	got = waitClusterReconciled(t, got)
	eventually(t, func() bool {
		cur, _ := get(t, client.ObjectKeyFromObject(got), &clustersv1alpha1.Cluster{})
		_, annotated := cur.Annotations[constants.OperationAnnotation]
		return !annotated
	}, "the reconcile annotation was not removed")
}

// fakeEngine runs nothing; it remembers which profiles it was asked to run.
type fakeEngine struct{ running map[string]string }

func (f *fakeEngine) StartProfile(_ context.Context, p manager.Profile) error {
	f.running[p.Name] = p.Hash
	return nil
}
func (f *fakeEngine) StopProfile(name string) { delete(f.running, name) }
func (f *fakeEngine) Running(name string) (string, bool) {
	h, ok := f.running[name]
	return h, ok
}

// TestFirstReconcileSucceeds calls Reconcile once on a new ProviderConfig with an uncached
// client: the finalizer patch and the status patch must not conflict with each other (the
// status patch is locked on the resourceVersion the finalizer patch returned).
func TestFirstReconcileSucceeds(t *testing.T) {
	pc := newProviderConfig(t)
	f := &fakeEngine{running: map[string]string{}}
	r := &Reconciler{
		Client:       env.Client,
		Engine:       f,
		Builder:      &profile.Builder{Client: env.Client, ProviderName: testProvider},
		Backends:     backend.Registry{"local": versionsBackend{}},
		ProviderName: testProvider,
		Environment:  testEnvironment,
	}
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pc)})
	require.NoError(t, err)
	assert.Zero(t, res, "no retry: no conflict was swallowed")
	got, _ := get(t, client.ObjectKeyFromObject(pc), &providersv1alpha1.ProviderConfig{})
	assert.Equal(t, common.PhaseReady, got.Status.Phase)
	assert.Contains(t, got.Finalizers, kit.Finalizer(testProvider))
	assert.Contains(t, f.running, profileName(pc))
}

// TestPool: a ProviderConfig with spec.pool has its backend keep that many spares of its default
// version; its status counts them and PoolReady says whether the pool is full (informational: the
// profile is Ready meanwhile); removing spec.pool, or the ProviderConfig, removes the spares. The
// API server refuses a pool for a backend that keeps none.
func TestPool(t *testing.T) {
	startOperator(t)
	ctx := context.Background()
	pc := newProviderConfig(t, func(pc *providersv1alpha1.ProviderConfig) {
		pc.Spec.Pool = &providersv1alpha1.PoolPolicy{Size: 2, Hibernated: true}
	})
	name := profileName(pc)
	got := waitPhase(t, pc, common.PhaseReady)
	requireCondition(t, got.Status.Status, ConditionPoolReady, metav1.ConditionFalse, ReasonPoolFilling)
	assert.Equal(t, &providersv1alpha1.PoolStatus{Version: "1.37.1", Starting: 2}, got.Status.Pool)
	p, _ := poolOf(name)
	assert.Equal(t, backend.Pool{Size: 2, Version: "1.37.1", Hibernated: true}, p)

	fakePools.Lock()
	fakePools.ready[name] = 2
	fakePools.Unlock()
	eventually(t, func() bool { // looked at again without an event (poolRecheck)
		cur, _ := get(t, client.ObjectKeyFromObject(pc), &providersv1alpha1.ProviderConfig{})
		c := meta.FindStatusCondition(cur.Status.Conditions, ConditionPoolReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ReasonPoolFull &&
			cur.Status.Pool != nil && cur.Status.Pool.Ready == 2
	}, "PoolReady never became True")

	cur := pc.DeepCopy()
	testenv.Update(ctx, t, env.Client, cur, func(cur *providersv1alpha1.ProviderConfig) { cur.Spec.Pool = nil })
	got = waitPhase(t, cur, common.PhaseReady)
	assert.Nil(t, meta.FindStatusCondition(got.Status.Conditions, ConditionPoolReady))
	assert.Nil(t, got.Status.Pool)
	p, _ = poolOf(name)
	assert.Zero(t, p.Size, "the spares removed")

	testenv.Update(ctx, t, env.Client, cur, func(cur *providersv1alpha1.ProviderConfig) {
		cur.Spec.Pool = &providersv1alpha1.PoolPolicy{Size: 1}
	})
	eventually(t, func() bool { p, _ := poolOf(name); return p.Size == 1 }, "the pool set again")
	require.NoError(t, env.Client.Delete(ctx, cur))
	eventually(t, func() bool { p, _ := poolOf(name); return p.Size == 0 }, "the spares of a deleted ProviderConfig removed")

	bad := &providersv1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{GenerateName: "pc-"}, Spec: providersv1alpha1.ProviderConfigSpec{
		Backend: providersv1alpha1.BackendKind, Pool: &providersv1alpha1.PoolPolicy{Size: 1}}}
	err := env.Client.Create(ctx, bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.pool is only supported with backend local")
}
