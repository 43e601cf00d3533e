package hosted

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// requests counts the requests a host client makes, by verb, while counting.
type requests struct {
	mu       sync.Mutex
	counting bool
	seen     map[string][]string
}

func (r *requests) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		r.mu.Lock()
		if r.counting && req.URL.Query().Get("watch") != "true" {
			verb := req.Method
			if verb == http.MethodGet && isList(req.URL.Path) {
				verb = "LIST"
			}
			r.seen[verb] = append(r.seen[verb], req.URL.Path)
		}
		r.mu.Unlock()
		return rt.RoundTrip(req)
	})
}

// isList reports whether path names a collection (…/namespaces/x/secrets) rather than an object.
func isList(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	// /api/v1/<res> | /api/v1/<res>/<name> | /api/v1/namespaces/<ns>/<res>[/<name>]; /apis adds a group.
	if parts[0] == "apis" {
		parts = parts[1:]
	}
	if len(parts) < 3 {
		return false
	}
	parts = parts[2:]
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		parts = parts[2:]
	}
	return len(parts) == 1
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// counted runs f with the requests counted, and returns them by verb.
func (r *requests) counted(f func()) map[string][]string {
	r.mu.Lock()
	r.counting, r.seen = true, map[string][]string{}
	r.mu.Unlock()
	f()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counting = false
	return r.seen
}

// readyNow ensures cl until its control plane is Ready (envtest runs no pod: the test marks the
// workloads rolled out, and ends the first maintenance Job as failed, as Kubernetes would) and
// until the backend's cache holds what it wrote last.
func readyNow(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	rolledOutNow(t, cl)
	ns := NamespaceFor(cl.UID)
	maintain := namesFor(ns).maintain
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		s := h.ensure(t, cl)
		job := &batchv1.Job{}
		if env.Client.Get(t.Context(), client.ObjectKey{Namespace: BackupNamespace, Name: maintain}, job) == nil &&
			job.DeletionTimestamp == nil && len(job.Status.Conditions) == 0 {
			h.endJob(t, maintain, batchv1.JobFailed, "")
		}
		assert.True(c, s.Ready, s.Message)
		e := record(t, cl).Etcd
		assert.True(c, e != nil && !e.Running && e.Failures > 0, "the first maintenance Job ended")
	}, 30*time.Second, 50*time.Millisecond)
	forceGone(t, maintain)
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		h.ensure(t, cl)
		cacheCaughtUp(t, c, hst, ns)
	}, 10*time.Second, 50*time.Millisecond)
}

// cacheCaughtUp asserts that the backend's cache holds the objects of namespace ns as the API
// server does.
func cacheCaughtUp(t *testing.T, c *assert.CollectT, hst *host, ns string) {
	for _, kind := range []string{"ConfigMap", "Service", "StatefulSet", "Deployment"} {
		list := &metav1.PartialObjectMetadataList{}
		gv := corev1.SchemeGroupVersion
		if kind == "StatefulSet" || kind == "Deployment" {
			gv = appsv1.SchemeGroupVersion
		}
		list.SetGroupVersionKind(gv.WithKind(kind + "List"))
		require.NoError(t, env.Client.List(t.Context(), list, client.InNamespace(ns)))
		for _, o := range list.Items {
			cached := &metav1.PartialObjectMetadata{}
			cached.SetGroupVersionKind(gv.WithKind(kind))
			if assert.NoError(c, hst.cache.Get(t.Context(), client.ObjectKeyFromObject(&o), cached), kind+" "+o.Name) {
				assert.Equal(c, o.ResourceVersion, cached.ResourceVersion, kind+" "+o.Name)
			}
		}
	}
}

// TestSteadyStateIsFree: an Ensure of an unchanged, Ready control plane makes no request at all
// (the cache's watches, started before, do not count): workloads and the rest from the cache, the
// record from memory while the cache shows its resourceVersion, and its Secrets — which the operator
// may neither list nor watch (deploy/scope_test.go TestHostedReads) — from memory for
// Options.SecretRecheck after they were read or written; after that they are read again, and a
// deleted one made anew. And the control plane was made in one pass: its workloads were never
// rolled.
func TestSteadyStateIsFree(t *testing.T) {
	var counter requests
	h := startBackendWith(t, func(o *Options) {
		cfg := rest.CopyConfig(env.Config)
		cfg.WrapTransport = counter.wrap
		o.Platform = cfg
		o.SecretRecheck = time.Hour
	})
	cl := newCluster("steady")
	readyNow(t, h, cl)

	seen := counter.counted(func() {
		s := h.ensure(t, cl)
		assert.True(t, s.Ready, s.Message)
	})
	for _, verb := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, "LIST"} {
		assert.Empty(t, seen[verb], "%s requests of a steady Ensure", verb)
	}

	t.Run("creation is direct", func(t *testing.T) {
		dep := get(t, &appsv1.Deployment{}, NamespaceFor(cl.UID), NameAPIServer)
		assert.Equal(t, int64(1), dep.Generation, "the API server's Deployment was made once and never changed")
		sts := get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd)
		assert.Equal(t, int64(1), sts.Generation, "etcd's StatefulSet was made once and never changed")
	})

	t.Run("a Secret is read again after SecretRecheck", func(t *testing.T) {
		ns := NamespaceFor(cl.UID)
		require.NoError(t, env.Client.Delete(t.Context(), get(t, &corev1.Secret{}, ns, SecretEtcdClient)))
		hst, err := h.b.hostFor(t.Context(), nil)
		require.NoError(t, err)
		hst.memo.mu.Lock()
		hst.memo.secretRecheck = -1 // the hour is over
		hst.memo.mu.Unlock()
		seen := counter.counted(func() { h.ensure(t, cl) })
		secrets := "/api/v1/namespaces/" + ns + "/secrets/"
		require.NotEmpty(t, seen[http.MethodGet])
		for _, path := range seen[http.MethodGet] {
			assert.True(t, strings.HasPrefix(path, secrets), "only its Secrets are read again, not %s", path)
		}
		assert.NotEmpty(t, get(t, &corev1.Secret{}, ns, SecretEtcdClient).Data, "the deleted Secret is made anew")
	})
}

// TestAdminConfigWithoutProvisioning: after a restart of the operator, AdminConfig makes the
// operator's config from the record and the admin certificate's Secret, writing nothing; for a
// control plane not made yet it says so.
func TestAdminConfigWithoutProvisioning(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("admin")
	s := h.ensure(t, cl)

	var counter requests
	h2 := startBackendWith(t, func(o *Options) {
		cfg := rest.CopyConfig(env.Config)
		cfg.WrapTransport = counter.wrap
		o.Platform = cfg
	})
	h2.pc = h.pc
	var cfg *rest.Config
	seen := counter.counted(func() {
		var err error
		cfg, err = h2.b.AdminConfig(t.Context(), cl)
		require.NoError(t, err)
	})
	for _, verb := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		assert.Empty(t, seen[verb], "%s requests of AdminConfig", verb)
	}
	assert.Equal(t, "https://apiserver."+NamespaceFor(cl.UID)+".svc:443", cfg.Host, "the internal endpoint: the operator runs in the host")
	assert.Equal(t, s.CABundle, cfg.CAData)
	admin := get(t, &corev1.Secret{}, NamespaceFor(cl.UID), SecretAdmin)
	assert.Equal(t, admin.Data["tls.crt"], cfg.CertData)

	_, err := h2.b.AdminConfig(t.Context(), newCluster("admin-none"))
	assert.ErrorContains(t, err, "is not made yet")
}
