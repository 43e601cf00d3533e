package scheduler

import (
	"context"
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/constants"
)

// TestExclusive follows one request of an Exclusive purpose from creation to deletion: a new
// Cluster named after the request's hash, with the template's metadata, the purpose, the
// delete-without-requests label and the request's finalizer (its real UID); the request's
// propagated metadata, also when it changes later; the template never changed; and on deletion
// the Cluster released and deleted, then the request gone.
func TestExclusive(t *testing.T) {
	pm := exclusive()
	pm.Template.Metadata = TemplateMeta{Labels: map[string]string{"tier": "dev"}, Annotations: map[string]string{"note": "from template"}}
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"exclusive": pm}})
	template := copyTemplate(t, pm.Template)

	cr := f.request(t, "mine", "exclusive", func(cr *clustersv1alpha1.ClusterRequest) {
		cr.Labels[PropagatedPrefix+"team"] = "a"
		cr.Labels["unrelated"] = "x"
		cr.Annotations = map[string]string{PropagatedPrefix + "owner": "alice"}
	})
	got, cl := awaitGranted(t, cr)
	assert.Equal(t, "exclusive-"+RequestHash(f.ns, "mine"), cl.Name)
	assert.Equal(t, f.ns, cl.Namespace, "no template namespace: the request's")
	assert.Equal(t, f.ns, got.Status.Cluster.Namespace)
	assert.Equal(t, []string{RequestFinalizer(cr.UID)}, cl.Finalizers)
	assert.True(t, strings.HasPrefix(cl.Finalizers[0], "request.clusters.openmcp.cloud/") && len(cl.Finalizers[0]) > len("request.clusters.openmcp.cloud/"))
	assert.Equal(t, map[string]string{"tier": "dev", testLabel: f.ns, LabelDeleteWithoutRequests: "true", PropagatedPrefix + "team": "a"}, cl.Labels)
	assert.Equal(t, map[string]string{"note": "from template", PropagatedPrefix + "owner": "alice"}, cl.Annotations)
	assert.Equal(t, []string{"exclusive"}, cl.Spec.Purposes)
	assert.Equal(t, clustersv1alpha1.TenancyExclusive, cl.Spec.Tenancy)
	ev := env.AwaitEvent(t, cr, ReasonGranted)
	assert.Equal(t, corev1.EventTypeNormal, ev.Type)
	env.AwaitEvent(t, cr, ReasonClusterCreated)

	// openMCP misses later changes of the request's metadata; this scheduler watches them.
	update(t, cr, func(cr *clustersv1alpha1.ClusterRequest) {
		cr.Labels[PropagatedPrefix+"team"] = "b"
		cr.Annotations[PropagatedPrefix+"cost-center"] = "42"
		delete(cr.Annotations, PropagatedPrefix+"owner")
	})
	require.Eventually(t, func() bool {
		cl = getCluster(t, f.ns, cl.Name)
		return cl.Labels[PropagatedPrefix+"team"] == "b" && cl.Annotations[PropagatedPrefix+"cost-center"] == "42"
	}, waitTimeout, pollInterval, "the changed metadata never reached the Cluster: %v %v", cl.Labels, cl.Annotations)
	assert.Equal(t, "alice", cl.Annotations[PropagatedPrefix+"owner"], "never removed")
	assert.NotContains(t, cl.Labels, "unrelated")
	assert.Equal(t, template, pm.Template, "the configured template is never changed")

	// A second request of the purpose never shares the Cluster.
	other := f.request(t, "other", "exclusive")
	_, otherCl := awaitGranted(t, other)
	assert.NotEqual(t, cl.Name, otherCl.Name)
	assert.NotContains(t, otherCl.Labels, PropagatedPrefix+"team", "one request's labels never leak into another's Cluster")

	remove(t, cr)
	awaitGone(t, cl)
	awaitGone(t, cr)
	env.AwaitEvent(t, cr, ReasonClusterDeleted)
}

// TestPinnedName checks the name openMCP's scheduler gives request foo/exclusive with prefix
// exclusive-, through a real request in namespace foo.
func TestPinnedName(t *testing.T) {
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"exclusive": exclusive()}})
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "foo"}}
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(context.Background(), ns)))
	cr := &clustersv1alpha1.ClusterRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "foo", Name: "exclusive", Labels: map[string]string{testLabel: f.ns}},
		Spec:       clustersv1alpha1.ClusterRequestSpec{Purpose: "exclusive"},
	}
	require.NoError(t, env.Client.Create(context.Background(), cr))
	_, cl := awaitGranted(t, cr)
	assert.Equal(t, "exclusive-qilq5nsb", cl.Name)
	remove(t, cr)
	awaitGone(t, cr)
}

// TestSharedBalanced fills two existing Clusters evenly up to tenancyCount, then creates a third
// for the next request; releasing frees a seat without deleting a Cluster that does not ask for
// it, and the created Cluster goes with its last request.
func TestSharedBalanced(t *testing.T) {
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"shared": shared(2)}})
	f.cluster(t, f.ns, "a", []string{"shared"})
	f.cluster(t, f.ns, "b", []string{"shared"})
	f.cluster(t, f.ns, "other-purpose", []string{"else"})
	var reqs []*clustersv1alpha1.ClusterRequest
	var got []string
	for _, name := range []string{"r1", "r2", "r3", "r4", "r5"} {
		cr := f.request(t, name, "shared")
		cr, cl := awaitGranted(t, cr)
		reqs = append(reqs, cr)
		got = append(got, cl.Name)
	}
	created := "shared-" + RequestHash(f.ns, "r5")
	assert.Equal(t, []string{"a", "b", "a", "b", created}, got, "Balanced: fewest requests, ties by name; full Clusters are skipped")
	assert.Equal(t, 2, TenancyCount(getCluster(t, f.ns, "a")))
	assert.Equal(t, "true", getCluster(t, f.ns, created).Labels[LabelDeleteWithoutRequests])

	// r1 goes: a serves one request and stays (it does not ask to be deleted).
	remove(t, reqs[0])
	awaitGone(t, reqs[0])
	assert.Equal(t, []string{RequestFinalizer(reqs[2].UID)}, getCluster(t, f.ns, "a").Finalizers)
	env.AwaitEvent(t, reqs[0], ReasonClusterReleased)

	// The freed seat is taken before any new Cluster.
	r6 := f.request(t, "r6", "shared")
	_, cl := awaitGranted(t, r6)
	assert.Equal(t, "a", cl.Name)

	remove(t, reqs[4])
	awaitGone(t, &clustersv1alpha1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: created}})
}

// TestSharedUnlimited gives every request of a Shared purpose with tenancyCount 0 the one Cluster
// named after the template (else the purpose), and deletes it after the last request only.
func TestSharedUnlimited(t *testing.T) {
	named := shared(0)
	named.Template.Metadata.Name = "everyone"
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"unlimited": shared(0), "named": named}})
	r1 := f.request(t, "r1", "unlimited")
	r2 := f.request(t, "r2", "unlimited")
	r3 := f.request(t, "r3", "named")
	_, c1 := awaitGranted(t, r1)
	_, c2 := awaitGranted(t, r2)
	_, c3 := awaitGranted(t, r3)
	assert.Equal(t, "unlimited", c1.Name)
	assert.Equal(t, "unlimited", c2.Name)
	assert.Equal(t, "everyone", c3.Name)
	require.Eventually(t, func() bool { return TenancyCount(getCluster(t, f.ns, "unlimited")) == 2 }, waitTimeout, pollInterval)

	remove(t, r1)
	awaitGone(t, r1)
	assert.Equal(t, 1, TenancyCount(getCluster(t, f.ns, "unlimited")), "still serves r2")
	remove(t, r2)
	awaitGone(t, c2)
}

// TestNamespacedScope: with scope Namespaced a fitting Cluster of another namespace is no
// candidate; a template namespace puts new Clusters there and looks for candidates there.
func TestNamespacedScope(t *testing.T) {
	f := startScheduler(t, &Config{Scope: ScopeNamespaced, PurposeMappings: map[string]*PurposeMapping{"shared": shared(0)}})
	elsewhere := env.Namespace(t)
	f.cluster(t, elsewhere, "shared", []string{"shared"})
	cr := f.request(t, "r", "shared")
	_, cl := awaitGranted(t, cr)
	assert.Equal(t, f.ns, cl.Namespace, "the Cluster in %s is out of scope", elsewhere)
	assert.Empty(t, getCluster(t, elsewhere, "shared").Finalizers)
}

// TestRandomStrategy uses the injected draw.
func TestRandomStrategy(t *testing.T) {
	f := startScheduler(t, &Config{Strategy: StrategyRandom, PurposeMappings: map[string]*PurposeMapping{"shared": shared(0)}},
		func(r *Reconciler) { r.Intn = func(n int) int { return n - 1 } })
	f.cluster(t, f.ns, "a", []string{"shared"})
	f.cluster(t, f.ns, "b", []string{"shared"})
	f.cluster(t, f.ns, "c", []string{"shared"})
	_, cl := awaitGranted(t, f.request(t, "r", "shared"))
	assert.Equal(t, "c", cl.Name, "the last of the sorted candidates, as drawn")
}

// TestNoPurposeMapping: a request of an unknown purpose stays Pending and says what to fix.
func TestNoPurposeMapping(t *testing.T) {
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"known": exclusive()}})
	cr := f.request(t, "r", "unknown")
	msg := awaitPending(t, cr, ReasonNoPurposeMapping)
	assert.Contains(t, msg, `purpose "unknown"`)
	assert.Contains(t, msg, "known")
	assert.Contains(t, msg, "scheduler.purposeMappings")
	ev := env.AwaitEvent(t, cr, ReasonNoPurposeMapping)
	assert.Equal(t, corev1.EventTypeWarning, ev.Type)
}

// TestClusterConflict: the request's Cluster name is taken by a Cluster that serves another
// request. The request waits with a message naming it and the way out; the randomize label
// gives it a generated name; and a freed Cluster of that name is taken by a waiting request.
func TestClusterConflict(t *testing.T) {
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"exclusive": exclusive()}})
	// The other request exists (outside this scheduler's selector): its UID is real.
	owner := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "owner"}, Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "exclusive"}}
	require.NoError(t, env.Client.Create(context.Background(), owner))
	taken := "exclusive-" + RequestHash(f.ns, "r")
	f.cluster(t, f.ns, taken, []string{"exclusive"}, RequestFinalizer(owner.UID))

	cr := f.request(t, "r", "exclusive")
	msg := awaitPending(t, cr, ReasonClusterConflict)
	assert.Contains(t, msg, f.ns+"/"+taken)
	assert.Contains(t, msg, LabelRandomizeClusterName)
	env.AwaitEvent(t, cr, ReasonClusterConflict)

	// A second request in the same situation waits until the Cluster is freed, then takes it.
	taken2 := "exclusive-" + RequestHash(f.ns, "r2")
	held := f.cluster(t, f.ns, taken2, []string{"exclusive"}, RequestFinalizer(owner.UID))
	cr2 := f.request(t, "r2", "exclusive")
	awaitPending(t, cr2, ReasonClusterConflict)
	update(t, held, func(cl *clustersv1alpha1.Cluster) { controllerutil.RemoveFinalizer(cl, RequestFinalizer(owner.UID)) })
	_, cl := awaitGranted(t, cr2)
	assert.Equal(t, taken2, cl.Name)

	update(t, cr, func(cr *clustersv1alpha1.ClusterRequest) { cr.Labels[LabelRandomizeClusterName] = "true" })
	_, cl = awaitGranted(t, cr)
	assert.True(t, strings.HasPrefix(cl.Name, "exclusive-"), cl.Name)
	assert.NotEqual(t, taken, cl.Name)
}

// TestWaitingForCluster: the name is held by a Cluster being deleted; the request waits and gets
// a new Cluster of that name once the old one is gone.
func TestWaitingForCluster(t *testing.T) {
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"exclusive": exclusive()}})
	name := "exclusive-" + RequestHash(f.ns, "r")
	old := f.cluster(t, f.ns, name, []string{"exclusive"}, "test/hold")
	remove(t, old)
	cr := f.request(t, "r", "exclusive")
	msg := awaitPending(t, cr, ReasonWaitingForCluster)
	assert.Contains(t, msg, f.ns+"/"+name)
	update(t, old, func(cl *clustersv1alpha1.Cluster) { cl.Finalizers = nil })
	_, cl := awaitGranted(t, cr)
	assert.Equal(t, name, cl.Name)
	assert.NotEqual(t, old.UID, cl.UID)
}

// TestRecreate: a granted Cluster that someone deletes stays while the request's finalizer holds
// it; once it is gone anyway (the finalizer removed by hand) it is created anew under the same
// name, with a Warning.
func TestRecreate(t *testing.T) {
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"exclusive": exclusive()}})
	cr := f.request(t, "r", "exclusive", func(cr *clustersv1alpha1.ClusterRequest) { cr.Labels[LabelRandomizeClusterName] = "true" })
	_, cl := awaitGranted(t, cr)
	remove(t, cl)
	cl = getCluster(t, f.ns, cl.Name)
	assert.NotNil(t, cl.DeletionTimestamp, "held by the request's finalizer")
	update(t, cl, func(cl *clustersv1alpha1.Cluster) { cl.Finalizers = nil })
	ev := env.AwaitEvent(t, cr, ReasonClusterRecreated)
	assert.Equal(t, corev1.EventTypeWarning, ev.Type)
	var again *clustersv1alpha1.Cluster
	require.Eventually(t, func() bool {
		again = &clustersv1alpha1.Cluster{}
		return env.Client.Get(context.Background(), client.ObjectKeyFromObject(cl), again) == nil && again.UID != cl.UID
	}, waitTimeout, pollInterval)
	assert.Contains(t, again.Finalizers, RequestFinalizer(cr.UID))
	got, _ := awaitGranted(t, cr)
	assert.Equal(t, cl.Name, got.Status.Cluster.Name, "status.cluster never changes")
}

// TestDeleteWithoutRequestsLabel follows openMCP's label clusters.openmcp.cloud/delete-without-requests
// (its scheduler's DeleteWithoutRequestsLabel): a template written for openMCP that sets it to
// "false" keeps its Cluster after the last request goes (an annotation "true" used to be added, and
// the Cluster was deleted with its data); a Cluster labelled "true" by someone else (openMCP's
// scheduler) is deleted once released; a Cluster of an earlier release, with only the annotation
// "true", still is.
func TestDeleteWithoutRequestsLabel(t *testing.T) {
	keep := withTemplateLabels(exclusive(), map[string]string{"pool": "keep"})
	keep.Template.Metadata.Labels[LabelDeleteWithoutRequests] = "false"
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"keep": keep, "shared": shared(0)}})

	cr := f.request(t, "kept", "keep")
	_, cl := awaitGranted(t, cr)
	assert.Equal(t, "false", cl.Labels[LabelDeleteWithoutRequests])
	remove(t, cr)
	awaitGone(t, cr)
	env.AwaitEvent(t, cr, ReasonClusterReleased)
	cl = getCluster(t, f.ns, cl.Name)
	assert.True(t, cl.DeletionTimestamp.IsZero(), "the Cluster whose template says \"false\" is kept")
	assert.Empty(t, cl.Finalizers, "released")

	labelled := f.cluster(t, f.ns, "by-openmcp", []string{"shared"})
	update(t, labelled, func(cl *clustersv1alpha1.Cluster) { cl.Labels[LabelDeleteWithoutRequests] = "true" })
	cr = f.request(t, "on-labelled", "shared")
	_, got := awaitGranted(t, cr)
	require.Equal(t, labelled.Name, got.Name)
	remove(t, cr)
	awaitGone(t, labelled)

	legacy := f.cluster(t, f.ns, "legacy", []string{"shared"})
	update(t, legacy, func(cl *clustersv1alpha1.Cluster) {
		cl.Annotations = map[string]string{LegacyAnnotationDeleteWithoutRequests: "true"}
	})
	cr = f.request(t, "on-legacy", "shared")
	_, got = awaitGranted(t, cr)
	require.Equal(t, legacy.Name, got.Name)
	remove(t, cr)
	awaitGone(t, legacy)
}

// TestWaitForClusterDeletion: with spec.waitForClusterDeletion the deleted request stays until
// the Cluster the scheduler deleted with it is gone.
func TestWaitForClusterDeletion(t *testing.T) {
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"exclusive": exclusive()}})
	cr := f.request(t, "r", "exclusive", func(cr *clustersv1alpha1.ClusterRequest) { cr.Spec.WaitForClusterDeletion = ptr.To(true) })
	_, cl := awaitGranted(t, cr)
	// Something else (a provider's teardown) holds the Cluster for a while.
	update(t, cl, func(cl *clustersv1alpha1.Cluster) { cl.Finalizers = append(cl.Finalizers, "test/hold") })
	remove(t, cr)
	got := awaitRequest(t, cr, "waiting for its Cluster's deletion", func(cr *clustersv1alpha1.ClusterRequest) bool {
		return reasonOf(cr) == ReasonWaitingForClusterDeletion
	})
	assert.Contains(t, got.Finalizers, Finalizer)
	cl = getCluster(t, f.ns, cl.Name)
	assert.NotNil(t, cl.DeletionTimestamp)
	assert.Equal(t, []string{"test/hold"}, cl.Finalizers, "released")
	update(t, cl, func(cl *clustersv1alpha1.Cluster) { cl.Finalizers = nil })
	awaitGone(t, cr)
}

// TestRecovery: a Cluster already carrying the request's finalizer (a decision whose status write
// was lost) is the answer, even if it does not fit the purpose any more; no new Cluster is made.
func TestRecovery(t *testing.T) {
	f := startScheduler(t, &Config{PurposeMappings: map[string]*PurposeMapping{"exclusive": exclusive()}})
	cr := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "r"}, Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "exclusive"}}
	require.NoError(t, env.Client.Create(context.Background(), cr)) // not selected yet
	f.cluster(t, f.ns, "chosen-before", []string{"something-else"}, RequestFinalizer(cr.UID))
	update(t, cr, func(cr *clustersv1alpha1.ClusterRequest) { cr.Labels = map[string]string{testLabel: f.ns} })
	_, cl := awaitGranted(t, cr)
	assert.Equal(t, "chosen-before", cl.Name)
	list := &clustersv1alpha1.ClusterList{}
	require.NoError(t, env.Client.List(context.Background(), list, client.InNamespace(f.ns)))
	assert.Len(t, list.Items, 1)
}

// TestSelectorsAndIgnore: requests outside selectors.requests and requests with the ignore
// operation are left alone; Clusters outside selectors.clusters are no candidates.
func TestSelectorsAndIgnore(t *testing.T) {
	f := startScheduler(t, &Config{
		Selectors:       Selectors{Clusters: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "blue"}}},
		PurposeMappings: map[string]*PurposeMapping{"shared": withTemplateLabels(shared(0), map[string]string{"pool": "blue"})},
	})
	green := f.cluster(t, f.ns, "shared", []string{"shared"}) // the right name, the wrong pool
	update(t, green, func(cl *clustersv1alpha1.Cluster) { cl.Labels["pool"] = "green" })
	outside := &clustersv1alpha1.ClusterRequest{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "outside"}, Spec: clustersv1alpha1.ClusterRequestSpec{Purpose: "shared"}}
	require.NoError(t, env.Client.Create(context.Background(), outside))
	ignored := f.request(t, "ignored", "shared", func(cr *clustersv1alpha1.ClusterRequest) {
		cr.Annotations = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueIgnore}
	})
	cr := f.request(t, "r", "shared")
	msg := awaitPending(t, cr, ReasonClusterConflict)
	assert.Contains(t, msg, "may not serve purpose")
	// Once the selected request has been answered, the others have been seen too.
	for _, o := range []*clustersv1alpha1.ClusterRequest{outside, ignored} {
		require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(o), o))
		assert.Empty(t, o.Finalizers, o.Name)
		assert.Empty(t, o.Status.Phase, o.Name)
	}
	// Relabelled into the pool, the Cluster is taken by the waiting request.
	update(t, green, func(cl *clustersv1alpha1.Cluster) { cl.Labels["pool"] = "blue" })
	_, cl := awaitGranted(t, cr)
	assert.Equal(t, green.UID, cl.UID)
}

func withTemplateLabels(pm *PurposeMapping, l map[string]string) *PurposeMapping {
	pm.Template.Metadata.Labels = maps.Clone(l)
	pm.Selector = &metav1.LabelSelector{MatchLabels: maps.Clone(l)}
	return pm
}

// copyTemplate copies a template deeply (through JSON).
func copyTemplate(t *testing.T, tpl ClusterTemplate) ClusterTemplate {
	data, err := json.Marshal(tpl)
	require.NoError(t, err)
	var out ClusterTemplate
	require.NoError(t, json.Unmarshal(data, &out))
	return out
}
