package hosted

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/frontdoor"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// doorUsed writes into cl's Lease what a door pod reports (as cmd/front-door does).
func doorUsed(t *testing.T, cl *clustersv1alpha1.Cluster, pod string, u frontdoor.Usage) {
	t.Helper()
	v, err := json.Marshal(u)
	require.NoError(t, err)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{frontdoor.AnnotationFor(pod): string(v)}}})
	require.NoError(t, err)
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: NamespaceFor(cl.UID), Name: NameFrontDoor}}
	require.NoError(t, env.Client.Patch(t.Context(), lease, client.RawPatch(types.MergePatchType, patch)))
}

// awake marks cl's workloads and its front door rolled out and ready, as a real host would.
func awake(t *testing.T, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	rolledOutNow(t, cl)
	dep := get(t, &appsv1.Deployment{}, NamespaceFor(cl.UID), NameFrontDoor)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1}
	require.NoError(t, env.Client.Status().Update(t.Context(), dep))
}

// ensureUntil ensures cl until check holds for the State (the backend reads the workloads'
// status from its cache, which follows the test's writes); the State returned has the Notices of
// every Ensure until then.
func (h *harness) ensureUntil(t *testing.T, cl *clustersv1alpha1.Cluster, what string, check func(backend.State) bool) backend.State {
	t.Helper()
	var s backend.State
	var notices []backend.Warning
	require.Eventually(t, func() bool {
		s = h.ensure(t, cl)
		notices = append(notices, s.Notices...)
		return check(s)
	}, 10*time.Second, 20*time.Millisecond, what)
	s.Notices = notices
	return s
}

// hibernatingBackend is a backend whose ProviderConfig gives its control planes a front door and
// etcd on a claim: they hibernate on demand, and once idle for idleAfter if set.
func hibernatingBackend(t *testing.T, idleAfter *metav1.Duration) *harness {
	t.Helper()
	h := startBackend(t)
	h.pc.Spec.Hosted.StorageClassName = "standard"
	h.pc.Spec.Hibernation = &providersv1alpha1.HibernationPolicy{IdleAfter: idleAfter}
	return h
}

// etcdServes ensures cl, has its etcd serve, and ensures it again: its API servers are made.
func (h *harness) etcdServes(t *testing.T, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	h.ensure(t, cl)
}

func replicas(t *testing.T, cl *clustersv1alpha1.Cluster) (etcd, api, door int32) {
	t.Helper()
	ns := NamespaceFor(cl.UID)
	return *get(t, &appsv1.StatefulSet{}, ns, NameEtcd).Spec.Replicas, *get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Replicas,
		*get(t, &appsv1.Deployment{}, ns, NameFrontDoor).Spec.Replicas
}

func hibernatedPart(s backend.State) *backend.Part { return s.Part(backend.PartHibernated) }

// TestHibernation: a control plane of a ProviderConfig with spec.hibernation gets a front door
// that its endpoint selects; the annotation hibernates it (etcd and the API server at zero, Ready
// for its consumers), a connection the door reports wakes it, idleness hibernates it again, a
// pinned one stays asleep through connections and wakes when the annotation goes, and the
// operator's own need (an OIDC configuration) wakes it.
func TestHibernation(t *testing.T) {
	h := hibernatingBackend(t, nil)
	// An earlier version's role (the Lease only), made by the operator of another test or by hand:
	// brought up to date.
	earlier := FrontDoorClusterRole()
	earlier.Rules = earlier.Rules[:1]
	if err := env.Client.Create(t.Context(), earlier); apierrors.IsAlreadyExists(err) {
		// Another test's backend may bring it up to date meanwhile: retried on conflict.
		testenv.Update(t.Context(), t, env.Client, get(t, &rbacv1.ClusterRole{}, "", ClusterRoleFrontDoor),
			func(r *rbacv1.ClusterRole) { r.Rules = earlier.Rules })
	} else {
		require.NoError(t, err)
	}
	cl := newCluster("sleepy")
	ns := NamespaceFor(cl.UID)
	h.etcdServes(t, cl)
	ext := get(t, &corev1.Service{}, ns, NameExternal)
	assert.Equal(t, ComponentAPIServer, ext.Spec.Selector[LabelComponent], "the endpoint selects the API servers until the door serves")
	awake(t, cl)
	s := h.ensureUntil(t, cl, "Ready, the endpoint the door", func(s backend.State) bool {
		return s.Ready && s.Reason == backend.ReasonRunning && get(t, &corev1.Service{}, ns, NameExternal).Spec.Selector[LabelComponent] == ComponentFrontDoor
	})
	assert.Nil(t, hibernatedPart(s), "nothing to say: no idle time, no annotation")

	// The door: its Deployment, identity, Lease and policy; the endpoint selects it.
	dep := get(t, &appsv1.Deployment{}, ns, NameFrontDoor)
	pod := dep.Spec.Template.Spec
	assert.Equal(t, image1, pod.Containers[0].Image)
	assert.Equal(t, []string{binDir + "front-door", "--listen=:6443", "--health=:8081", "--upstream=apiserver." + ns + ".svc:443", "--lease=front-door", "--endpoints=apiserver", "--wake-timeout=1m30s"}, pod.Containers[0].Command)
	assert.Equal(t, NameFrontDoor, pod.ServiceAccountName)
	assert.True(t, *pod.AutomountServiceAccountToken, "the door reports to its Lease")
	rb := get(t, &rbacv1.RoleBinding{}, ns, NameFrontDoor)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ClusterRoleFrontDoor}, rb.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: NameFrontDoor, Namespace: ns}}, rb.Subjects)
	role := get(t, &rbacv1.ClusterRole{}, "", ClusterRoleFrontDoor)
	assert.Equal(t, FrontDoorClusterRole().Rules, role.Rules, "an earlier version's brought up to date")
	get(t, &corev1.ServiceAccount{}, ns, NameFrontDoor)
	get(t, &coordinationv1.Lease{}, ns, NameFrontDoor)
	np := get(t, &networkingv1.NetworkPolicy{}, ns, NameFrontDoor)
	assert.Equal(t, map[string]string{LabelManagedBy: ManagedBy, LabelClusterUID: string(cl.UID), LabelComponent: ComponentFrontDoor}, np.Spec.PodSelector.MatchLabels)
	cfg, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	assert.Equal(t, "https://apiserver."+ns+".svc:443", cfg.Host, "awake, the operator's requests go straight to the API servers (not a client's use)")

	// On demand.
	hibernations := backend.Hibernations(Name, backend.ReasonOnDemand)
	cl.Annotations = map[string]string{backend.AnnotationHibernate: backend.HibernateNow}
	s = h.ensure(t, cl)
	require.NotNil(t, hibernatedPart(s))
	assert.True(t, hibernatedPart(s).Ready)
	assert.Equal(t, backend.ReasonOnDemand, hibernatedPart(s).Reason)
	assert.True(t, s.Ready, "its endpoint answers: Ready for its consumers")
	assert.Equal(t, backend.ReasonHibernated, s.Reason)
	require.NotNil(t, s.HibernatedSince)
	require.Len(t, s.Notices, 1)
	assert.Equal(t, backend.ReasonHibernated, s.Notices[0].Reason)
	assert.Equal(t, hibernations+1, backend.Hibernations(Name, backend.ReasonOnDemand))
	e, a, d := replicas(t, cl)
	assert.Equal(t, []int32{0, 0, 1}, []int32{e, a, d}, "etcd and the API server at zero, the door stays")
	require.NotNil(t, record(t, cl).Hibernated, "recorded: a restarted operator keeps it hibernated")
	cfg, err = h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	assert.Equal(t, "https://apiserver-external."+ns+".svc:443", cfg.Host, "hibernated, the operator's requests go through the door (they wake it)")
	assert.Equal(t, "apiserver."+ns+".svc", cfg.ServerName, "the name the serving certificate has")
	s = h.ensure(t, cl)
	assert.Equal(t, backend.ReasonHibernated, s.Reason, "stays hibernated")
	assert.Empty(t, s.Notices)

	// A connection through the door wakes it; the Lease's change notifies the Cluster.
	for len(h.notified) > 0 {
		<-h.notified
	}
	wakes := backend.Wakes(Name, backend.TriggerRequest)
	opened := time.Now()
	doorUsed(t, cl, "front-door-a", frontdoor.Usage{Open: 1, LastOpened: opened, LastUsed: opened})
	require.Eventually(t, func() bool {
		select {
		case r := <-h.notified:
			return r.Name == cl.Name
		default:
			return false
		}
	}, 10*time.Second, 10*time.Millisecond, "the Lease's change notifies")
	s = h.ensureUntil(t, cl, "woken", func(s backend.State) bool { return s.Reason == backend.ReasonWaking })
	assert.True(t, s.Ready, "Ready while it wakes: requests wait at the door")
	e, a, _ = replicas(t, cl)
	assert.Equal(t, []int32{1, 1}, []int32{e, a})
	awake(t, cl)
	s = h.ensureUntil(t, cl, "served", func(s backend.State) bool { return s.Reason == backend.ReasonRunning })
	require.Len(t, s.Notices, 1)
	assert.Equal(t, backend.ReasonWoken, s.Notices[0].Reason)
	assert.Contains(t, s.Notices[0].Message, "a client connected to its endpoint")
	assert.Equal(t, wakes+1, backend.Wakes(Name, backend.TriggerRequest))
	assert.Equal(t, backend.ReasonAwake, hibernatedPart(s).Reason)
	s = h.ensure(t, cl)
	assert.Equal(t, backend.ReasonRunning, s.Reason, "the annotation hibernated it once: a request woke it, it stays awake")

	// Idle: no connection open and none for idleAfter. An open connection of a door pod that
	// exists keeps it awake.
	h.pc.Spec.Hibernation.IdleAfter = &metav1.Duration{Duration: time.Second}
	doorPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "front-door-a", Labels: dep.Spec.Template.Labels},
		Spec: dep.Spec.Template.Spec}
	require.NoError(t, env.Client.Create(t.Context(), doorPod))
	h.cachedPods(t, cl, 1)
	doorUsed(t, cl, "front-door-a", frontdoor.Usage{Open: 1, LastOpened: opened, LastUsed: time.Now().Add(-time.Minute)})
	h.leaseSeen(t, cl, `"open":1`)
	s = h.ensure(t, cl)
	assert.Equal(t, backend.ReasonRunning, s.Reason, "a watch is open")
	assert.Contains(t, hibernatedPart(s).Message, "hibernates after 1s without a client connection")
	doorUsed(t, cl, "front-door-a", frontdoor.Usage{Open: 0, LastOpened: opened, LastUsed: time.Now().Add(-time.Minute)})
	s = h.ensureUntil(t, cl, "idle", func(s backend.State) bool { return s.Reason == backend.ReasonHibernated })
	assert.Equal(t, backend.ReasonIdle, hibernatedPart(s).Reason)
	assert.Contains(t, hibernatedPart(s).Message, "after 1s without a client")

	// A connection the door reports open while it sleeps for idleness wakes it, even one that
	// opened before the hibernation: the door's report came after the last read before the
	// scale-down.
	wakes = backend.Wakes(Name, backend.TriggerRequest)
	doorUsed(t, cl, "front-door-a", frontdoor.Usage{Open: 1, LastOpened: opened, LastUsed: time.Now()})
	h.leaseSeen(t, cl, `"open":1`)
	s = h.ensure(t, cl)
	assert.Equal(t, backend.ReasonWaking, s.Reason, "a connection open at the door wakes an idle hibernation")
	awake(t, cl)
	h.ensureUntil(t, cl, "served", func(s backend.State) bool { return s.Reason == backend.ReasonRunning })
	assert.Equal(t, wakes+1, backend.Wakes(Name, backend.TriggerRequest))
	doorUsed(t, cl, "front-door-a", frontdoor.Usage{Open: 0, LastOpened: opened, LastUsed: time.Now().Add(-time.Minute)})
	s = h.ensureUntil(t, cl, "idle again", func(s backend.State) bool { return s.Reason == backend.ReasonHibernated })
	assert.Equal(t, backend.ReasonIdle, hibernatedPart(s).Reason)

	// The operator's own need wakes it: an OIDC configuration for its API servers.
	wakes = backend.Wakes(Name, backend.TriggerOperator)
	// (It cannot read the metrics of an API server that envtest does not run: an error here.)
	_, _ = h.b.SetJWTAuthenticators(t.Context(), cl, []apiserverv1.JWTAuthenticator{})
	s = h.ensure(t, cl)
	assert.Equal(t, backend.ReasonWaking, s.Reason)
	awake(t, cl)
	h.ensureUntil(t, cl, "served", func(s backend.State) bool { return s.Reason == backend.ReasonRunning })
	assert.Equal(t, wakes+1, backend.Wakes(Name, backend.TriggerOperator))

	// A door pod that is gone does not hold it awake with the connections it reported.
	doorUsed(t, cl, "front-door-a", frontdoor.Usage{Open: 3, LastOpened: opened, LastUsed: time.Now().Add(-time.Minute)})
	require.NoError(t, env.Client.Delete(t.Context(), doorPod, client.GracePeriodSeconds(0)))
	h.cachedPods(t, cl, 0)
	s = h.ensureUntil(t, cl, "idle, the door pod gone", func(s backend.State) bool { return s.Reason == backend.ReasonHibernated })
	assert.Equal(t, backend.ReasonIdle, hibernatedPart(s).Reason)

	// Pinned: connections do not wake it; removing the annotation does.
	cl.Annotations = map[string]string{backend.AnnotationHibernate: backend.HibernatePinned}
	s = h.ensure(t, cl)
	assert.Equal(t, backend.ReasonOnDemand, hibernatedPart(s).Reason, "pinned from now on")
	assert.Contains(t, hibernatedPart(s).Message, "Pinned")
	doorUsed(t, cl, "front-door-b", frontdoor.Usage{Open: 1, LastOpened: time.Now(), LastUsed: time.Now()})
	h.leaseSeen(t, cl, "front-door-b")
	s = h.ensure(t, cl)
	assert.Equal(t, backend.ReasonHibernated, s.Reason, "a connection does not wake a pinned control plane")
	cl.Annotations = nil
	s = h.ensure(t, cl)
	assert.Equal(t, backend.ReasonWaking, s.Reason, "the annotation removed")
	assert.Equal(t, backend.TriggerAnnotation, record(t, cl).Waking.Trigger)
}

// TestHibernationNeedsADoorAndAClaim: without spec.hibernation the annotation is ignored, and
// says what to set; a control plane whose etcd has no claim never hibernates.
func TestHibernationNeedsADoorAndAClaim(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("nodoor")
	cl.Annotations = map[string]string{backend.AnnotationHibernate: backend.HibernateNow}
	h.etcdServes(t, cl)
	rolledOutNow(t, cl)
	s := h.ensureUntil(t, cl, "Ready", func(s backend.State) bool { return s.Ready && s.Reason == backend.ReasonRunning })
	require.NotNil(t, hibernatedPart(s))
	assert.False(t, hibernatedPart(s).Ready)
	assert.Contains(t, hibernatedPart(s).Message, "set spec.hibernation on ProviderConfig hosted")
	ext := get(t, &corev1.Service{}, NamespaceFor(cl.UID), NameExternal)
	assert.Equal(t, ComponentAPIServer, ext.Spec.Selector[LabelComponent], "no door: the endpoint is the API servers")

	h.pc.Spec.Hibernation = &providersv1alpha1.HibernationPolicy{}
	s = h.ensure(t, cl)
	assert.Contains(t, hibernatedPart(s).Message, "its etcd keeps its data on an emptyDir")
	assert.Equal(t, backend.ReasonRunning, s.Reason, "not hibernated")
	ext = get(t, &corev1.Service{}, NamespaceFor(cl.UID), NameExternal)
	assert.Equal(t, ComponentAPIServer, ext.Spec.Selector[LabelComponent], "spec.hibernation turned on: the endpoint stays on the API servers until the door serves")
	get(t, &appsv1.Deployment{}, NamespaceFor(cl.UID), NameFrontDoor)
}

// cachedPods waits until the backend's cache holds n front door pods of cl's namespace.
func (h *harness) cachedPods(t *testing.T, cl *clustersv1alpha1.Cluster, n int) {
	t.Helper()
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		pods := &corev1.PodList{}
		return hst.cache.List(t.Context(), pods, client.InNamespace(NamespaceFor(cl.UID)), client.MatchingLabels{LabelComponent: ComponentFrontDoor}) == nil && len(pods.Items) == n
	}, 10*time.Second, 10*time.Millisecond)
}

// leaseSeen waits until the backend's cache holds cl's Lease with an annotation value containing what.
func (h *harness) leaseSeen(t *testing.T, cl *clustersv1alpha1.Cluster, what string) {
	t.Helper()
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		l := &coordinationv1.Lease{}
		if hst.cache.Get(t.Context(), client.ObjectKey{Namespace: NamespaceFor(cl.UID), Name: NameFrontDoor}, l) != nil {
			return false
		}
		for k, v := range l.Annotations {
			if strings.Contains(k+v, what) {
				return true
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond)
}

// TestSnapshotWakes: a demand to hibernate waits for the door to serve; a snapshot of a hibernated control plane (one before its deletion, when no
// Ensure runs any more) wakes it by itself: the record says it wakes and etcd and the API server
// are scaled up; the snapshot is in progress meanwhile.
func TestSnapshotWakes(t *testing.T) {
	h := hibernatingBackend(t, nil)
	cl := newCluster("snapshot-wakes")
	cl.Annotations = map[string]string{backend.AnnotationHibernate: backend.HibernateNow}
	h.etcdServes(t, cl)
	// Serving, but its door does not yet: the demand waits (the endpoint must answer asleep).
	rolledOutNow(t, cl)
	s := h.ensureUntil(t, cl, "Ready", func(s backend.State) bool { return s.Ready && s.Reason == backend.ReasonRunning })
	assert.Nil(t, s.HibernatedSince)
	assert.Nil(t, record(t, cl).Hibernated, "not hibernated before its door serves")
	awake(t, cl)
	h.ensureUntil(t, cl, "hibernated once the door serves", func(s backend.State) bool { return s.Reason == backend.ReasonHibernated })

	_, err := h.b.Snapshot(t.Context(), cl, backend.Retention{})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	e, a, _ := replicas(t, cl)
	assert.Equal(t, []int32{1, 1}, []int32{e, a}, "scaled up without an Ensure")
	ps := record(t, cl)
	assert.Nil(t, ps.Hibernated)
	require.NotNil(t, ps.Waking)
	assert.Equal(t, backend.TriggerOperator, ps.Waking.Trigger)
}

// TestHibernationTurnedOff: spec.hibernation removed from the ProviderConfig of a hibernated
// control plane wakes it (no door would answer for it) and the endpoint goes back to the API
// servers, the door at zero.
func TestHibernationTurnedOff(t *testing.T) {
	h := hibernatingBackend(t, nil)
	cl := newCluster("turned-off")
	cl.Annotations = map[string]string{backend.AnnotationHibernate: backend.HibernateNow}
	h.etcdServes(t, cl)
	awake(t, cl)
	h.ensureUntil(t, cl, "hibernated", func(s backend.State) bool { return s.Reason == backend.ReasonHibernated })

	h.pc.Spec.Hibernation = nil
	s := h.ensure(t, cl)
	assert.Equal(t, backend.ReasonWaking, s.Reason, "woken: no door answers for it any more")
	e, a, d := replicas(t, cl)
	assert.Equal(t, []int32{1, 1, 0}, []int32{e, a, d}, "etcd and the API server up, the door at zero")
	ext := get(t, &corev1.Service{}, NamespaceFor(cl.UID), NameExternal)
	assert.Equal(t, ComponentAPIServer, ext.Spec.Selector[LabelComponent], "the endpoint selects the API servers again")
	assert.Nil(t, record(t, cl).Hibernated)
}

// TestHibernationIdleClockStartsAtFirstServe: a control plane that first serves more than
// idleAfter after its door's Lease was made (a slow start) is not hibernated the moment it
// serves: its idle clock starts there, and it hibernates once idle for idleAfter from then.
func TestHibernationIdleClockStartsAtFirstServe(t *testing.T) {
	h := hibernatingBackend(t, &metav1.Duration{Duration: time.Second})
	cl := newCluster("slow-start")
	ns := NamespaceFor(cl.UID)
	h.etcdServes(t, cl)
	lease := get(t, &coordinationv1.Lease{}, ns, NameFrontDoor)
	// The start is slower than idleAfter: the Lease (the idle clock's start before this fix) is
	// two idleAfters old before the control plane serves.
	require.Eventually(t, func() bool { return time.Since(lease.CreationTimestamp.Time) > 2*time.Second },
		10*time.Second, 50*time.Millisecond)
	awake(t, cl)
	// The first Ensure that finds it serving behind its door decides.
	s := h.ensureUntil(t, cl, "serving behind its door", func(s backend.State) bool {
		return s.Ready && (s.Reason == backend.ReasonRunning || s.Reason == backend.ReasonHibernated) &&
			get(t, &corev1.Service{}, ns, NameExternal).Spec.Selector[LabelComponent] == ComponentFrontDoor
	})
	assert.Equal(t, backend.ReasonRunning, s.Reason, "not hibernated the moment it first serves")
	ps := record(t, cl)
	require.NotNil(t, ps.WokeAt, "the record keeps when it first served: a restarted operator keeps the clock")
	assert.True(t, ps.WokeAt.After(lease.CreationTimestamp.Time.Add(2*time.Second)), "%v", ps.WokeAt)

	s = h.ensureUntil(t, cl, "idle a second after it first served", func(s backend.State) bool { return s.Reason == backend.ReasonHibernated })
	assert.Equal(t, backend.ReasonIdle, hibernatedPart(s).Reason)
}
