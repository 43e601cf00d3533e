package labeller

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/api/constants"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestLabeller runs every integration case against one labeller manager for the suite instance,
// started once here and stopped after all of its (parallel) subtests.
func TestLabeller(t *testing.T) {
	startLabeller(t, suiteInstance)

	t.Run("direct reference", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		ar := newAccessRequest(t, w.ns, "direct", clusterRef(w.cluster))
		got := waitLabelled(t, ar, w)
		assert.Equal(t, &common.ObjectReference{Name: w.cluster}, got.Spec.ClusterRef, "a set clusterRef is left as it is")
		assert.Nil(t, got.Spec.RequestRef)
		assert.Len(t, got.Status.Conditions, 1, "only the labeller's own condition")
		assert.Equal(t, common.PhasePending, got.Status.Phase, "handed to the provider")
	})

	t.Run("clusterRef wins over requestRef", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		ar := newAccessRequest(t, w.ns, "both-refs", clusterRef(w.cluster), requestRef("does-not-exist"))
		got := waitLabelled(t, ar, w)
		assert.Equal(t, &common.ObjectReference{Name: w.cluster}, got.Spec.ClusterRef)
	})

	t.Run("through a granted ClusterRequest", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		newClusterRequest(t, w.ns, "request", w.cluster)
		ar := newAccessRequest(t, w.ns, "indirect", requestRef("request"))
		got := waitLabelled(t, ar, w)
		assert.Equal(t, &common.ObjectReference{Namespace: w.ns, Name: w.cluster}, got.Spec.ClusterRef, "clusterRef filled from the ClusterRequest")
		assert.Equal(t, &common.ObjectReference{Name: "request"}, got.Spec.RequestRef)
	})

	t.Run("waits until the ClusterRequest is granted", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		cr := newClusterRequest(t, w.ns, "request", "")
		ar := newAccessRequest(t, w.ns, "waiting", requestRef("request"))
		waiting := waitCondition(t, ar, ReasonWaitingForClusterRequest)
		assert.Nil(t, waiting.Spec.ClusterRef)

		// Waiting returns no error, so nothing but the ClusterRequest watch can bring it back.
		grant(t, cr, w.cluster)
		got := waitLabelled(t, ar, w)
		assert.Equal(t, &common.ObjectReference{Namespace: w.ns, Name: w.cluster}, got.Spec.ClusterRef)
		requireCondition(t, got, metav1.ConditionTrue, ReasonResolved) // the waiting reason is replaced
	})

	t.Run("missing ClusterRequest", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		ar := newAccessRequest(t, w.ns, "missing-request", requestRef("later"))
		waitCondition(t, ar, ReasonClusterRequestNotFound)

		cr := newClusterRequest(t, w.ns, "later", "")
		waitCondition(t, ar, ReasonWaitingForClusterRequest)
		grant(t, cr, w.cluster)
		waitLabelled(t, ar, w)
	})

	t.Run("missing Cluster", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		newClusterRequest(t, w.ns, "request", "later")
		indirect := newAccessRequest(t, w.ns, "indirect", requestRef("request"))
		direct := newAccessRequest(t, w.ns, "direct", clusterRef("later"))
		waitCondition(t, indirect, ReasonClusterNotFound)
		waitCondition(t, direct, ReasonClusterNotFound)

		newCluster(t, w.ns, "later", w.profile)
		w.cluster = "later"
		assert.Equal(t, &common.ObjectReference{Namespace: w.ns, Name: "later"}, waitLabelled(t, indirect, w).Spec.ClusterRef)
		waitLabelled(t, direct, w)
	})

	t.Run("missing ClusterProfile", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		w.profile += "-later"
		newCluster(t, w.ns, "profileless", w.profile)
		w.cluster = "profileless"
		newClusterRequest(t, w.ns, "request", w.cluster)
		indirect := newAccessRequest(t, w.ns, "indirect", requestRef("request"))
		direct := newAccessRequest(t, w.ns, "direct", clusterRef(w.cluster))
		waitCondition(t, indirect, ReasonClusterProfileNotFound)
		waitCondition(t, direct, ReasonClusterProfileNotFound)

		newProfile(t, w.profile, w.provider)
		waitLabelled(t, indirect, w)
		waitLabelled(t, direct, w)
	})

	t.Run("one label preset with the right value", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		provider := newAccessRequest(t, w.ns, "provider-set", clusterRef(w.cluster), withLabel(clustersv1alpha1.ProviderLabel, w.provider))
		profile := newAccessRequest(t, w.ns, "profile-set", clusterRef(w.cluster), withLabel(clustersv1alpha1.ProfileLabel, w.profile))
		waitLabelled(t, provider, w)
		waitLabelled(t, profile, w)
	})

	t.Run("one label preset with a wrong value", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		newClusterRequest(t, w.ns, "request", w.cluster)
		ar := newAccessRequest(t, w.ns, "conflict", requestRef("request"), withLabel(clustersv1alpha1.ProviderLabel, "someone-else"))
		got := waitCondition(t, ar, ReasonLabelConflict)
		assert.Contains(t, meta.FindStatusCondition(got.Status.Conditions, ConditionProviderResolved).Message, "someone-else")
		assert.Equal(t, ar.Labels, got.Labels, "no label is changed or added")
		assert.Equal(t, ar.Spec, got.Spec, "spec.clusterRef is not filled")
		assert.Equal(t, ar.Generation, got.Generation)
		ev := env.AwaitEvent(t, ar, ReasonLabelConflict)
		assert.Equal(t, "Warning", ev.Type)
		assert.Equal(t, "AccessRequest", ev.Regarding.Kind)
		assert.Equal(t, ControllerName, ev.ReportingController)
		assert.Contains(t, ev.Note, "someone-else")
	})

	t.Run("both labels present: labels and annotations never touched, set Pending", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		// Wrong values and a reconcile annotation: the labels and the annotation are the
		// provider's; the request is only handed to it (openMCP's labeller does the same).
		ar := newAccessRequest(t, w.ns, "labelled", requestRef("does-not-exist"),
			withLabel(clustersv1alpha1.ProviderLabel, "other"), withLabel(clustersv1alpha1.ProfileLabel, "other"),
			withAnnotation(constants.OperationAnnotation, constants.OperationAnnotationValueReconcile))
		got := waitFor(t, ar, "Pending", func(ar *clustersv1alpha1.AccessRequest) bool { return ar.Status.Phase == common.PhasePending })
		assert.Equal(t, ar.Generation, got.Status.ObservedGeneration)
		assert.Equal(t, ar.Labels, got.Labels)
		assert.Equal(t, ar.Annotations, got.Annotations)
		assert.Equal(t, ar.Spec, got.Spec)
		assert.Empty(t, got.Status.Conditions, "resolution is not the labeller's business once labelled")
	})

	t.Run("handshake: a changed Granted request goes back to Pending; answers of the current generation stay", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		granted := waitLabelled(t, newAccessRequest(t, w.ns, "granted", clusterRef(w.cluster)), w)
		denied := waitLabelled(t, newAccessRequest(t, w.ns, "denied", clusterRef(w.cluster)), w)
		answer := func(ar *clustersv1alpha1.AccessRequest, phase string) *clustersv1alpha1.AccessRequest { // as a provider does
			testenv.UpdateStatus(context.Background(), t, env.Client, ar, func(ar *clustersv1alpha1.AccessRequest) {
				ar.Status.Phase = phase
				ar.Status.ObservedGeneration = ar.Generation
			})
			return ar
		}
		granted = answer(granted, common.PhaseGranted)
		denied = answer(denied, common.PhaseDenied)
		requireUntouched(t, w, granted, denied)

		changeSpec := func(ar *clustersv1alpha1.AccessRequest) *clustersv1alpha1.AccessRequest {
			base := ar.DeepCopy()
			ar.Spec.Token = &clustersv1alpha1.TokenConfig{Permissions: []clustersv1alpha1.PermissionsRequest{{Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}}}}}
			require.NoError(t, env.Client.Patch(context.Background(), ar, client.MergeFrom(base)))
			require.Greater(t, ar.Generation, base.Generation)
			return ar
		}
		for _, ar := range []*clustersv1alpha1.AccessRequest{changeSpec(granted), changeSpec(denied)} {
			got := waitFor(t, ar, "Pending again", func(got *clustersv1alpha1.AccessRequest) bool {
				return got.Status.Phase == common.PhasePending && got.Status.ObservedGeneration == ar.Generation
			})
			assert.Equal(t, ar.Labels, got.Labels)
		}
	})

	t.Run("selector excludes: never touched", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		other := newAccessRequest(t, w.ns, "other-instance", clusterRef(w.cluster), withLabel(instanceLabel, "nobody"))
		unlabelled := newAccessRequest(t, w.ns, "no-instance", clusterRef(w.cluster), func(ar *clustersv1alpha1.AccessRequest) {
			delete(ar.Labels, instanceLabel)
		})
		requireUntouched(t, w, other, unlabelled)
	})

	t.Run("ignore annotation, then reconcile annotation", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		ar := newAccessRequest(t, w.ns, "ignored", clusterRef(w.cluster),
			withAnnotation(constants.OperationAnnotation, constants.OperationAnnotationValueIgnore))
		requireUntouched(t, w, ar)

		// Changing ignore to reconcile lets it through; the annotation is removed.
		base := ar.DeepCopy()
		ar.Annotations[constants.OperationAnnotation] = constants.OperationAnnotationValueReconcile
		require.NoError(t, env.Client.Patch(context.Background(), ar, client.MergeFrom(base)))
		got := waitLabelled(t, ar, w)
		assert.NotContains(t, got.Annotations, constants.OperationAnnotation)
	})

	t.Run("reconcile annotation on a waiting AccessRequest", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		ar := newAccessRequest(t, w.ns, "waiting", clusterRef("later"))
		waitCondition(t, ar, ReasonClusterNotFound)

		ar = waitFor(t, ar, "settled", func(*clustersv1alpha1.AccessRequest) bool { return true })
		base := ar.DeepCopy()
		ar.Annotations = map[string]string{constants.OperationAnnotation: constants.OperationAnnotationValueReconcile}
		require.NoError(t, env.Client.Patch(context.Background(), ar, client.MergeFrom(base)))
		got := waitFor(t, ar, "lost the reconcile annotation", func(ar *clustersv1alpha1.AccessRequest) bool {
			_, ok := ar.Annotations[constants.OperationAnnotation]
			return !ok
		})
		requireCondition(t, got, metav1.ConditionFalse, ReasonClusterNotFound)
	})

	t.Run("spec.ttl: a labelled, handed-over request is deleted when it ends", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		// The labels write's own event brings the request back before the cache has its Pending
		// version; that pass must keep the TTL's timer (its queue entry replaces the first one's).
		ar := newAccessRequest(t, w.ns, "short", clusterRef(w.cluster), func(ar *clustersv1alpha1.AccessRequest) {
			ar.Spec.TTL = &metav1.Duration{Duration: 3 * time.Second}
		})
		waitLabelled(t, ar, w)
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKeyFromObject(ar), &clustersv1alpha1.AccessRequest{}))
		}, 30*time.Second, 100*time.Millisecond, "the request outlived its spec.ttl")
		env.AwaitEvent(t, ar, ReasonExpired)
	})

	t.Run("a removed label is set again", func(t *testing.T) {
		t.Parallel()
		w := newWorld(t)
		ar := waitLabelled(t, newAccessRequest(t, w.ns, "relabel", clusterRef(w.cluster)), w)
		base := ar.DeepCopy()
		delete(ar.Labels, clustersv1alpha1.ProfileLabel)
		require.NoError(t, env.Client.Patch(context.Background(), ar, client.MergeFrom(base)))
		waitLabelled(t, ar, w)
	})

	t.Run("two instances with disjoint selectors", func(t *testing.T) {
		t.Parallel()
		const second = "second"
		startLabeller(t, second)
		w := newWorld(t)
		mine := newAccessRequest(t, w.ns, "suite-ar", clusterRef(w.cluster))
		theirs := newAccessRequest(t, w.ns, "second-ar", clusterRef(w.cluster), withLabel(instanceLabel, second))
		assert.Equal(t, []string{"labeller-" + suiteInstance}, labellerManagers(waitLabelled(t, mine, w)))
		assert.Equal(t, []string{"labeller-" + second}, labellerManagers(waitLabelled(t, theirs, w)))
	})
}

// labellerManagers returns the distinct field managers of ar whose name starts with
// "labeller-": the labeller instances that wrote to it (requests carry the instance's user
// agent, see newManager).
func labellerManagers(ar *clustersv1alpha1.AccessRequest) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range ar.ManagedFields {
		if len(f.Manager) > len("labeller-") && f.Manager[:len("labeller-")] == "labeller-" && !seen[f.Manager] {
			seen[f.Manager] = true
			out = append(out, f.Manager)
		}
	}
	return out
}
