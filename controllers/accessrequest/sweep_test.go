package accessrequest_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/test/operator"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestRestoreKeepsRevoked is issue 42's point 5 with the real local backend: a
// request granted, a snapshot, the request deleted (its kubeconfig gets 401), the snapshot
// restored in place. The restore brings the request's ServiceAccount and binding back, so
// without the grant sweep its leaked kubeconfig works again; with it, once the Cluster says the
// sweep is done (Event GrantsSwept, annotation), the ServiceAccount is gone and the kubeconfig
// still gets 401, while a request that existed all along still works and one granted after the
// snapshot is granted again at once.
func TestRestoreKeepsRevoked(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	op := operator.Start(t, env, operator.Options{ProviderName: testProvider, Labeller: true})
	cl := newCluster(t, ns, "restored", newProviderConfig(t))
	view := clustersv1alpha1.TokenConfig{RoleRefs: []common.RoleRef{{Kind: "ClusterRole", Name: "view"}}}
	kept := newRequest(t, ns, "kept", cl.Name, view)
	revoked := newRequest(t, ns, "revoked", cl.Name, view)
	users := map[string]func() error{}
	for _, ar := range []*clustersv1alpha1.AccessRequest{kept, revoked} {
		user := kubeconfigClient(t, secretOf(t, waitRequest(t, client.ObjectKeyFromObject(ar), "Granted", isGranted)))
		users[ar.Name] = func() error {
			_, err := user.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
			return err
		}
		require.True(t, awaitStatus(t, 200, ar.Name+"'s kubeconfig lists pods", users[ar.Name]))
	}

	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cl), cl))
	snap, err := op.Local.Snapshot(ctx, cl, backend.KeepNewest(10))
	require.NoError(t, err)

	late := newRequest(t, ns, "late", cl.Name, view) // granted after the snapshot
	lateSecret := secretOf(t, waitRequest(t, client.ObjectKeyFromObject(late), "Granted", isGranted))
	require.NoError(t, env.Client.Delete(ctx, revoked))
	gone(t, revoked)
	require.True(t, awaitStatus(t, 401, "the deleted request's kubeconfig", users[revoked.Name]))

	testenv.Update(ctx, t, env.Client, cl, func(cl *clustersv1alpha1.Cluster) {
		metav1.SetMetaDataAnnotation(&cl.ObjectMeta, backend.AnnotationRestore, snap.Name)
	})
	restored := &clustersv1alpha1.Cluster{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(cl), restored))
		assert.Equal(c, common.PhaseReady, restored.Status.Phase)
		if r := meta.FindStatusCondition(restored.Status.Conditions, cluster.ConditionRestored); assert.NotNil(c, r) {
			assert.Equal(c, cluster.ReasonRestoreDone, r.Reason, r.Message)
			assert.Contains(c, r.Message, snap.Name)
		}
		marker := accessrequest.SweepMarker(restored)
		assert.NotEmpty(c, marker)
		assert.Equal(c, marker, restored.Annotations[accessrequest.AnnotationGrantsSwept], "the sweep is recorded for this restore")
	}, within, poll, "restored, Ready and swept")

	sa := "ar-" + accessrequest.RequestID("default", testProvider, ns, revoked.Name)
	e := awaitSweptEvent(t, cl, "ServiceAccount "+accessrequest.DefaultNamespace+"/"+sa)
	assert.Equal(t, corev1.EventTypeNormal, e.Type)
	assert.Contains(t, e.Note, "2 object(s)", "the ServiceAccount and its binding")
	assert.Contains(t, e.Note, "the 2 AccessRequest(s) of the Cluster are granted again now")

	admin := adminClient(t, op.Local, restored)
	_, err = admin.CoreV1().ServiceAccounts(accessrequest.DefaultNamespace).Get(ctx, sa, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the deleted request's ServiceAccount, brought back by the restore, is deleted again: %v", err)
	keptSA := "ar-" + accessrequest.RequestID("default", testProvider, ns, kept.Name)
	_, err = admin.CoreV1().ServiceAccounts(accessrequest.DefaultNamespace).Get(ctx, keptSA, metav1.GetOptions{})
	assert.NoError(t, err, "the ServiceAccount of the request that exists stays")
	// The API server looks ServiceAccounts up through an informer: the deletion may take it a
	// moment. Without the sweep the ServiceAccount stays and this never turns 401.
	assert.True(t, awaitStatus(t, 401, "the deleted request's kubeconfig after the restore", users[revoked.Name]))
	assert.True(t, awaitStatus(t, 200, "the kubeconfig of the request that existed all along", users[kept.Name]))

	// The request granted after the snapshot lost its ServiceAccount to the restore: it is
	// granted again, with a new token, without waiting for its periodic check (GrantCheck).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s := &corev1.Secret{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(lateSecret), s))
		assert.NotEqual(c, string(lateSecret.Data[clustersv1alpha1.SecretKeyToken]), string(s.Data[clustersv1alpha1.SecretKeyToken]), "a new token")
		lateSecret = s
	}, within, poll, "the request granted after the snapshot is granted again")
	lateUser := kubeconfigClient(t, lateSecret)
	assert.True(t, awaitStatus(t, 200, "the late request's new kubeconfig", func() error {
		_, err := lateUser.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		return err
	}))
}

// TestOrphanSweep: a request deleted while the operator was down, its finalizer removed by hand,
// left its ServiceAccount and binding in the cluster; the operator, started again, removes them
// (a Warning Event GrantsSwept on the Cluster names them), and its kubeconfig gets 401. The
// grants of a request that exists stay. The cluster is one of the fake backend.
func TestOrphanSweep(t *testing.T) {
	ctx := t.Context()
	ns := env.Namespace(t)
	var (
		cl                   *clustersv1alpha1.Cluster
		orphaned, stays      *clustersv1alpha1.AccessRequest
		orphanUser, stayUser func() error
	)
	fake := backendtest.New(backendtest.Options{Server: clusters.Config})
	perm := clustersv1alpha1.TokenConfig{
		Permissions: []clustersv1alpha1.PermissionsRequest{{Rules: []rbacv1.PolicyRule{rule([]string{""}, []string{"configmaps"}, []string{"list"})}}},
	}
	cl = newCluster(t, ns, "swept", newProviderConfig(t))
	t.Run("granted, then the operator stops", func(t *testing.T) {
		operator.Start(t, env, operator.Options{ProviderName: testProvider, Labeller: true, Backend: fake})
		orphaned = newRequest(t, ns, "orphaned", cl.Name, perm)
		stays = newRequest(t, ns, "stays", cl.Name, perm)
		for _, ar := range []*clustersv1alpha1.AccessRequest{orphaned, stays} {
			user := kubeconfigClient(t, secretOf(t, waitRequest(t, client.ObjectKeyFromObject(ar), "Granted", isGranted)))
			call := func() error {
				_, err := user.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
				return err
			}
			require.True(t, awaitStatus(t, 200, ar.Name+"'s kubeconfig", call))
			if ar == orphaned {
				orphanUser = call
			} else {
				stayUser = call
			}
		}
	})
	require.NotNil(t, orphanUser, "the first subtest granted the requests")

	// Deleted while no operator runs, the finalizer removed by hand: nothing revoked it.
	require.NoError(t, env.Client.Delete(ctx, orphaned))
	testenv.Update(ctx, t, env.Client, orphaned, func(ar *clustersv1alpha1.AccessRequest) { ar.Finalizers = nil })
	gone(t, orphaned)
	require.True(t, awaitStatus(t, 200, "the orphan's kubeconfig works while nothing sweeps", orphanUser))

	operator.Start(t, env, operator.Options{ProviderName: testProvider, Labeller: true, Backend: fake})
	sa := "ar-" + accessrequest.RequestID("default", testProvider, ns, orphaned.Name)
	e := awaitSweptEvent(t, cl, "ServiceAccount "+accessrequest.DefaultNamespace+"/"+sa)
	assert.Equal(t, corev1.EventTypeWarning, e.Type)
	assert.Contains(t, e.Note, "Removed 3 object(s)", "the ServiceAccount, its ClusterRole and binding")
	assert.NotContains(t, e.Note, "ar-"+accessrequest.RequestID("default", testProvider, ns, stays.Name))
	assert.True(t, awaitStatus(t, 401, "the orphan's kubeconfig after the sweep", orphanUser))
	assert.True(t, awaitStatus(t, 200, "the kubeconfig of the request that exists", stayUser))
}

// awaitSweptEvent waits for the Event GrantsSwept about cl whose note names what, and returns it.
// (The fake backend's clusters share one API server: a sweep may also remove what other tests
// left there, in an Event of its own.)
func awaitSweptEvent(t *testing.T, cl *clustersv1alpha1.Cluster, what string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list := &eventsv1.EventList{}
		require.NoError(c, env.Client.List(t.Context(), list, client.InNamespace(cl.Namespace)))
		for _, e := range list.Items {
			if e.Regarding.Name == cl.Name && e.Reason == accessrequest.ReasonGrantsSwept && strings.Contains(e.Note, what) {
				found = e
				return
			}
		}
		c.Errorf("no Event %s about Cluster %s names %s yet", accessrequest.ReasonGrantsSwept, cl.Name, what)
	}, within, poll)
	return found
}
