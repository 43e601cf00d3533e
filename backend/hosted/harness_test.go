package hosted

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	code := testenv.Main(m, &env)
	testenv.StopS3() // started by the first test that needs it (objectstore_test.go)
	os.Exit(code)
}

const (
	image1 = "cluster-provider/controlplane:v1.37.1"
	image2 = "cluster-provider/controlplane:v1.37.1-rebuilt"
)

// harness runs a Backend against envtest (an API server without kubelets: no pod ever runs, so
// no control plane becomes Ready; what is checked is what the backend writes and keeps).
type harness struct {
	b *Backend
	// version is what the API servers answer /version (envtest runs none).
	version  string
	pc       *providersv1alpha1.ProviderConfig
	notified chan backend.Ref
	// rewrites counts the rewrites of every Secret (envtest runs no API server to rewrite
	// through); rewriteErr is what the next ones fail with.
	rewrites   atomic.Int32
	rewriteErr atomic.Pointer[error]
}

func startBackend(t *testing.T) *harness {
	t.Helper()
	return startBackendLifetime(t, certs.Lifetime{})
}

// startBackendLifetime is startBackend with the leaf certificates' lifetime.
func startBackendLifetime(t *testing.T, life certs.Lifetime) *harness {
	t.Helper()
	return startBackendWith(t, func(o *Options) { o.Certificates = life })
}

// startBackendWith is startBackend with Options changed by change.
func startBackendWith(t *testing.T, change func(*Options)) *harness {
	t.Helper()
	h := &harness{notified: make(chan backend.Ref, 1000), pc: &providersv1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{Name: "hosted"},
		Spec: providersv1alpha1.ProviderConfigSpec{Backend: providersv1alpha1.BackendHosted, Hosted: &providersv1alpha1.HostedBackendConfig{
			Images: map[string]string{"1.37.1": image1}, ExternalHost: "203.0.113.10",
		}},
	}}
	var err error
	opts := Options{
		Platform: env.Config,
		Config: func(context.Context, *clustersv1alpha1.Cluster) (*providersv1alpha1.ProviderConfig, error) {
			return h.pc.DeepCopy(), nil
		},
		Notify: func(r backend.Ref) {
			select {
			case h.notified <- r:
			default:
			}
		},
		SecretRecheck: -1, // a Secret a test edits is read at the next Ensure (TestSteadyStateIsFree trusts them)
		Probe:         func(context.Context, *rest.Config) error { return nil },
		Version:       func(context.Context, *rest.Config) (string, error) { return h.version, nil },
		RewriteSecrets: func(context.Context, *rest.Config) (int, error) {
			if err := h.rewriteErr.Load(); err != nil {
				return 0, *err
			}
			h.rewrites.Add(1)
			return 3, nil
		},
		// A seed is this envtest too, reached through its own kubeconfig as from outside.
		SeedConfig: func(_ context.Context, seed providersv1alpha1.SeedRef) (*rest.Config, error) {
			if seed.SecretName != "seed-1" {
				return nil, fmt.Errorf("no seed %s", seed.SecretName)
			}
			return rest.CopyConfig(env.Config), nil
		},
		InCluster: true,
		Namespace: "cluster-provider-system",
	}
	change(&opts)
	if opts.Namespace != "" {
		err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: opts.Namespace}})
		require.True(t, err == nil || apierrors.IsAlreadyExists(err), "%v", err)
	}
	h.b, err = New(opts)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.b.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	require.Eventually(t, func() bool {
		hst, err := h.b.hostFor(t.Context(), nil)
		return err == nil && hst != nil
	}, 30*time.Second, 20*time.Millisecond, "the backend starts")
	return h
}

func newCluster(name string) *clustersv1alpha1.Cluster {
	return &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: uuid.NewUUID()},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: "default.local.hosted"},
	}
}

// ensure calls Ensure and records its provider status in cl, as the Cluster reconciler does.
func (h *harness) ensure(t *testing.T, cl *clustersv1alpha1.Cluster) backend.State {
	t.Helper()
	return h.ensureWant(t, cl, backend.Want{Version: "1.37.1"})
}

// ensureWant is ensure with the version cl asks for.
func (h *harness) ensureWant(t *testing.T, cl *clustersv1alpha1.Cluster, want backend.Want) backend.State {
	t.Helper()
	h.synced(t, cl)
	s, err := h.b.Ensure(t.Context(), cl, want)
	require.NoError(t, err)
	raw, err := json.Marshal(s.ProviderStatus)
	require.NoError(t, err)
	cl.Status.ProviderStatus = &runtime.RawExtension{Raw: raw}
	return s
}

// synced waits until the backend's caches hold the ConfigMaps of cl's control plane
// as the API server does: a reconcile comes from their watch, after the cache has what changed,
// and the backend reads them from memory while its cache shows them unchanged (reads.go).
func (h *harness) synced(t *testing.T, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	h.b.mu.Lock()
	hosts := slices.Collect(maps.Values(h.b.hosts))
	h.b.mu.Unlock()
	ns := NamespaceFor(cl.UID)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, kind := range []string{"ConfigMapList"} {
			list := &metav1.PartialObjectMetadataList{}
			list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
			require.NoError(t, env.Client.List(t.Context(), list, client.InNamespace(ns), client.MatchingLabels{LabelManagedBy: ManagedBy}))
			for _, hst := range hosts {
				cached := &metav1.PartialObjectMetadataList{}
				cached.SetGroupVersionKind(list.GroupVersionKind())
				if assert.NoError(c, hst.cache.List(t.Context(), cached, client.InNamespace(ns))) {
					assert.ElementsMatch(c, versions(list), versions(cached), "the backend's cache of host %q", hst.name)
				}
			}
		}
	}, 10*time.Second, 10*time.Millisecond)
}

// versions are the names and resourceVersions of list's items.
func versions(list *metav1.PartialObjectMetadataList) []string {
	var v []string
	for _, o := range list.Items {
		v = append(v, o.Name+"@"+o.ResourceVersion)
	}
	return v
}

// etcdUp marks cl's etcd StatefulSet ready (envtest runs no pod) and ensures until the backend,
// which makes the API server's Deployment only then, has made it.
func (h *harness) etcdUp(t *testing.T, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	ns := NamespaceFor(cl.UID)
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	sts.Status.Replicas, sts.Status.ReadyReplicas, sts.Status.ObservedGeneration = 1, 1, sts.Generation
	require.NoError(t, env.Client.Status().Update(t.Context(), sts))
	require.Eventually(t, func() bool {
		h.ensure(t, cl)
		return env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: NameAPIServer}, &appsv1.Deployment{}) == nil
	}, 10*time.Second, 20*time.Millisecond)
}

func get[T client.Object](t *testing.T, obj T, ns, name string) T {
	t.Helper()
	require.NoError(t, env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, obj))
	return obj
}

func ptrTo[T any](v T) *T { return &v }

// record is the backend's record of cl's control plane (NameRecord).
func record(t *testing.T, cl *clustersv1alpha1.Cluster) providerStatus {
	t.Helper()
	cm := get(t, &corev1.ConfigMap{}, NamespaceFor(cl.UID), NameRecord)
	var ps providerStatus
	require.NoError(t, json.Unmarshal([]byte(cm.Data[recordKey]), &ps))
	return ps
}

// rolledOutNow marks cl's workloads rolled out and ready, as the controllers of a real cluster
// would (envtest runs none).
func rolledOutNow(t *testing.T, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	ns := NamespaceFor(cl.UID)
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1, CurrentReplicas: 1,
		CurrentRevision: "r", UpdateRevision: "r"}
	require.NoError(t, env.Client.Status().Update(t.Context(), sts))
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1}
	require.NoError(t, env.Client.Status().Update(t.Context(), dep))
}
