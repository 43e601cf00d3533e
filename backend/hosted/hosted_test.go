package hosted

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/uuid"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
	"github.com/openmcp-local/cluster-provider/backend/certs"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

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
		Probe:   func(context.Context, *rest.Config) error { return nil },
		Version: func(context.Context, *rest.Config) (string, error) { return h.version, nil },
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

func TestEnsureMakesTheControlPlane(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("make")
	s := h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)

	assert.False(t, s.Ready, "no pod runs in envtest")
	assert.Equal(t, backend.ReasonStarting, s.Reason)
	assert.Contains(t, s.Message, "etcd (StatefulSet "+ns+"/etcd) is ")
	assert.Equal(t, "https://apiserver."+ns+".svc:443", s.Endpoints[clustersv1alpha1.APIServerEndpointInternal])
	assert.Regexp(t, `^https://203\.0\.113\.10:\d+$`, s.Endpoint, "the node port on the external host")
	assert.NotEmpty(t, s.CABundle)

	n := get(t, &corev1.Namespace{}, "", ns)
	assert.Equal(t, string(cl.UID), n.Labels[LabelClusterUID])
	assert.Equal(t, "team-a", n.Labels[LabelClusterNamespace])
	assert.Equal(t, "make", n.Labels[LabelClusterName])
	assert.Equal(t, "restricted", n.Labels["pod-security.kubernetes.io/enforce"])

	for _, name := range []string{SecretCA, SecretEtcdCA, SecretEtcdServer, SecretEtcdClient, SecretServiceAcct, SecretServing, SecretAdmin, SecretKCMKubeconf} {
		sec := get(t, &corev1.Secret{}, ns, name)
		assert.NotEmpty(t, sec.Data, name)
	}
	// etcd's serving certificate authenticates clients too: etcd's gRPC gateway (the maintenance
	// Jobs' way in) dials etcd's own client port with it, and etcd refuses a certificate without.
	etcdCert, err := certutil.ParseCertsPEM(get(t, &corev1.Secret{}, ns, SecretEtcdServer).Data["tls.crt"])
	require.NoError(t, err)
	assert.ElementsMatch(t, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, etcdCert[0].ExtKeyUsage)
	cm := get(t, &corev1.ConfigMap{}, ns, NameAuthn)
	assert.Equal(t, authconfig.Empty, cm.Data[authnKey])
	err = env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: NameAPIServer}, &appsv1.Deployment{})
	assert.True(t, apierrors.IsNotFound(err), "the API server waits for etcd: %v", err)
	h.etcdUp(t, cl)
	s = h.ensure(t, cl)
	assert.Contains(t, s.Message, "the API server (Deployment "+ns+"/apiserver) is not rolled out")
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	assert.Equal(t, image1, dep.Spec.Template.Spec.InitContainers[0].Image)
	get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	for _, name := range []string{NameEtcd, NameAPIServer, NameExternal} {
		get(t, &corev1.Service{}, ns, name)
	}
	for _, name := range []string{NameEtcd, NameAPIServer} {
		get(t, &networkingv1.NetworkPolicy{}, ns, name)
	}

	// The serving certificate names the external host and the internal Service.
	serving := get(t, &corev1.Secret{}, ns, SecretServing)
	certs, err := certutil.ParseCertsPEM(serving.Data["tls.crt"])
	require.NoError(t, err)
	for _, host := range []string{"203.0.113.10", "apiserver." + ns + ".svc", "198.18.0.1"} {
		assert.NoError(t, certs[0].VerifyHostname(host), host)
	}
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(s.CABundle))
	_, err = certs[0].Verify(x509.VerifyOptions{Roots: pool})
	assert.NoError(t, err, "the CA bundle in the state verifies the serving certificate")

	// Every change of the workloads reaches Notify, naming the Cluster.
	require.Eventually(t, func() bool {
		select {
		case r := <-h.notified:
			return r.Namespace == "team-a" && r.Name == "make" && r.Profile == "default.local.hosted"
		default:
			return false
		}
	}, 10*time.Second, 10*time.Millisecond)
}

func TestEnsureKeepsWhatRuns(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("keep")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	ca := get(t, &corev1.Secret{}, ns, SecretCA)
	admin := get(t, &corev1.Secret{}, ns, SecretAdmin)
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)

	// A new image in the ProviderConfig (and a new backend, as after an operator upgrade): the
	// running control plane keeps its image, workloads and keys.
	h.pc.Spec.Hosted.Images["1.37.1"] = image2
	h2 := startBackend(t)
	h2.pc = h.pc
	require.Eventually(t, func() bool {
		hst, err := h2.b.hostFor(t.Context(), nil)
		require.NoError(t, err)
		var dep appsv1.Deployment
		var sts appsv1.StatefulSet
		return hst.cache.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: NameAPIServer}, &dep) == nil &&
			hst.cache.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: NameEtcd}, &sts) == nil && sts.Status.ReadyReplicas == 1
	}, 10*time.Second, 10*time.Millisecond, "the new backend's cache sees the workloads as they are")
	h2.ensure(t, cl)
	assert.Equal(t, ca.ResourceVersion, get(t, &corev1.Secret{}, ns, SecretCA).ResourceVersion, "the CA is never made anew")
	assert.Equal(t, admin.ResourceVersion, get(t, &corev1.Secret{}, ns, SecretAdmin).ResourceVersion, "a valid certificate is kept")
	cur := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	assert.Equal(t, dep.ResourceVersion, cur.ResourceVersion, "the Deployment is not applied again")
	assert.Equal(t, image1, cur.Spec.Template.Spec.InitContainers[0].Image, "the image the cluster was created with")
	assert.Equal(t, sts.ResourceVersion, get(t, &appsv1.StatefulSet{}, ns, NameEtcd).ResourceVersion)

	// A new Cluster takes the new image.
	other := newCluster("keep2")
	h2.ensure(t, other)
	h2.etcdUp(t, other)
	assert.Equal(t, image2, get(t, &appsv1.Deployment{}, NamespaceFor(other.UID), NameAPIServer).Spec.Template.Spec.InitContainers[0].Image)

	// Changed resources are inputs: the Deployment is applied with them (a rollout).
	h2.pc.Spec.Hosted.Resources = &providersv1alpha1.HostedResources{APIServer: &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
	}}
	require.Eventually(t, func() bool {
		h2.ensure(t, cl)
		cur := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
		return cur.Spec.Template.Spec.InitContainers[0].Resources.Limits.Memory().Equal(resource.MustParse("1Gi"))
	}, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, image1, get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Spec.InitContainers[0].Image)

	// Another external host: the serving certificate is issued anew by the same CA.
	h2.pc.Spec.Hosted.ExternalHost = "203.0.113.20"
	s := h2.ensure(t, cl)
	assert.Regexp(t, `^https://203\.0\.113\.20:\d+$`, s.Endpoint)
	serving := get(t, &corev1.Secret{}, ns, SecretServing)
	certs, err := certutil.ParseCertsPEM(serving.Data["tls.crt"])
	require.NoError(t, err)
	assert.NoError(t, certs[0].VerifyHostname("203.0.113.20"))
	assert.Equal(t, ca.ResourceVersion, get(t, &corev1.Secret{}, ns, SecretCA).ResourceVersion)
}

func TestEnsureRefusesADamagedCA(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("damaged")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	ca := get(t, &corev1.Secret{}, ns, SecretCA)
	ca.Data["ca.key"] = []byte("garbage")
	require.NoError(t, env.Client.Update(t.Context(), ca))

	h2 := startBackend(t) // a new backend: nothing remembered
	h2.pc = h.pc
	_, err := h2.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonStateDamaged), "%v", err)
	assert.Contains(t, err.Error(), "Secret "+ns+"/ca")
	assert.Equal(t, []byte("garbage"), get(t, &corev1.Secret{}, ns, SecretCA).Data["ca.key"], "left for a person to restore")
}

// TestEnsureRefusesANamespaceOfSomeoneElse: a namespace of the control plane's name made by
// someone else (the Cluster's UID is no secret) is never adopted: nothing is written into it, the
// refusal says what to do, and once it is gone the control plane is made.
func TestEnsureRefusesANamespaceOfSomeoneElse(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("taken")
	ns := NamespaceFor(cl.UID)
	require.NoError(t, env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}))
	_, err := h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonNamespaceTaken), "%v", err)
	assert.Contains(t, err.Error(), "namespace "+ns+" exists and was not made by the provider")
	assert.Contains(t, err.Error(), "Delete that namespace")
	assert.Positive(t, backend.RetryAfter(err), "looked at again: deleting a namespace reaches no Cluster")
	secrets := &corev1.SecretList{}
	require.NoError(t, env.Client.List(t.Context(), secrets, client.InNamespace(ns)))
	assert.Empty(t, secrets.Items, "no key written into it")
	got := get(t, &corev1.Namespace{}, "", ns)
	assert.NotContains(t, got.Labels, LabelManagedBy, "not labelled as the backend's")

	// envtest runs no namespace controller: a namespace of that name that the backend made (its
	// label) is its own, as after the one of someone else was deleted and the backend made it.
	got.Labels[LabelManagedBy], got.Labels[LabelClusterUID] = ManagedBy, string(cl.UID)
	require.NoError(t, env.Client.Update(t.Context(), got))
	s := h.ensure(t, cl)
	assert.NotEqual(t, backend.ReasonNamespaceTaken, s.Reason, "%s", s.Message)
	get(t, &corev1.Secret{}, ns, SecretCA)
}

func TestEnsureUnknownVersion(t *testing.T) {
	h := startBackend(t)
	_, err := h.b.Ensure(t.Context(), newCluster("version"), backend.Want{Version: "1.30.0"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonVersionNotSupported))
	assert.Contains(t, err.Error(), "spec.hosted.images")
}

func TestSetJWTAuthenticators(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("oidc")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	// A pod of the Deployment, as the ReplicaSet controller would make it (envtest has none).
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	pod := &corev1.Pod{ObjectMeta: *dep.Spec.Template.ObjectMeta.DeepCopy(), Spec: *dep.Spec.Template.Spec.DeepCopy()}
	pod.Namespace, pod.Name = ns, "apiserver-1"
	require.NoError(t, env.Client.Create(t.Context(), pod))

	jwt := []apiserverv1.JWTAuthenticator{{
		Issuer:        apiserverv1.Issuer{URL: "https://idp.example.com", Audiences: []string{"cp"}},
		ClaimMappings: apiserverv1.ClaimMappings{Username: apiserverv1.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptrTo("oidc:")}},
	}}
	want, err := authconfig.Render(jwt)
	require.NoError(t, err)
	// The API server does not run here: Applied cannot read its metrics, but the configuration
	// and the pod's annotation are written first.
	require.Eventually(t, func() bool {
		applied, err := h.b.SetJWTAuthenticators(t.Context(), cl, jwt)
		assert.False(t, applied)
		assert.Error(t, err)
		got := get(t, &corev1.Pod{}, ns, pod.Name)
		return got.Annotations[AnnotationAuthn] == hashOf([]string{string(want)})
	}, 10*time.Second, 50*time.Millisecond, "the pod is annotated so that the kubelet refreshes its volume at once")
	assert.Equal(t, string(want), get(t, &corev1.ConfigMap{}, ns, NameAuthn).Data[authnKey])
}

func TestDelete(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("delete")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	gone, err := h.b.Delete(t.Context(), cl)
	require.NoError(t, err)
	assert.False(t, gone, "the namespace is being deleted")
	n := get(t, &corev1.Namespace{}, "", ns)
	assert.NotNil(t, n.DeletionTimestamp)

	// A namespace of that name that belongs to another Cluster is not touched.
	stranger := newCluster("stranger")
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: NamespaceFor(stranger.UID), Labels: map[string]string{LabelClusterUID: "someone-else"}}}
	require.NoError(t, env.Client.Create(t.Context(), other))
	_, err = h.b.Delete(t.Context(), stranger)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "left alone")
	assert.Nil(t, get(t, &corev1.Namespace{}, "", other.Name).DeletionTimestamp)

	// Nothing of a Cluster that never ran: gone at once.
	gone, err = h.b.Delete(t.Context(), newCluster("never"))
	require.NoError(t, err)
	assert.True(t, gone)
}

func ptrTo[T any](v T) *T { return &v }

func TestSeed(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.Seed = &providersv1alpha1.SeedRef{SecretName: "seed-1"}
	cl := newCluster("seeded")
	s := h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	var ps providerStatus
	require.NoError(t, json.Unmarshal(cl.Status.ProviderStatus.Raw, &ps))
	assert.Equal(t, "seed-1", ps.Seed, "the status names the seed, for the Cluster's deletion")
	assert.Contains(t, s.Info, "of seed seed-1")
	cfg, err := h.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	assert.Equal(t, s.Endpoint, cfg.Host, "the operator reaches a seed's control planes on their external endpoint")
	// On the platform (InCluster), the internal one.
	plain := newCluster("plain")
	h.pc.Spec.Hosted.Seed = nil
	h.ensure(t, plain)
	cfg, err = h.b.AdminConfig(t.Context(), plain)
	require.NoError(t, err)
	assert.Equal(t, "https://apiserver."+NamespaceFor(plain.UID)+".svc:443", cfg.Host)

	// An unknown seed is an error that names it.
	h.pc.Spec.Hosted.Seed = &providersv1alpha1.SeedRef{SecretName: "nowhere"}
	_, err = h.b.Ensure(t.Context(), newCluster("lost"), backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nowhere")

	// Deletion finds the seed from the status even when the ProviderConfig names another.
	gone, err := h.b.Delete(t.Context(), cl)
	require.NoError(t, err)
	assert.False(t, gone)
	assert.NotNil(t, get(t, &corev1.Namespace{}, "", ns).DeletionTimestamp)
}

// TestEnsureVersionChange: the version contract on the hosted backend. A control plane keeps its
// version when the default moves; a named next minor rolls etcd (on a claim) to the new image
// and says Upgrading; a downgrade is refused; a control plane whose etcd is on an emptyDir
// refuses any change and keeps its workloads as they are.
func TestEnsureVersionChange(t *testing.T) {
	const image136 = "cluster-provider/controlplane:v1.36.3"
	h := startBackend(t)
	h.pc.Spec.Hosted.Images["1.36.3"] = image136
	old := backend.Want{Version: "1.36.3", Requested: "1.36.3"}
	next := backend.Want{Version: "1.37.1", Requested: "1.37.1"}
	etcdImage := func(cl *clustersv1alpha1.Cluster) string {
		return get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd).Spec.Template.Spec.Containers[0].Image
	}

	t.Run("emptyDir: refused, nothing changes", func(t *testing.T) {
		cl := newCluster("upgrade-emptydir")
		h.ensureWant(t, cl, old)
		h.etcdUp(t, cl)
		sts := get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd)
		s := h.ensureWant(t, cl, next)
		require.NotNil(t, s.VersionChange)
		assert.True(t, s.VersionChange.Refused)
		assert.Contains(t, s.VersionChange.Message, "upgrade from 1.36.3 to 1.37.1 is refused: this control plane's etcd keeps its data on an emptyDir")
		assert.Equal(t, "1.36.3", s.Runs)
		assert.Equal(t, sts.ResourceVersion, get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd).ResourceVersion, "etcd is not touched")
		assert.Equal(t, "1.36.3", record(t, cl).Version)
	})

	t.Run("on a claim: upgrades, and a downgrade is refused", func(t *testing.T) {
		h.pc.Spec.Hosted.StorageClassName = "standard"
		defer func() { h.pc.Spec.Hosted.StorageClassName = "" }()
		cl := newCluster("upgrade-claim")
		h.ensureWant(t, cl, old)
		h.etcdUp(t, cl)
		require.Equal(t, image136, etcdImage(cl))

		s := h.ensureWant(t, cl, backend.Want{Version: "1.37.1"}) // the default moved; nothing named
		assert.Nil(t, s.VersionChange)
		assert.Equal(t, "1.36.3", s.Runs)
		assert.Equal(t, image136, etcdImage(cl), "a Cluster naming no version keeps its own")

		s = h.ensureWant(t, cl, next)
		require.NotNil(t, s.VersionChange)
		assert.False(t, s.VersionChange.Refused, s.VersionChange.Message)
		assert.Equal(t, "1.36.3", s.Runs, "the old version runs until the new API server serves")
		assert.Equal(t, image1, etcdImage(cl), "etcd rolls first, on its claim")
		apiImage := func() string {
			return apiServerImage(get(t, &appsv1.Deployment{}, NamespaceFor(cl.UID), NameAPIServer))
		}
		assert.Equal(t, image136, apiImage(), "the API server rolls once etcd runs the new version")
		assert.Equal(t, "1.37.1", record(t, cl).Version)
		assert.Equal(t, "1.36.3", record(t, cl).UpgradeFrom)
		s = h.ensureWant(t, cl, next)
		require.NotNil(t, s.VersionChange, "still upgrading while the new API server does not serve")
		assert.False(t, s.VersionChange.Refused)

		// Rolled out and answering 1.37.1, but the old API server still serves its shutdown delay:
		// not done until it is gone.
		h.version = "1.37.1"
		rolledOutNow(t, cl) // etcd rolled out: the API server rolls
		require.Eventually(t, func() bool {
			h.ensureWant(t, cl, next)
			return apiImage() == image1
		}, 10*time.Second, 50*time.Millisecond, "the API server rolls once etcd runs the new version")
		rolledOutNow(t, cl)
		ns := NamespaceFor(cl.UID)
		oldPod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "apiserver-old", Finalizers: []string{"test.openmcp.cloud/hold"},
			Labels:      map[string]string{LabelManagedBy: ManagedBy, LabelClusterUID: string(cl.UID), LabelComponent: ComponentAPIServer},
			Annotations: map[string]string{AnnotationCluster: cl.Namespace + "/" + cl.Name}},
			Spec: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
				Containers: []corev1.Container{{Name: "c", Image: image136, SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptrTo(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
			}}
		require.NoError(t, env.Client.Create(t.Context(), oldPod))
		require.NoError(t, env.Client.Delete(t.Context(), oldPod))
		hst, err := h.b.hostFor(t.Context(), nil)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			var p corev1.Pod
			return hst.cache.Get(t.Context(), client.ObjectKeyFromObject(oldPod), &p) == nil && p.DeletionTimestamp != nil
		}, 10*time.Second, 10*time.Millisecond)
		s = h.ensureWant(t, cl, next)
		require.NotNil(t, s.VersionChange, "an old API server still serves")
		assert.Equal(t, "1.36.3", s.Runs)
		oldPod = get(t, &corev1.Pod{}, ns, oldPod.Name)
		oldPod.Finalizers = nil
		require.NoError(t, env.Client.Update(t.Context(), oldPod))
		require.Eventually(t, func() bool {
			s = h.ensureWant(t, cl, next)
			return s.VersionChange == nil
		}, 10*time.Second, 50*time.Millisecond, "done once the old API server is gone")
		assert.Equal(t, "1.37.1", s.Runs)
		assert.Empty(t, record(t, cl).UpgradeFrom)

		s = h.ensureWant(t, cl, old)
		require.NotNil(t, s.VersionChange)
		assert.True(t, s.VersionChange.Refused)
		assert.Contains(t, s.VersionChange.Message, "downgrade from 1.37.1 to 1.36.3 is refused")
		assert.Equal(t, image1, etcdImage(cl))
	})
}

// TestCertificatesRenewed: with leaves valid 10 minutes and renewed 2 s after they were issued,
// the backend asks to come back in time, issues the due leaves anew from the same CA at a later
// reconcile (no restart of the operator), rolls the API server's Deployment by the checksum in
// its pod template, keeps the expiry gauge current, and makes a deleted leaf Secret again.
func TestCertificatesRenewed(t *testing.T) {
	h := startBackendLifetime(t, certs.Lifetime{Validity: 10 * time.Minute, RenewBefore: 10*time.Minute - 2*time.Second})
	cl := newCluster("renew")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	ca := get(t, &corev1.Secret{}, ns, SecretCA)
	serving := get(t, &corev1.Secret{}, ns, SecretServing)
	sum := get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationCertificates]
	require.NotEmpty(t, sum)
	first, err := certs.NotAfter(serving.Data["tls.crt"])
	require.NoError(t, err)
	assert.InDelta(t, float64(first.Unix()), backend.CertificateExpiry(backend.RefOf(cl), SecretServing), 1)

	s := h.ensure(t, cl)
	assert.Greater(t, s.RetryAfter, time.Duration(0))
	assert.LessOrEqual(t, s.RetryAfter, 3*time.Second, "back when the first certificate is due, not later")

	require.Eventually(t, func() bool {
		h.ensure(t, cl)
		return get(t, &corev1.Secret{}, ns, SecretServing).ResourceVersion != serving.ResourceVersion
	}, 30*time.Second, 200*time.Millisecond, "the serving certificate is issued anew")
	renewed := get(t, &corev1.Secret{}, ns, SecretServing)
	later, err := certs.NotAfter(renewed.Data["tls.crt"])
	require.NoError(t, err)
	assert.True(t, later.After(first), "the new certificate ends later")
	caNow := get(t, &corev1.Secret{}, ns, SecretCA)
	assert.Equal(t, ca.ResourceVersion, caNow.ResourceVersion, "the CA is kept: every kubeconfig stays valid")
	parsed, err := certs.ParseCA(caNow.Data["ca.crt"], caNow.Data["ca.key"])
	require.NoError(t, err)
	parsed.Lifetime = certs.Lifetime{Validity: 10 * time.Minute, RenewBefore: time.Second}
	assert.True(t, parsed.Keep(renewed.Data["tls.crt"], renewed.Data["tls.key"], certs.Leaf{CommonName: "kube-apiserver", Usages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}), "signed by the same CA")
	require.Eventually(t, func() bool {
		h.ensure(t, cl)
		return get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Annotations[AnnotationCertificates] != sum
	}, 10*time.Second, 100*time.Millisecond, "the API server's pods roll with the new certificates")
	assert.Greater(t, backend.CertificateExpiry(backend.RefOf(cl), SecretServing), float64(first.Unix()), "the gauge follows")

	// A deleted leaf Secret is made again at the next reconcile.
	require.NoError(t, env.Client.Delete(t.Context(), get(t, &corev1.Secret{}, ns, SecretEtcdClient)))
	h.ensure(t, cl)
	got := get(t, &corev1.Secret{}, ns, SecretEtcdClient)
	assert.NotEmpty(t, got.Data["tls.crt"])
}

// record is the backend's record of cl's control plane (NameRecord).
func record(t *testing.T, cl *clustersv1alpha1.Cluster) providerStatus {
	t.Helper()
	cm := get(t, &corev1.ConfigMap{}, NamespaceFor(cl.UID), NameRecord)
	var ps providerStatus
	require.NoError(t, json.Unmarshal([]byte(cm.Data[recordKey]), &ps))
	return ps
}

// TestSettingsRecorded: what a control plane is made with is recorded in its own ConfigMap;
// a change of the ProviderConfig's storage applies to new Clusters only, and an existing one
// keeps its etcd (no wedge on the immutable claim template); the status is output only: a
// control plane is found and deleted without it.
func TestSettingsRecorded(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.StorageClassName = "standard"
	h.pc.Spec.Hosted.StorageSize = ptrTo(resource.MustParse("2Gi"))
	cl := newCluster("recorded")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	rec := record(t, cl)
	assert.Equal(t, "standard", rec.StorageClassName)
	assert.Equal(t, "2Gi", rec.StorageSize)
	assert.Equal(t, "1.37.1", rec.Version)
	assert.Equal(t, image1, rec.Image)
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)

	h.pc.Spec.Hosted.StorageClassName = "fast"
	h.pc.Spec.Hosted.StorageSize = ptrTo(resource.MustParse("5Gi"))
	h.ensure(t, cl) // no error: the recorded storage is used
	cur := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	assert.Equal(t, sts.Spec.VolumeClaimTemplates[0].Spec.StorageClassName, cur.Spec.VolumeClaimTemplates[0].Spec.StorageClassName)
	assert.Equal(t, "standard", record(t, cl).StorageClassName)
	other := newCluster("recorded-new")
	h.ensure(t, other)
	assert.Equal(t, "fast", record(t, other).StorageClassName, "a new Cluster takes the ProviderConfig of now")

	// No status (output only), and a new backend that remembers nothing: found and deleted.
	cl.Status.ProviderStatus = nil
	h2 := startBackend(t)
	h2.pc = h.pc
	h2.ensure(t, cl)
	assert.Equal(t, "standard", record(t, cl).StorageClassName, "the record, not the status, decides")
	gone, err := h2.b.Delete(t.Context(), cl)
	require.NoError(t, err)
	assert.False(t, gone, "the namespace is being deleted")
	nsObj := &corev1.Namespace{}
	require.NoError(t, env.Client.Get(t.Context(), client.ObjectKey{Name: ns}, nsObj))
	assert.NotNil(t, nsObj.DeletionTimestamp, "its namespace is deleted")
}

// TestImageRefresh: a patched image for the SAME version reaches an existing Cluster only when the
// Cluster asks for it (AnnotationImageRefresh), once per value; etcd on an emptyDir refuses.
func TestImageRefresh(t *testing.T) {
	h := startBackend(t)
	etcdImage := func(cl *clustersv1alpha1.Cluster) string {
		return get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd).Spec.Template.Spec.Containers[0].Image
	}
	h.pc.Spec.Hosted.StorageClassName = "standard"
	claim := newCluster("refresh-claim")
	h.ensure(t, claim)
	h.etcdUp(t, claim)
	h.pc.Spec.Hosted.StorageClassName = ""
	empty := newCluster("refresh-emptydir")
	h.ensure(t, empty)
	h.etcdUp(t, empty)

	h.pc.Spec.Hosted.Images["1.37.1"] = image2 // a patched image of the same version
	h.ensure(t, claim)
	assert.Equal(t, image1, etcdImage(claim), "nothing asked: the recorded image stays")

	claim.Annotations = map[string]string{AnnotationImageRefresh: "cve-2026-1"}
	s := h.ensure(t, claim)
	assert.Nil(t, s.VersionChange)
	assert.Equal(t, image2, etcdImage(claim), "asked: rolled to the ProviderConfig's image of its version")
	assert.Equal(t, image2, record(t, claim).Image)
	assert.Equal(t, "cve-2026-1", record(t, claim).ImageRefresh)

	empty.Annotations = map[string]string{AnnotationImageRefresh: "cve-2026-1"}
	s = h.ensure(t, empty)
	require.NotNil(t, s.VersionChange)
	assert.True(t, s.VersionChange.Refused)
	assert.Contains(t, s.VersionChange.Message, "the image refresh \"cve-2026-1\" (to "+image2+") is refused: this control plane's etcd keeps its data on an emptyDir")
	assert.Equal(t, image1, etcdImage(empty))
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

// TestDriftAndBoundedRolling: a workload changed by hand (etcd scaled to 0) is put back at the
// next reconcile; a change that reaches every control plane (the ProviderConfig's resources) rolls
// them --hosted-max-rolling at a time: the next waits until the first is rolled out.
func TestDriftAndBoundedRolling(t *testing.T) {
	h := startBackendWith(t, func(o *Options) { o.MaxRolling = 1 })
	a, b := newCluster("roll-a"), newCluster("roll-b")
	for _, cl := range []*clustersv1alpha1.Cluster{a, b} {
		h.ensure(t, cl)
		h.etcdUp(t, cl)
		rolledOutNow(t, cl)
	}
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	// The backend's cache must see what the test changes before each Ensure.
	cached := func(cl *clustersv1alpha1.Cluster, obj client.Object, name string, ok func() bool) {
		t.Helper()
		require.Eventually(t, func() bool {
			return hst.cache.Get(t.Context(), client.ObjectKey{Namespace: NamespaceFor(cl.UID), Name: name}, obj) == nil && ok()
		}, 10*time.Second, 10*time.Millisecond)
	}

	t.Run("drift is corrected", func(t *testing.T) {
		sts := get(t, &appsv1.StatefulSet{}, NamespaceFor(a.UID), NameEtcd)
		sts.Spec.Replicas = ptrTo[int32](0) // kubectl scale sts etcd --replicas=0
		require.NoError(t, env.Client.Update(t.Context(), sts))
		var seen appsv1.StatefulSet
		cached(a, &seen, NameEtcd, func() bool { return *seen.Spec.Replicas == 0 })
		h.ensure(t, a)
		assert.Equal(t, int32(1), *get(t, &appsv1.StatefulSet{}, NamespaceFor(a.UID), NameEtcd).Spec.Replicas, "scaled back to the plan")
		rolledOutNow(t, a)
		var back appsv1.StatefulSet
		cached(a, &back, NameEtcd, func() bool { return back.Status.ObservedGeneration == back.Generation && *back.Spec.Replicas == 1 })
		h.ensure(t, a) // rolled out: its turn ends
	})

	t.Run("a change of every control plane rolls one at a time", func(t *testing.T) {
		before := map[types.UID]string{}
		for _, cl := range []*clustersv1alpha1.Cluster{a, b} {
			before[cl.UID] = get(t, &appsv1.Deployment{}, NamespaceFor(cl.UID), NameAPIServer).Annotations[AnnotationInputs]
		}
		h.pc.Spec.Hosted.Resources = &providersv1alpha1.HostedResources{APIServer: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		}}
		h.ensure(t, a)
		assert.NotEqual(t, before[a.UID], get(t, &appsv1.Deployment{}, NamespaceFor(a.UID), NameAPIServer).Annotations[AnnotationInputs], "a rolls")
		s := h.ensure(t, b)
		assert.Equal(t, before[b.UID], get(t, &appsv1.Deployment{}, NamespaceFor(b.UID), NameAPIServer).Annotations[AnnotationInputs], "b waits for its turn")
		assert.LessOrEqual(t, s.RetryAfter, rollRetry, "and is looked at again soon")

		rolledOutNow(t, a)
		var done appsv1.Deployment
		cached(a, &done, NameAPIServer, func() bool {
			return done.Status.ObservedGeneration == done.Generation && done.Status.UpdatedReplicas == 1
		})
		h.ensure(t, a) // a is rolled out: its turn goes to the next
		h.ensure(t, b)
		assert.NotEqual(t, before[b.UID], get(t, &appsv1.Deployment{}, NamespaceFor(b.UID), NameAPIServer).Annotations[AnnotationInputs], "then b rolls")
	})
}

// TestBind: the operator binds the backend to each profile's ProviderConfig: the bound view
// offers its images' versions and makes control planes from the spec it was bound with, without
// reading the ProviderConfig again; unbound and without Options.Config it says what is missing.
func TestBind(t *testing.T) {
	h := startBackendWith(t, func(o *Options) { o.Config = nil })
	pc := h.pc.DeepCopy()
	pc.Spec.Hosted.Images["1.36.3"] = "cluster-provider/controlplane:v1.36.3"
	v := h.b.Bind(pc)
	assert.Equal(t, []string{"1.37.1", "1.36.3"}, v.Versions())
	assert.Empty(t, h.b.Versions())
	pc.Spec.Hosted.Images["1.37.1"] = "changed-after-binding"

	cl := newCluster("bound")
	_, err := v.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	require.NoError(t, err)
	assert.Equal(t, image1, record(t, cl).Image, "the spec as bound")
	_, err = h.b.Ensure(t.Context(), cl, backend.Want{Version: "1.37.1"})
	assert.ErrorContains(t, err, "bind it")
	gone, err := v.Delete(t.Context(), cl)
	require.NoError(t, err)
	assert.False(t, gone, "its namespace is being deleted")
}

// TestHighAvailability: a ProviderConfig's highAvailability makes a new Cluster's control plane
// highly available, recorded: the PriorityClass, budgets, peer Service and peer certificate are
// made; the members' certificates name every member; memory is requested as much as limited; a
// quorum of members is enough to serve, and the Cluster says when it is degraded; the
// ProviderConfig turned single later leaves it highly available, and new Clusters single.
func TestHighAvailability(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.StorageClassName = "standard"
	h.pc.Spec.Hosted.HighAvailability = true
	cl := newCluster("ha")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	assert.True(t, record(t, cl).HighAvailability)

	pcl := get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane)
	assert.Equal(t, int32(priorityControlPlane), pcl.Value)
	for _, name := range []string{NameEtcd, NameAPIServer} {
		pdb := get(t, &policyv1.PodDisruptionBudget{}, ns, name)
		assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MaxUnavailable)
	}
	get(t, &corev1.Service{}, ns, NameEtcdPeer)
	for _, name := range []string{SecretEtcdPeer, SecretEtcdServer} {
		sec := get(t, &corev1.Secret{}, ns, name)
		cert, err := certutil.ParseCertsPEM(sec.Data["tls.crt"])
		require.NoError(t, err)
		for i := range 3 {
			assert.NoError(t, cert[0].VerifyHostname(fmt.Sprintf("etcd-%d.etcd-peer.%s.svc", i, ns)), name)
		}
	}
	peerClient := get(t, &corev1.Secret{}, ns, SecretEtcdPeerClient)
	cert, err := certutil.ParseCertsPEM(peerClient.Data["tls.crt"])
	require.NoError(t, err)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, cert[0].ExtKeyUsage)
	assert.Equal(t, etcdPeerCN, cert[0].Subject.CommonName, "the only name etcd takes as a peer")
	assert.Empty(t, cert[0].DNSNames, "etcd would check names against the peer's address, which a network may translate")
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	assert.Equal(t, int32(3), *sts.Spec.Replicas)
	etcd := sts.Spec.Template.Spec.Containers[0]
	assert.Equal(t, etcd.Resources.Limits[corev1.ResourceMemory], etcd.Resources.Requests[corev1.ResourceMemory], "memory requested as limited")

	// One member ready is no quorum; two are.
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 3, ReadyReplicas: 1}
	require.NoError(t, env.Client.Status().Update(t.Context(), sts))
	require.Eventually(t, func() bool {
		return strings.Contains(h.ensure(t, cl).Message, "has no quorum: 1 of 3 members ready")
	}, 10*time.Second, 20*time.Millisecond)
	sts = get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	sts.Status.ReadyReplicas = 2
	require.NoError(t, env.Client.Status().Update(t.Context(), sts))
	require.Eventually(t, func() bool {
		h.ensure(t, cl)
		return env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: NameAPIServer}, &appsv1.Deployment{}) == nil
	}, 10*time.Second, 20*time.Millisecond, "the API servers start once etcd has a quorum")
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	assert.Equal(t, int32(2), *dep.Spec.Replicas)
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 1, ReadyReplicas: 1}
	require.NoError(t, env.Client.Status().Update(t.Context(), dep))
	require.Eventually(t, func() bool {
		st := h.ensure(t, cl)
		return st.Ready && strings.Contains(st.Message, "degraded: 2 of 3 etcd members and 1 of 2 API servers ready")
	}, 10*time.Second, 20*time.Millisecond, "a quorum and an API server serve, degraded")

	// The ProviderConfig turned single: this control plane stays highly available; a new one is single.
	h.pc.Spec.Hosted.HighAvailability = false
	h.ensure(t, cl)
	assert.Equal(t, int32(3), *get(t, &appsv1.StatefulSet{}, ns, NameEtcd).Spec.Replicas)
	other := newCluster("single")
	h.ensure(t, other)
	assert.False(t, record(t, other).HighAvailability)
	assert.Equal(t, int32(1), *get(t, &appsv1.StatefulSet{}, NamespaceFor(other.UID), NameEtcd).Spec.Replicas)
	err = env.Client.Get(t.Context(), client.ObjectKey{Namespace: NamespaceFor(other.UID), Name: NameEtcd}, &policyv1.PodDisruptionBudget{})
	assert.True(t, apierrors.IsNotFound(err), "a single control plane has no budget (it would block every drain): %v", err)
}

// TestSnapshotJobs: a snapshot of a hosted control plane is a Job in BackupNamespace (envtest
// runs none: the test ends it as the Job controller and the kubelet would, with the tool's
// result as the pod's termination message); while it runs Snapshot says SnapshotInProgress; once
// it ended, the snapshot is listed in its ConfigMap, those it removed are not, and the Job goes.
// A failed Job is an error that says why; a control plane on an emptyDir has no snapshots. Each
// Job has an etcd client certificate made for it (valid for its deadline and a margin, in a
// Secret it owns) that goes with it; the long-lived one of an earlier version goes at the first.
func TestSnapshotJobs(t *testing.T) {
	h := startBackend(t)
	ctx := t.Context()
	empty := newCluster("snap-emptydir")
	h.ensure(t, empty)
	_, err := h.b.Snapshot(ctx, empty, 3)
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonBackupUnavailable), "%v", err)
	assert.Contains(t, err.Error(), "emptyDir")

	h.pc.Spec.Hosted.StorageClassName = "standard"
	cl := newCluster("snap")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	names := namesFor(ns)
	sharedCredential(t, h, ns)
	_, err = h.b.Snapshot(ctx, cl, 3)
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	job := get(t, &batchv1.Job{}, BackupNamespace, names.job)
	assert.Equal(t, int64(snapshotDeadline.Seconds()), *job.Spec.ActiveDeadlineSeconds)
	ctr := job.Spec.Template.Spec.Containers[0]
	assert.Equal(t, image1, ctr.Image, "the control plane's own image runs it")
	assert.Equal(t, []string{"/usr/local/bin/etcd-snapshot"}, ctr.Command)
	assert.Contains(t, ctr.Args, "--keep=3")
	assert.Contains(t, ctr.Args, "--endpoints=https://etcd."+ns+".svc:2379")
	assert.Equal(t, string(cl.UID), job.Spec.Template.Labels[LabelClusterUID])
	assert.Equal(t, ComponentSnapshot, job.Spec.Template.Labels[LabelComponent], "the etcd NetworkPolicy lets these pods in")
	claim := get(t, &corev1.PersistentVolumeClaim{}, BackupNamespace, names.claim)
	assert.Equal(t, "standard", *claim.Spec.StorageClassName)
	assert.Equal(t, "4Gi", ptrTo(claim.Spec.Resources.Requests[corev1.ResourceStorage]).String())
	firstCert := jobCert(t, job, "pki", ns, x509.ExtKeyUsageClientAuth)
	assert.Equal(t, snapshotUser, firstCert.Subject.CommonName)
	assert.Equal(t, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, firstCert.ExtKeyUsage)
	assertNoSecret(t, names.shared, "the long-lived certificate of an earlier version is replaced by the Job's own")
	np := get(t, &networkingv1.NetworkPolicy{}, ns, NameEtcd)
	found := false
	for _, r := range np.Spec.Ingress {
		for _, from := range r.From {
			found = found || (from.NamespaceSelector != nil && from.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == BackupNamespace &&
				selects(t, from.PodSelector, job.Spec.Template.Labels))
		}
	}
	assert.True(t, found, "the etcd NetworkPolicy lets in this Cluster's snapshot Jobs: %+v", np.Spec.Ingress)
	_, err = h.b.Snapshot(ctx, cl, 3)
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "still running: %v", err)

	end := func(cond batchv1.JobConditionType, result string) {
		t.Helper()
		endJob(t, names.job, cond, result)
	}
	taken := func(name string) backend.Snapshot {
		return backend.Snapshot{Name: name, Cluster: cl.UID, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Revision: 7, Keys: 3, Version: "1.37.1", SHA256: "ab"}
	}
	result := func(s backend.Snapshot, removed ...string) string {
		data, err := json.Marshal(snapshotResult{Snapshot: &s, Removed: removed})
		require.NoError(t, err)
		return string(data)
	}
	first := taken("20261126T010000Z")
	end(batchv1.JobComplete, result(first))
	got, err := h.b.Snapshot(ctx, cl, 3)
	require.NoError(t, err)
	first.Namespace = cl.Namespace // the Job does not know it; the backend records it
	assert.Equal(t, first, got)
	require.Eventually(t, func() bool {
		j := &batchv1.Job{}
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: BackupNamespace, Name: names.job}, j)
		return apierrors.IsNotFound(err) || j.DeletionTimestamp != nil
	}, 10*time.Second, 20*time.Millisecond, "the Job goes once harvested")
	assertNoSecret(t, names.job, "its certificate goes with it")
	list, err := h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{first}, list)
	cm := get(t, &corev1.ConfigMap{}, BackupNamespace, names.catalog)
	assert.Contains(t, cm.Data[catalogKey], first.Name, "kubectl get configmap lists it")

	// The next one removes the first (keep); a failed one says why.
	forceGone(t, names.job)
	_, err = h.b.Snapshot(ctx, cl, 1)
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	job = get(t, &batchv1.Job{}, BackupNamespace, names.job)
	secondCert := jobCert(t, job, "pki", ns, x509.ExtKeyUsageClientAuth)
	assert.NotEqual(t, 0, firstCert.SerialNumber.Cmp(secondCert.SerialNumber), "a certificate of its own for the next Job")
	assert.NotEqual(t, firstCert.RawSubjectPublicKeyInfo, secondCert.RawSubjectPublicKeyInfo, "and a key of its own")
	second := taken("20261126T020000Z")
	end(batchv1.JobComplete, result(second, first.Name))
	second.Namespace = cl.Namespace
	_, err = h.b.Snapshot(ctx, cl, 1)
	require.NoError(t, err)
	list, err = h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{second}, list)

	forceGone(t, names.job)
	_, err = h.b.Snapshot(ctx, cl, 1)
	require.True(t, backend.IsReason(err, ReasonSnapshotInProgress), "%v", err)
	end(batchv1.JobFailed, `{"error":"etcdctl snapshot save: exit status 1: context deadline exceeded"}`)
	_, err = h.b.Snapshot(ctx, cl, 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "context deadline exceeded", "the tool's own words")
	assertNoSecret(t, names.job, "a failed Job's certificate goes with it too")
	list, err = h.b.Snapshots(ctx, cl)
	require.NoError(t, err)
	assert.Equal(t, []backend.Snapshot{second}, list, "a failure changes no list")

	// A Cluster whose namespace is gone (envtest deletes none: one whose namespace never was):
	// Delete removes its Jobs' credentials (and an earlier version's); the snapshots of every
	// Cluster stay.
	ghost := newCluster("ghost")
	ghostNames := namesFor(NamespaceFor(ghost.UID))
	creds := []string{ghostNames.shared, ghostNames.job, ghostNames.maintain, serveName(NamespaceFor(ghost.UID))}
	for _, name := range creds {
		require.NoError(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, Name: name}}))
	}
	gone, err := h.b.Delete(ctx, ghost)
	require.NoError(t, err)
	assert.True(t, gone)
	for _, name := range creds {
		assertNoSecret(t, name, "the credential goes with its Cluster")
	}
	get(t, &corev1.ConfigMap{}, BackupNamespace, names.catalog)
}

// selects reports whether sel selects labels.
func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	require.NoError(t, err)
	return s.Matches(labels.Set(l))
}

// endJob finishes Job name of BackupNamespace as Kubernetes would, its pod having written result
// as its termination message.
func endJob(t *testing.T, name string, cond batchv1.JobConditionType, result string) {
	t.Helper()
	ctx := t.Context()
	job := get(t, &batchv1.Job{}, BackupNamespace, name)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, GenerateName: name + "-",
		Labels: map[string]string{batchv1.JobNameLabel: name, batchv1.ControllerUidLabel: string(job.UID)}}, Spec: job.Spec.Template.Spec}
	require.NoError(t, env.Client.Create(ctx, pod))
	ctr := job.Spec.Template.Spec.Containers[0]
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ctr.Name, Image: ctr.Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Message: result}}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.Conditions = []batchv1.JobCondition{{Type: cond, Status: corev1.ConditionTrue, Reason: "Test", Message: "as the Job controller says"}}
	if cond == batchv1.JobComplete {
		job.Status.Succeeded, job.Status.CompletionTime = 1, &now
		job.Status.Conditions = append([]batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue}}, job.Status.Conditions...)
	} else {
		job.Status.Failed = 1
		job.Status.Conditions = append([]batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "Test"}}, job.Status.Conditions...)
	}
	require.NoError(t, env.Client.Status().Update(ctx, job))
}

// forceGone removes a Job envtest keeps (no garbage collector) so that the next can be made.
func forceGone(t *testing.T, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		j := &batchv1.Job{}
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: BackupNamespace, Name: name}, j)
		if apierrors.IsNotFound(err) {
			return true
		}
		if len(j.Finalizers) > 0 {
			j.Finalizers = nil
			_ = env.Client.Update(t.Context(), j)
		}
		return false
	}, 10*time.Second, 20*time.Millisecond)
}

// TestRestoreSteps: a restore names a snapshot of the Cluster's own list (others are refused,
// nothing changed); it is recorded and starts with a serve of the snapshot in BackupNamespace
// (its Service, its token in both namespaces, a certificate made for its Job, etcd's
// NetworkPolicy lets etcd reach it); a serve that refuses the snapshot (envtest runs no pod: the
// test ends the Job as Kubernetes would) ends the restore with Restored.Failed, nothing changed
// and the serve gone, its certificate with it. A new Cluster whose restore-from names no snapshot
// is refused before anything is made.
func TestRestoreSteps(t *testing.T) {
	h := startBackend(t)
	ctx := t.Context()
	h.pc.Spec.Hosted.StorageClassName = "standard"
	cl := newCluster("restored")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	hst, err := h.b.hostFor(ctx, nil)
	require.NoError(t, err)
	s := &Spec{Namespace: ns, Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, UID: cl.UID}}
	snap := backend.Snapshot{Name: "20261126T010000Z", Cluster: cl.UID, Namespace: cl.Namespace, Taken: time.Now().UTC().Truncate(time.Second), Size: 4096, Revision: 9, Keys: 3, Version: "1.37.1", SHA256: "ab"}
	require.NoError(t, hst.apply(ctx, s.BackupNamespaceObject()))
	require.NoError(t, updateCatalog(ctx, hst, s, snap, nil)) // as a snapshot Job's end would

	for _, tc := range []struct{ name, says string }{
		{"20261126T000000Z", `there is no snapshot "20261126T000000Z"`},
		{"../etc", "is not a snapshot name"},
	} {
		_, err := h.b.CheckRestore(ctx, cl, tc.name)
		require.Error(t, err)
		assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
		assert.Contains(t, err.Error(), tc.says)
	}
	later := snap
	later.Name, later.Version = "20261126T020000Z", "1.38.0"
	require.NoError(t, updateCatalog(ctx, hst, s, later, nil))
	_, err = h.b.CheckRestore(ctx, cl, later.Name)
	assert.ErrorContains(t, err, "a later version than the cluster's 1.37.1")

	got, err := h.b.CheckRestore(ctx, cl, snap.Name)
	require.NoError(t, err)
	assert.Equal(t, snap, got)
	require.NoError(t, h.b.Restore(ctx, cl, snap.Name))
	rec := record(t, cl)
	require.NotNil(t, rec.Restore)
	assert.Equal(t, restoreServe, rec.Restore.Phase)
	assert.Equal(t, "data", rec.Restore.PreviousDataDir)
	st := h.ensure(t, cl)
	assert.False(t, st.Ready)
	assert.Equal(t, backend.ReasonRestoring, st.Reason)
	assert.Contains(t, st.Message, "its snapshot is checked and served")
	name := serveName(ns)
	job := get(t, &batchv1.Job{}, BackupNamespace, name)
	assert.Contains(t, job.Spec.Template.Spec.Containers[0].Args, "--name="+snap.Name)
	assert.Equal(t, namesFor(ns).claim, job.Spec.Template.Spec.Volumes[len(job.Spec.Template.Spec.Volumes)-2].PersistentVolumeClaim.ClaimName, "the claim of the snapshot's Cluster")
	get(t, &corev1.Service{}, BackupNamespace, name)
	serveSecret := get(t, &corev1.Secret{}, BackupNamespace, name)
	serveCert := jobCert(t, job, "serve", ns, x509.ExtKeyUsageServerAuth)
	assert.NoError(t, serveCert.VerifyHostname(name+"."+BackupNamespace+".svc"), "what the etcd pods dial")
	token := get(t, &corev1.Secret{}, ns, SecretRestoreToken)
	assert.Equal(t, serveSecret.Data["token"], token.Data["token"])
	assert.Len(t, token.Data["token"], 64)
	egress := get(t, &networkingv1.NetworkPolicy{}, ns, NameEtcd).Spec.Egress
	require.NotEmpty(t, egress, "etcd reaches the serve while the restore runs")
	assert.Equal(t, map[string]string{corev1.LabelMetadataName: BackupNamespace}, egress[0].To[0].NamespaceSelector.MatchLabels)
	sts := get(t, &appsv1.StatefulSet{}, ns, NameEtcd)
	assert.Empty(t, sts.Spec.Template.Spec.InitContainers, "nothing changes before the serve has checked the snapshot")

	// The serve refuses the snapshot (damaged): the restore ends, nothing changed.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, GenerateName: name + "-",
		Labels: map[string]string{batchv1.ControllerUidLabel: string(job.UID)}}, Spec: job.Spec.Template.Spec}
	require.NoError(t, env.Client.Create(ctx, pod))
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ComponentServe, Image: image1, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
		ExitCode: 1, Message: `{"error":"restore refused, nothing changed: snapshot \"20261126T010000Z\" is damaged","refused":true}`}}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))
	now := metav1.Now()
	job.Status.StartTime = &now
	job.Status.Failed = 1
	job.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded"},
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}}
	require.NoError(t, env.Client.Status().Update(ctx, job))
	st = h.ensure(t, cl)
	require.NotNil(t, st.Restored)
	assert.Contains(t, st.Restored.Failed, "is damaged")
	assert.Contains(t, st.Restored.Failed, "nothing changed")
	assert.NotEqual(t, backend.ReasonRestoring, st.Reason)
	rec = record(t, cl)
	assert.Nil(t, rec.Restore)
	assert.Empty(t, rec.EtcdDataDir, "etcd keeps its data folder")
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: SecretRestoreToken}, &corev1.Secret{})
	assert.True(t, apierrors.IsNotFound(err), "the token goes with the serve: %v", err)
	assertNoSecret(t, name, "the serve's certificate and token go with it")
	assert.Empty(t, get(t, &appsv1.StatefulSet{}, ns, NameEtcd).Spec.Template.Spec.InitContainers)

	// A new Cluster from a snapshot that does not exist: refused, nothing made.
	copyOf := newCluster("copy")
	copyOf.Annotations = map[string]string{backend.AnnotationRestoreFrom: string(cl.UID) + "/20261126T030000Z"}
	_, err = h.b.Ensure(ctx, copyOf, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	err = env.Client.Get(ctx, client.ObjectKey{Name: NamespaceFor(copyOf.UID)}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "nothing made: %v", err)

	// From one that exists, for a Cluster of another namespace: not found, no name listed, its
	// keys not adopted, nothing made.
	foreign := newCluster("foreign")
	foreign.Namespace = "team-b"
	foreign.Annotations = map[string]string{backend.AnnotationRestoreFrom: snap.Ref()}
	_, err = h.b.Ensure(ctx, foreign, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, backend.ReasonRestoreRefused), "%v", err)
	assert.Contains(t, err.Error(), "(it has none for a Cluster of namespace team-b)")
	assert.NotContains(t, err.Error(), later.Name)
	err = env.Client.Get(ctx, client.ObjectKey{Name: NamespaceFor(foreign.UID)}, &corev1.Namespace{})
	assert.True(t, apierrors.IsNotFound(err), "nothing made: %v", err)

	// From one that exists: its etcd restores it from its first pod, and its API server reads
	// with the keys kept beside the snapshots (as a snapshot Job's start keeps them).
	_, err = h.b.keepKeys(ctx, hst, s)
	require.NoError(t, err)
	source, _ := keysIn(t, ns)
	copyOf.Annotations[backend.AnnotationRestoreFrom] = snap.Ref()
	h.ensure(t, copyOf)
	adopted, _ := keysIn(t, NamespaceFor(copyOf.UID))
	require.Len(t, adopted.Keys, 2)
	assert.Equal(t, source.Keys[0], adopted.Keys[1], "the snapshot's key reads")
	assert.NotEqual(t, source.Writer(), adopted.Writer(), "a key of its own writes")
	assert.False(t, adopted.Done(), "the restored Secrets are rewritten with it")
	csts := get(t, &appsv1.StatefulSet{}, NamespaceFor(copyOf.UID), NameEtcd)
	require.Len(t, csts.Spec.Template.Spec.InitContainers, 1)
	init := csts.Spec.Template.Spec.InitContainers[0]
	assert.Contains(t, init.Args, "--sha256="+snap.SHA256)
	assert.Contains(t, init.Args, "--url="+serveURL(NamespaceFor(copyOf.UID)))
	assert.Equal(t, flags(t, init.Args[1:])["--data-dir"], flags(t, csts.Spec.Template.Spec.Containers[0].Args)["--data-dir"], "etcd starts on what the init container restored")
	cjob := get(t, &batchv1.Job{}, BackupNamespace, serveName(NamespaceFor(copyOf.UID)))

	// Its serve served the new etcd before the backend saw it ready: that is no failure.
	cpod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: BackupNamespace, GenerateName: cjob.Name + "-",
		Labels: map[string]string{batchv1.ControllerUidLabel: string(cjob.UID)}}, Spec: cjob.Spec.Template.Spec}
	require.NoError(t, env.Client.Create(ctx, cpod))
	served, err := json.Marshal(snapshotResult{Snapshot: &snap})
	require.NoError(t, err)
	cpod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ComponentServe, Image: image1, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Message: string(served)}}}}
	require.NoError(t, env.Client.Status().Update(ctx, cpod))
	cjob.Status.StartTime, cjob.Status.CompletionTime, cjob.Status.Succeeded = &now, &now, 1
	cjob.Status.Conditions = []batchv1.JobCondition{{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}
	require.NoError(t, env.Client.Status().Update(ctx, cjob))
	st = h.ensure(t, copyOf)
	assert.Nil(t, st.Restored, "no failure: %+v", st.Restored)
	assert.Equal(t, restoreEtcd, record(t, copyOf).Restore.Phase, "on to etcd's pods")
}

// TestSourceRangesLive: the ProviderConfig's source ranges reach an existing control plane at
// its next reconcile, and go again when they are removed (the Service's traffic policy back to
// its default, the policy's ingress open).
// TestSourceRangesLive: allowedSourceRanges reach an existing control plane at once, and its API
// server then admits the listed ranges and the operator's pods only: the pod selectors, evaluated
// by the API server against real pods, pick the operator's two replicas (of different revisions)
// and no other pod, of its namespace or another.
func TestSourceRangesLive(t *testing.T) {
	ctx := t.Context()
	opNS, otherNS := "operator-"+string(uuid.NewUUID())[:8], "platform-"+string(uuid.NewUUID())[:8]
	for _, ns := range []string{opNS, otherNS} {
		require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	operatorLabels := map[string]string{"app.kubernetes.io/component": "operator", "app.kubernetes.io/name": "cluster-provider"}
	pod := func(ns, name string, l map[string]string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/c:1"}}}}
		require.NoError(t, env.Client.Create(ctx, p))
		return p
	}
	with := func(extra map[string]string) map[string]string {
		l := maps.Clone(operatorLabels)
		maps.Copy(l, extra)
		return l
	}
	self := pod(opNS, "cluster-provider-7d9c8b-a", with(map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: "7d9c8b"}))
	pod(opNS, "cluster-provider-5f6d4c-b", with(map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: "5f6d4c"})) // the next revision
	pod(opNS, "metrics-scraper", map[string]string{"app.kubernetes.io/name": "cluster-provider", "app.kubernetes.io/component": "scraper"})
	pod(otherNS, "impostor", with(nil)) // the operator's labels, in another namespace
	h := startBackendWith(t, func(o *Options) { o.OperatorPod = client.ObjectKeyFromObject(self) })

	cl := newCluster("ranges")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	from := func() []networkingv1.NetworkPolicyPeer {
		return get(t, &networkingv1.NetworkPolicy{}, ns, NameAPIServer).Spec.Ingress[0].From
	}
	assert.Empty(t, from())

	h.pc.Spec.Hosted.AllowedSourceRanges = []string{"203.0.113.0/24", "198.51.100.0/24"}
	h.ensure(t, cl)
	assert.Equal(t, corev1.ServiceExternalTrafficPolicyLocal, get(t, &corev1.Service{}, ns, NameExternal).Spec.ExternalTrafficPolicy)
	peers := from()
	require.Len(t, peers, 3)
	assert.Equal(t, "203.0.113.0/24", peers[0].IPBlock.CIDR)
	assert.Equal(t, "198.51.100.0/24", peers[1].IPBlock.CIDR)
	op := peers[2]
	require.Nil(t, op.IPBlock)
	require.NotNil(t, op.NamespaceSelector, "never the pods of every namespace")
	require.NotNil(t, op.PodSelector, "never every pod of a namespace")
	// What the selectors pick, as the API server selects.
	nsSel, err := metav1.LabelSelectorAsSelector(op.NamespaceSelector)
	require.NoError(t, err)
	namespaces := &corev1.NamespaceList{}
	require.NoError(t, env.Client.List(ctx, namespaces, client.MatchingLabelsSelector{Selector: nsSel}))
	var picked []string
	for _, n := range namespaces.Items {
		podSel, err := metav1.LabelSelectorAsSelector(op.PodSelector)
		require.NoError(t, err)
		pods := &corev1.PodList{}
		require.NoError(t, env.Client.List(ctx, pods, client.InNamespace(n.Name), client.MatchingLabelsSelector{Selector: podSel}))
		for _, p := range pods.Items {
			picked = append(picked, p.Namespace+"/"+p.Name)
		}
	}
	assert.ElementsMatch(t, []string{opNS + "/cluster-provider-7d9c8b-a", opNS + "/cluster-provider-5f6d4c-b"}, picked,
		"the operator's replicas only")

	h.pc.Spec.Hosted.AllowedSourceRanges = nil
	h.ensure(t, cl)
	assert.Equal(t, corev1.ServiceExternalTrafficPolicyCluster, get(t, &corev1.Service{}, ns, NameExternal).Spec.ExternalTrafficPolicy)
	assert.Empty(t, from())
}

// TestHostAPIEndpointsExcepted: the API server's egress to the issuers never reaches the host's
// own API server (the envtest's Service default/kubernetes and its EndpointSlices, as the API
// server publishes them) nor link-local addresses, with private issuers allowed or not; an
// endpoint added later reaches the NetworkPolicy at the next reconcile and leaves it when it goes;
// a reconcile with nothing changed does not rewrite the policy.
func TestHostAPIEndpointsExcepted(t *testing.T) {
	ctx := t.Context()
	svc := get(t, &corev1.Service{}, metav1.NamespaceDefault, "kubernetes")
	eps := &discoveryv1.EndpointSliceList{}
	require.NoError(t, env.Client.List(ctx, eps, client.InNamespace(metav1.NamespaceDefault), client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}))
	var endpoints []string
	for _, sl := range eps.Items {
		for _, ep := range sl.Endpoints {
			endpoints = append(endpoints, ep.Addresses...)
		}
	}
	require.NotEmpty(t, svc.Spec.ClusterIP)
	require.NotEmpty(t, endpoints, "the envtest's API server publishes its EndpointSlice")
	t.Logf("host API: ClusterIP %s, endpoints %v", svc.Spec.ClusterIP, endpoints)

	h := startBackend(t)
	h.pc.Spec.OIDC = &providersv1alpha1.OIDCSettings{AllowPrivateIssuers: true}
	cl := newCluster("host-api")
	h.ensure(t, cl)
	ns := NamespaceFor(cl.UID)
	policy := func() *networkingv1.NetworkPolicy { return get(t, &networkingv1.NetworkPolicy{}, ns, NameAPIServer) }
	except := func() []string {
		block := policy().Spec.Egress[2].To[0].IPBlock
		require.Equal(t, "0.0.0.0/0", block.CIDR)
		return block.Except
	}
	want := []string{"169.254.0.0/16", svc.Spec.ClusterIP + "/32"}
	for _, e := range endpoints {
		want = append(want, e+"/32")
	}
	assert.Subset(t, except(), want, "private issuers allowed, and still never the host's API server nor cloud metadata")
	assert.Equal(t, issuerExcept(true, append([]string{svc.Spec.ClusterIP}, endpoints...)), except(), "nothing else")

	// An endpoint added (a new API server of the host) reaches the policy; a reconcile that changes
	// nothing leaves it as it is.
	extra := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: metav1.NamespaceDefault, Name: "kubernetes-" + string(uuid.NewUUID())[:8], Labels: map[string]string{discoveryv1.LabelServiceName: "kubernetes"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"198.51.100.7"}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	require.NoError(t, env.Client.Create(ctx, extra))
	env.DeleteAtCleanup(t, extra)
	hostSees(t, h, len(eps.Items)+1)
	h.ensure(t, cl)
	assert.Contains(t, except(), "198.51.100.7/32")
	generation := policy().Generation
	h.ensure(t, cl)
	assert.Equal(t, generation, policy().Generation, "the same endpoints give the same policy")

	// Without private issuers the private ranges are excepted and cover the envtest's own
	// addresses (its service range is in 10.0.0.0/8); a public endpoint is still excepted by itself.
	h.pc.Spec.OIDC = nil
	h.ensure(t, cl)
	require.True(t, netip.MustParsePrefix("10.0.0.0/8").Contains(netip.MustParseAddr(svc.Spec.ClusterIP)), "the envtest's service range")
	assert.Subset(t, except(), []string{"10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "198.51.100.7/32"})
	assert.NotContains(t, except(), svc.Spec.ClusterIP+"/32", "covered by 10.0.0.0/8: not listed twice")
	for _, e := range endpoints {
		if ip := netip.MustParseAddr(e); !slices.ContainsFunc(privateRanges, func(r string) bool { return netip.MustParsePrefix(r).Contains(ip) }) {
			assert.Contains(t, except(), e+"/32", "an endpoint outside the private ranges is excepted by itself")
		}
	}
	assert.Equal(t, issuerExcept(false, append([]string{svc.Spec.ClusterIP, "198.51.100.7"}, endpoints...)), except())

	require.NoError(t, env.Client.Delete(ctx, extra))
	hostSees(t, h, len(eps.Items))
	h.ensure(t, cl)
	assert.NotContains(t, except(), "198.51.100.7/32", "an endpoint gone leaves the policy")
}

// hostSees waits until the backend's cache holds n EndpointSlices of the host's API server (it
// watches them: a reconcile after a change sees it).
func hostSees(t *testing.T, h *harness, n int) {
	t.Helper()
	hst, err := h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		eps := &discoveryv1.EndpointSliceList{}
		return hst.cache.List(t.Context(), eps, client.InNamespace(metav1.NamespaceDefault),
			client.MatchingLabels{discoveryv1.LabelServiceName: "kubernetes"}) == nil && len(eps.Items) == n
	}, 10*time.Second, 10*time.Millisecond)
}

// TestPriorityClassReplaced: the PriorityClass an earlier version made (its label, no
// preemptionPolicy: the API server defaults PreemptLowerPriority) is replaced once by one that
// never preempts; a class of that name that is not the operator's is never touched, and a highly
// available control plane is refused while it would preempt (with the reason and what to do); one
// that is already as planned is used as it is.
func TestPriorityClassReplaced(t *testing.T) {
	ctx := t.Context()
	key := client.ObjectKey{Name: PriorityClassControlPlane}
	// Set the class up as given, whatever an earlier test left.
	setClass := func(pc *schedulingv1.PriorityClass) *schedulingv1.PriorityClass {
		t.Helper()
		require.NoError(t, client.IgnoreNotFound(env.Client.Delete(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: PriorityClassControlPlane}})))
		require.Eventually(t, func() bool {
			return apierrors.IsNotFound(env.Client.Get(ctx, key, &schedulingv1.PriorityClass{}))
		}, 10*time.Second, 20*time.Millisecond)
		require.NoError(t, env.Client.Create(ctx, pc))
		return pc
	}
	// At the end the class is the operator's, as later tests expect.
	t.Cleanup(func() {
		cur := &schedulingv1.PriorityClass{}
		if err := env.Client.Get(context.Background(), key, cur); err == nil && (!PriorityClassCurrent(cur) || cur.Labels[LabelManagedBy] != ManagedBy) {
			_ = env.Client.Delete(context.Background(), cur)
		}
	})
	h := startBackend(t)
	h.pc.Spec.Hosted.StorageClassName = "standard"
	h.pc.Spec.Hosted.HighAvailability = true

	old := setClass(&schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: PriorityClassControlPlane, Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Value:      priorityControlPlane,
	})
	require.Equal(t, corev1.PreemptLowerPriority, *get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane).PreemptionPolicy, "as an earlier version left it")
	cl := newCluster("ha-priority")
	h.ensure(t, cl)
	replaced := get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane)
	assert.NotEqual(t, old.UID, replaced.UID, "made anew")
	assert.Equal(t, corev1.PreemptNever, *replaced.PreemptionPolicy)
	assert.Equal(t, int32(priorityControlPlane), replaced.Value)
	assert.Equal(t, ManagedBy, replaced.Labels[LabelManagedBy])
	h.ensure(t, cl)
	h.ensure(t, newCluster("ha-priority-2"))
	assert.Equal(t, replaced.UID, get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane).UID, "replaced once")

	// Someone else's class that preempts: untouched, and the control plane is refused.
	foreign := setClass(&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: PriorityClassControlPlane}, Value: 1000})
	_, err := h.b.Ensure(ctx, cl, backend.Want{Version: "1.37.1"})
	require.Error(t, err)
	assert.True(t, backend.IsReason(err, ReasonPriorityClassNotOwned), "%v", err)
	assert.Equal(t, time.Minute, backend.RetryAfter(err), "no object of the platform's API changes when the class is deleted: looked at again")
	assert.ErrorContains(t, err, "is not this operator's")
	assert.ErrorContains(t, err, "delete it")
	cur := get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane)
	assert.Equal(t, foreign.UID, cur.UID, "never touched")
	assert.Equal(t, int32(1000), cur.Value)

	// Someone else's class that never preempts: used as it is.
	foreign = setClass(&schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: PriorityClassControlPlane},
		Value: priorityControlPlane, PreemptionPolicy: ptr.To(corev1.PreemptNever), Description: "ours, by GitOps"})
	h.ensure(t, cl)
	assert.Equal(t, foreign.UID, get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane).UID, "never touched")

	// Deleted by its owner: the operator makes its own.
	require.NoError(t, env.Client.Delete(ctx, foreign))
	h.ensure(t, cl)
	made := get(t, &schedulingv1.PriorityClass{}, "", PriorityClassControlPlane)
	assert.Equal(t, ManagedBy, made.Labels[LabelManagedBy])
	assert.Equal(t, corev1.PreemptNever, *made.PreemptionPolicy)
}

// TestExposure: an endpoint on spec.hosted.externalHost or a load balancer survives a node's
// loss; the default, one node's address, is reported as not resilient (a warning).
func TestExposure(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("exposure")
	st := h.ensure(t, cl)
	require.NotNil(t, st.Exposure)
	assert.True(t, st.Exposure.Ready)
	assert.Equal(t, backend.ReasonExternalHost, st.Exposure.Reason)

	h.pc.Spec.Hosted.ExternalHost = ""
	st = h.ensure(t, cl)
	assert.False(t, st.Exposure.Ready)
	assert.Equal(t, backend.ReasonSingleNodeEndpoint, st.Exposure.Reason)
	assert.Contains(t, st.Exposure.Message, "The endpoint 203.0.113.10 is one node's address")
	assert.Contains(t, st.Exposure.Message, "Set spec.hosted.externalHost")

	h.pc.Spec.Hosted.Exposure = corev1.ServiceTypeLoadBalancer
	lb := newCluster("exposure-lb")
	st = h.ensure(t, lb)
	assert.True(t, st.Exposure.Ready)
	assert.Equal(t, backend.ReasonLoadBalancer, st.Exposure.Reason)
}

// TestAuditLive: the ProviderConfig's audit switch reaches an existing control plane: its API
// server's Deployment rolls with the audit sidecar and flags, and without them when turned off;
// AdminConfig of a new operator (no credentials in memory yet) changes nothing of it.
func TestAuditLive(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("audited")
	want := backend.Want{Version: "1.37.1"}
	h.ensureWant(t, cl, want)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	audited := func() (sidecar, flag bool) {
		pod := get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Spec
		for _, c := range pod.Containers {
			sidecar = sidecar || c.Name == containerAudit
		}
		return sidecar, slices.ContainsFunc(pod.InitContainers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--audit-log-path=") })
	}
	h.ensureWant(t, cl, want)
	sidecar, flag := audited()
	assert.True(t, sidecar && flag, "audit on: sidecar %v, flag %v", sidecar, flag)
	assert.Contains(t, get(t, &corev1.ConfigMap{}, ns, NameAuditPolicy).Data[auditPolicyKey], "level: Metadata")

	// A new operator's first call for the control plane may be AdminConfig (an AccessRequest
	// reconciled before its Cluster): it leaves the workloads as they are.
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	h2 := startBackend(t)
	h2.pc = h.pc
	_, err := h2.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	assert.Equal(t, dep.Generation, get(t, &appsv1.Deployment{}, ns, NameAPIServer).Generation, "AdminConfig rolls nothing")

	h.pc.Spec.Audit = &providersv1alpha1.AuditPolicy{Disabled: true}
	h.ensureWant(t, cl, want)
	sidecar, flag = audited()
	assert.False(t, sidecar || flag, "audit off: sidecar %v, flag %v", sidecar, flag)

	h.pc.Spec.Audit = nil
	h.ensureWant(t, cl, want)
	sidecar, flag = audited()
	assert.True(t, sidecar && flag, "on again")
}
