package hosted

import (
	"crypto/x509"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
)

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

// TestForProfile: the operator binds the backend to each profile's ProviderConfig: the bound view
// offers its images' versions and makes control planes from the spec it was bound with, without
// reading the ProviderConfig again; unbound and without Options.Config it says what is missing.
func TestForProfile(t *testing.T) {
	h := startBackendWith(t, func(o *Options) { o.Config = nil })
	pc := h.pc.DeepCopy()
	pc.Spec.Hosted.Images["1.36.3"] = "cluster-provider/controlplane:v1.36.3"
	v := h.b.ForProfile(pc)
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
