package local

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// testIdleAfter is the idle time of the hibernation tests' profile (the API asks for at least
// 10s; the backend takes any).
const testIdleAfter = 3 * time.Second

// hibernating is a profile whose clusters hibernate after testIdleAfter without a client.
func hibernating(b *Backend) backend.Backend {
	return b.ForProfile(&providersv1alpha1.ProviderConfig{Spec: providersv1alpha1.ProviderConfigSpec{
		Hibernation: &providersv1alpha1.HibernationPolicy{IdleAfter: &metav1.Duration{Duration: testIdleAfter}},
	}})
}

// notices collects the Notices of every Ensure through it, as the Cluster reconciler turns them
// into Events.
type notices struct {
	backend.Backend
	mu   sync.Mutex
	seen []backend.Warning
}

func (n *notices) Ensure(ctx context.Context, cl *clustersv1alpha1.Cluster, want backend.Want) (backend.State, error) {
	s, err := n.Backend.Ensure(ctx, cl, want)
	n.mu.Lock()
	n.seen = append(n.seen, s.Notices...)
	n.mu.Unlock()
	return s, err
}

// reasons are the reasons of the notices seen so far.
func (n *notices) reasons() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, w := range n.seen {
		out = append(out, w.Reason)
	}
	return out
}

// awaitRecorded waits until an Ensure through be has reported a Notice of reason and counted
// holds: both are recorded by the goroutine that hibernates or wakes the cluster, after the state
// an await saw.
func awaitRecorded(t *testing.T, be *notices, cl *clustersv1alpha1.Cluster, want backend.Want, reason string, counted func() bool) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		_, err := be.Ensure(t.Context(), cl, want)
		require.NoError(c, err)
		assert.Contains(c, be.reasons(), reason, "a Notice")
		assert.True(c, counted(), "the metric counted it")
	}, readyWithin, 100*time.Millisecond)
}

// asleep: the cluster is hibernated for reason.
func asleep(reason string) func(backend.State) bool {
	return func(s backend.State) bool {
		p := s.Part(backend.PartHibernated)
		return s.HibernatedSince != nil && p != nil && p.Ready && p.Reason == reason
	}
}

// awake: the cluster is awake and complete.
func awake(s backend.State) bool {
	p := s.Part(backend.PartHibernated)
	return complete(s) && s.HibernatedSince == nil && (p == nil || !p.Ready)
}

// oneRequest is one `kubectl get ns` with cfg (testenv.ListNamespacesOnce), whose TLS handshake
// waits as long as the front door holds a connection: a wake on this machine under load can take
// longer than kubectl's 10 s (docs/hibernation.md); BenchmarkWake measures with its defaults.
func oneRequest(t *testing.T, cfg *rest.Config) (time.Duration, error) {
	return testenv.ListNamespacesOnce(t.Context(), cfg, wakeTimeout)
}

// tokenConfig makes a ServiceAccount with the view role in the cluster of cs and returns a
// config with a token of it for endpoint: what an AccessRequest's kubeconfig holds.
func tokenConfig(t *testing.T, cs kubernetes.Interface, endpoint string, ca []byte) *rest.Config {
	t.Helper()
	ctx := t.Context()
	_, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "reader"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "view"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "reader"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// view does not list namespaces: a binding that does.
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "namespace-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "namespace-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "namespace-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "default", Name: "reader"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	tok, err := cs.CoreV1().ServiceAccounts("default").CreateToken(ctx, "reader",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err)
	return &rest.Config{Host: endpoint, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
}

// TestHibernation runs one real cluster through hibernation: idle after its profile's idleAfter
// (the operator's health checks and its controller manager do not count), woken by the first
// request of a token kubeconfig issued before (no error, same endpoint and CA, the data there);
// on demand with the annotation, "pinned" refusing connections, its removal waking it; kept
// hibernated across a restart of the operator; holding no place of --local-max-clusters, a wake
// waiting for one.
func TestHibernation(t *testing.T) {
	stateDir := t.TempDir()
	cl := newCluster("sleepy")
	h := startBackend(t, stateDir, 1, cl)
	be := &notices{Backend: hibernating(h.b)}
	want := backend.Want{Version: "1.37.1"}
	s := h.awaitOn(be, cl, want, "complete", complete)
	endpoint, ca := s.Endpoint, s.CABundle
	require.Equal(t, backend.ReasonAwake, s.Part(backend.PartHibernated).Reason)

	cfg, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	rt, err := rest.TransportFor(cfg)
	require.NoError(t, err)
	admin := *cfg
	admin.Transport, admin.TLSClientConfig = rt, rest.TLSClientConfig{}
	cs := kubernetes.NewForConfigOrDie(&admin)
	_, err = cs.CoreV1().ConfigMaps("default").Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "before"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	token := tokenConfig(t, cs, endpoint, ca)
	hibernations := backend.Hibernations(Name, backend.ReasonIdle)
	wakes := backend.Wakes(Name, triggerRequest)
	utilnet.CloseIdleConnectionsFor(rt) // the admin client leaves: nobody is connected

	t.Run("idle", func(t *testing.T) {
		pids := h.b.PIDs(cl.UID)
		s := h.awaitOn(be, cl, want, "hibernated after idleAfter", asleep(backend.ReasonIdle))
		assert.True(t, s.Ready, "a hibernated cluster is Ready: its endpoint answers")
		assert.Equal(t, backend.ReasonHibernated, s.Reason)
		assert.Equal(t, endpoint, s.Endpoint)
		for name, pid := range pids {
			assert.True(t, processGone(pid), "%s (pid %d) stopped", name, pid)
		}
		assert.Empty(t, h.b.PIDs(cl.UID))
		assert.True(t, portOpen(endpoint), "the endpoint listens")
		// The Notice and the metric are recorded by the hibernating goroutine: awaited.
		awaitRecorded(t, be, cl, want, backend.ReasonHibernated, func() bool {
			return backend.Hibernations(Name, backend.ReasonIdle) == hibernations+1
		})
		m, err := readMeta(h.b.Dir(cl.UID))
		require.NoError(t, err)
		require.NotNil(t, m.Hibernated, "recorded")
	})

	t.Run("the first request wakes it", func(t *testing.T) {
		took, err := oneRequest(t, token)
		require.NoError(t, err, "the token kubeconfig issued before hibernation works on the first request")
		t.Logf("first request after hibernation answered in %s", took)
		got, err := kubernetes.NewForConfigOrDie(token).CoreV1().ConfigMaps("default").Get(t.Context(), "before", metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "v", got.Data["k"], "the data from before")
		s := h.awaitOn(be, cl, want, "awake", awake)
		assert.Equal(t, endpoint, s.Endpoint)
		assert.Equal(t, ca, s.CABundle, "the same CA")
		awaitRecorded(t, be, cl, want, backend.ReasonWoken, func() bool {
			return backend.Wakes(Name, triggerRequest) == wakes+1
		})
	})

	t.Run("on demand, pinned, and the annotation removed", func(t *testing.T) {
		on := cl.DeepCopy()
		on.Annotations = map[string]string{backend.AnnotationHibernate: backend.HibernateNow}
		h.awaitOn(be, on, want, "hibernated on demand", asleep(backend.ReasonOnDemand))
		_, err := oneRequest(t, token)
		require.NoError(t, err, "a request wakes a cluster hibernated with \"true\"")
		h.awaitOn(be, on, want, "awake, the annotation still there", awake)

		pinned := cl.DeepCopy()
		pinned.Annotations = map[string]string{backend.AnnotationHibernate: backend.HibernatePinned}
		s := h.awaitOn(be, pinned, want, "hibernated, pinned", asleep(backend.ReasonOnDemand))
		assert.Contains(t, s.Part(backend.PartHibernated).Message, "Pinned")
		_, err = oneRequest(t, token)
		require.Error(t, err, "a pinned cluster refuses connections")
		_, err = h.b.AdminConfig(t.Context(), pinned)
		require.ErrorContains(t, err, "pinned")
		assert.Empty(t, h.b.PIDs(cl.UID), "nothing woke it")

		h.awaitOn(be, cl, want, "awake once the annotation is gone", awake)
	})

	outer := t // the second backend must outlive this subtest
	t.Run("a restarted operator keeps it hibernated", func(t *testing.T) {
		utilnet.CloseIdleConnectionsFor(rt)
		h.awaitOn(be, cl, want, "hibernated after idleAfter", asleep(backend.ReasonIdle))
		h.stop()
		// The record as an operator from before the front door wrote it: no port of the API
		// server's own. The adopted cluster gets one; its endpoint stays (checked at its wake,
		// next).
		dir := h.b.Dir(cl.UID)
		m, err := readMeta(dir)
		require.NoError(t, err)
		m.Ports.Internal = 0
		require.NoError(t, writeMeta(dir, m))
		h = startBackend(outer, stateDir, 1, cl)
		be = &notices{Backend: hibernating(h.b)}
		s := h.awaitOn(be, cl, want, "adopted hibernated", asleep(backend.ReasonIdle))
		assert.Equal(t, endpoint, s.Endpoint)
		m, err = readMeta(dir)
		require.NoError(t, err)
		assert.NotZero(t, m.Ports.Internal, "a port of its own given at adoption")
		assert.NotEqual(t, m.Ports.APIServer, m.Ports.Internal)
		assert.Empty(t, h.b.PIDs(cl.UID), "adopted without starting a process")
	})

	t.Run("hibernated clusters hold no place; a wake waits for one", func(t *testing.T) {
		// Of a profile without hibernation: with the test's 3 s idleAfter, it would hibernate
		// itself within the wait below and free its place.
		other := newCluster("other")
		h.awaitOn(h.b, other, want, "another cluster in the place the hibernated one left", complete)
		type answer struct {
			took time.Duration
			err  error
		}
		got := make(chan answer, 1)
		go func() {
			took, err := oneRequest(t, token)
			got <- answer{took, err}
		}()
		// The request waits: the place is taken.
		require.Never(t, func() bool { return len(got) > 0 }, 3*time.Second, 100*time.Millisecond, "answered while no place was free")
		gone, err := h.b.Delete(t.Context(), other)
		require.NoError(t, err)
		require.True(t, gone)
		select {
		case a := <-got:
			require.NoError(t, a.err, "answered once a place freed")
		case <-time.After(wakeTimeout):
			t.Fatal("the held request was not answered after the place freed")
		}
		h.awaitOn(be, cl, want, "awake", awake)
	})
}
