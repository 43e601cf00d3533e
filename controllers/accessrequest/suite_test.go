package accessrequest_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/backendtest"
	"github.com/openmcp-local/cluster-provider/controllers/accessrequest"
	"github.com/openmcp-local/cluster-provider/test/operator"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// env is the platform; clusters is the one API server every cluster of the fake backend
// (backend/backendtest) hands out, apart from the platform's: the tests grant real tokens and RBAC
// objects there and keep apart by their names. The tests named ...WithLocalBackend run real
// local clusters instead.
var env, clusters *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env, &clusters)) }

const (
	testProvider = "artest"
	// within bounds every wait: a local cluster starts in seconds, slower under -race with other
	// packages' tests running.
	within = 2 * time.Minute
	poll   = 50 * time.Millisecond
)

// newProviderConfig creates a local ProviderConfig and returns the name of its profile.
func newProviderConfig(t testing.TB) string {
	t.Helper()
	pc := &providersv1alpha1.ProviderConfig{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "pc-"},
		Spec:       providersv1alpha1.ProviderConfigSpec{Backend: providersv1alpha1.BackendLocal},
	}
	require.NoError(t, env.Client.Create(t.Context(), pc))
	env.DeleteAtCleanup(t, pc)
	return "default." + testProvider + "." + pc.Name
}

func newCluster(t testing.TB, ns, name, profileName string) *clustersv1alpha1.Cluster {
	t.Helper()
	cl := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profileName, Tenancy: clustersv1alpha1.TenancyExclusive},
	}
	require.NoError(t, env.Client.Create(t.Context(), cl))
	env.DeleteAtCleanup(t, cl)
	return cl
}

// newRequest creates a token AccessRequest for the Cluster named cluster in ns; mutate adjusts it
// before.
func newRequest(t *testing.T, ns, name, cluster string, token clustersv1alpha1.TokenConfig, mutate ...func(*clustersv1alpha1.AccessRequest)) *clustersv1alpha1.AccessRequest {
	t.Helper()
	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: clustersv1alpha1.AccessRequestSpec{
			ClusterRef: &common.ObjectReference{Name: cluster},
			Token:      &token,
		},
	}
	for _, m := range mutate {
		m(ar)
	}
	require.NoError(t, env.Client.Create(t.Context(), ar))
	return ar
}

// waitRequest waits until the AccessRequest's state satisfies check and returns it.
func waitRequest(t *testing.T, key client.ObjectKey, what string, check func(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest)) *clustersv1alpha1.AccessRequest {
	t.Helper()
	got := &clustersv1alpha1.AccessRequest{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, env.Client.Get(context.Background(), key, got))
		check(c, got)
	}, within, poll, what)
	return got
}

// hasGranted checks the phase and the Granted condition's reason, for the current generation.
func hasGranted(c assert.TestingT, ar *clustersv1alpha1.AccessRequest, phase, reason string) {
	assert.Equal(c, phase, ar.Status.Phase)
	assert.Equal(c, ar.Generation, ar.Status.ObservedGeneration)
	cond := meta.FindStatusCondition(ar.Status.Conditions, accessrequest.ConditionGranted)
	if assert.NotNil(c, cond) {
		assert.Equal(c, reason, cond.Reason, cond.Message)
	}
}

func isGranted(c *assert.CollectT, ar *clustersv1alpha1.AccessRequest) {
	hasGranted(c, ar, common.PhaseGranted, accessrequest.ReasonGranted)
}

// secretOf returns the kubeconfig Secret of ar.
func secretOf(t testing.TB, ar *clustersv1alpha1.AccessRequest) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ar.Namespace, Name: accessrequest.SecretName(ar.Name)}, s))
	return s
}

// kubeconfigClient is a client of the cluster authenticated by the Secret's kubeconfig, as a user
// of the access would build it.
func kubeconfigClient(t testing.TB, s *corev1.Secret) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[clustersv1alpha1.SecretKeyKubeconfig])
	require.NoError(t, err)
	return kubernetes.NewForConfigOrDie(cfg)
}

// startFake runs the operator, with the labeller, and a fake backend whose clusters are the
// clusters API server, until the test ends; o.Backend is set.
func startFake(t testing.TB, o operator.Options) *backendtest.Fake {
	t.Helper()
	fake := backendtest.New(backendtest.Options{Server: clusters.Config})
	o.ProviderName, o.Labeller, o.Backend = testProvider, true, fake
	operator.Start(t, env, o)
	return fake
}

// adminClient reaches cl's cluster as the operator does, through be's AdminConfig.
func adminClient(t testing.TB, be backend.Backend, cl *clustersv1alpha1.Cluster) kubernetes.Interface {
	t.Helper()
	cfg, err := be.AdminConfig(context.Background(), cl)
	require.NoError(t, err)
	return kubernetes.NewForConfigOrDie(cfg)
}

func gone(t *testing.T, obj client.Object) {
	t.Helper()
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	}, within, poll, "%s still exists", obj.GetName())
}

func rule(groups, resources, verbs []string) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: groups, Resources: resources, Verbs: verbs}
}

// awaitStatus waits until call answers with the HTTP status code want (200: no error); if it never
// does within, the test fails and goes on. A cluster's API server authorizes with the RBAC objects
// its informers have seen, so a permission just granted or removed may take a moment to count.
func awaitStatus(t *testing.T, want int32, what string, call func() error) bool {
	t.Helper()
	return assert.EventuallyWithT(t, func(c *assert.CollectT) {
		err := call()
		assert.EqualValues(c, want, status(err), "%s: %v", what, err)
	}, within, poll, what)
}

// status is the HTTP status code of err (200 for nil).
func status(err error) int32 {
	if err == nil {
		return 200
	}
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Code
	}
	return -1
}
