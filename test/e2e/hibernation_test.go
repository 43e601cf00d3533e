package e2e

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// hibernateWithin bounds the wait for an idle hibernation: idleAfter (10 s) after the last
// connection, which a client-go client (the operator's own, granting) keeps open up to 90 s.
const hibernateWithin = 3 * time.Minute

// TestHibernation runs the binary with the local backend and a ProviderConfig whose Clusters
// hibernate after 10 s without a client: the Cluster hibernates (condition Hibernated True Idle,
// an Event, no process left) and stays Ready; the kubeconfig of a token AccessRequest granted
// before works on the first request after it (same endpoint and CA, the data there), which wakes
// it (Hibernated False, an Event); hibernated again on demand (the annotation, with kubectl), an
// AccessRequest created meanwhile is granted (the operator's requests wake it) and its kubeconfig
// works with kubectl.
func TestHibernation(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	stateDir := t.TempDir()
	ctx := t.Context()
	runLocal(t, bin, kubeconfig, "e2eh", stateDir)
	kubectlPath(t)

	pc := sampleProviderConfig(t)
	pc.GenerateName, pc.Name = "hibernate-", ""
	pc.Spec.Hibernation = &providersv1alpha1.HibernationPolicy{IdleAfter: &metav1.Duration{Duration: 10 * time.Second}}
	require.NoError(t, env.Client.Create(ctx, pc))
	cl := readSample(t, "cluster.yaml", &clustersv1alpha1.Cluster{})
	cl.Namespace = testNamespace(t)
	cl.Spec.Profile = "default.e2eh." + pc.Name
	require.NoError(t, env.Client.Create(ctx, cl))
	cl = waitReady(t, cl)
	endpoint := cl.Status.APIServer
	clusterDir := filepath.Join(stateDir, string(cl.UID))

	ar := readSample(t, "accessrequest.yaml", &clustersv1alpha1.AccessRequest{})
	ar.Namespace, ar.Spec.ClusterRef.Namespace, ar.Spec.ClusterRef.Name = cl.Namespace, cl.Namespace, cl.Name
	require.NoError(t, env.Client.Create(ctx, ar))
	before := waitKubeconfig(t, ar)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl(t, before, "-n", "sample-apps", "create", "configmap", "before-sleep")
		require.NoError(c, err, "%s", out)
	}, convergeWithin, poll, "kubectl create configmap in sample-apps")

	// Idle: no client for 10 s (kubectl has exited; the operator's grant connection goes after
	// client-go's 90 s idle timeout).
	hibernated := waitHibernated(t, cl, backend.ReasonIdle)
	assert.Equal(t, "Ready", string(hibernated.Status.Phase), "a hibernated Cluster is Ready: its endpoint answers")
	assert.Equal(t, endpoint, hibernated.Status.APIServer)
	assert.Empty(t, clusterPIDs(t, clusterDir), "no process of the cluster runs")
	waitEvent(t, cl, backend.ReasonHibernated)

	// The first request after hibernation, with the kubeconfig from before: answered, no error.
	cfg, err := clientcmd.BuildConfigFromFlags("", before)
	require.NoError(t, err)
	// Its TLS handshake waits as long as the front door holds a connection: the binary runs with
	// -race under make test, where a wake can take longer than kubectl's 10 s (docs/hibernation.md).
	took, err := testenv.ListNamespacesOnce(ctx, cfg, 90*time.Second)
	require.NoError(t, err, "the first request after hibernation")
	t.Logf("FIGURE first request after hibernation (binary with -race under make test): %.2f s", took.Seconds())
	out, err := kubectl(t, before, "-n", "sample-apps", "get", "configmap", "before-sleep", "-o", "name")
	require.NoError(t, err, "%s", out)
	assert.Contains(t, out, "before-sleep", "the data from before")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &clustersv1alpha1.Cluster{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(cl), got))
		h := meta.FindStatusCondition(got.Status.Conditions, backend.PartHibernated)
		require.NotNil(c, h)
		assert.Equal(c, backend.ReasonAwake, h.Reason)
	}, convergeWithin, poll, "Hibernated False (Awake) after the wake")
	waitEvent(t, cl, backend.ReasonWoken)

	// On demand, with kubectl; an AccessRequest made while it sleeps is granted.
	platform := writeKubeconfig(t, env.Config) // the platform team's kubectl
	out, err = kubectl(t, platform, "-n", cl.Namespace, "annotate", "cluster", cl.Name, backend.AnnotationHibernate+"=true")
	require.NoError(t, err, "%s", out)
	waitHibernated(t, cl, backend.ReasonOnDemand)
	second := readSample(t, "accessrequest.yaml", &clustersv1alpha1.AccessRequest{})
	second.Name = "while-asleep"
	second.Namespace, second.Spec.ClusterRef.Namespace, second.Spec.ClusterRef.Name = cl.Namespace, cl.Namespace, cl.Name
	require.NoError(t, env.Client.Create(ctx, second))
	after := waitKubeconfig(t, second)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl(t, after, "-n", "sample-apps", "get", "configmap", "before-sleep", "-o", "name")
		require.NoError(c, err, "%s", out)
	}, convergeWithin, poll, "the kubeconfig of the AccessRequest made while hibernated")

	checkPool(t, platform, pc, cl.Namespace, stateDir)
}

// checkPool turns the pool of pc on with kubectl, waits for its spare, creates a Cluster of the
// profile and checks that it was made from the spare (the spare's folder name is left as a link
// to the Cluster's folder) and is Ready; then turns the pool off, which removes the new spare.
func checkPool(t *testing.T, platform string, pc *providersv1alpha1.ProviderConfig, ns, stateDir string) {
	t.Helper()
	ctx := t.Context()
	out, err := kubectl(t, platform, "patch", "providerconfig", pc.Name, "--type=merge", "-p", `{"spec":{"pool":{"size":1}}}`)
	require.NoError(t, err, "%s", out)
	var spare string
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &providersv1alpha1.ProviderConfig{}
		require.NoError(c, env.Client.Get(ctx, client.ObjectKeyFromObject(pc), got))
		require.NotNil(c, got.Status.Pool)
		assert.Equal(c, int32(1), got.Status.Pool.Ready, "a ready spare")
		dirs, _ := filepath.Glob(filepath.Join(stateDir, "spare-*"))
		require.Len(c, dirs, 1)
		spare = dirs[0]
	}, convergeWithin, poll, "the pool's spare")

	claimed := readSample(t, "cluster.yaml", &clustersv1alpha1.Cluster{})
	claimed.Name, claimed.Namespace = "from-the-pool", ns
	claimed.Spec.Profile = "default.e2eh." + pc.Name
	require.NoError(t, env.Client.Create(ctx, claimed))
	claimed = waitReady(t, claimed)
	link, err := os.Readlink(spare)
	require.NoError(t, err, "the spare's folder became the Cluster's")
	assert.Equal(t, string(claimed.UID), link)

	out, err = kubectl(t, platform, "patch", "providerconfig", pc.Name, "--type=json", "-p", `[{"op":"remove","path":"/spec/pool"}]`)
	require.NoError(t, err, "%s", out)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		paths, err := filepath.Glob(filepath.Join(stateDir, "spare-*"))
		require.NoError(c, err)
		for _, p := range paths {
			fi, err := os.Lstat(p)
			require.NoError(c, err)
			assert.NotZero(c, fi.Mode()&os.ModeSymlink, "%s: only the links of claimed spares are left", p)
		}
	}, convergeWithin, poll, "the spares removed with the pool")
}

// waitHibernated waits until cl's condition Hibernated is True for reason and returns the Cluster.
func waitHibernated(t *testing.T, cl *clustersv1alpha1.Cluster, reason string) *clustersv1alpha1.Cluster {
	t.Helper()
	return waitHibernatedOn(t, env.Client, cl, reason)
}

// waitHibernatedOn is waitHibernated with the platform's client pc.
func waitHibernatedOn(t *testing.T, pc client.Client, cl *clustersv1alpha1.Cluster, reason string) *clustersv1alpha1.Cluster {
	t.Helper()
	got := &clustersv1alpha1.Cluster{}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		require.NoError(c, pc.Get(t.Context(), client.ObjectKeyFromObject(cl), got))
		h := meta.FindStatusCondition(got.Status.Conditions, backend.PartHibernated)
		require.NotNil(c, h, "conditions: %+v", got.Status.Conditions)
		assert.Equal(c, metav1.ConditionTrue, h.Status, "%s: %s", h.Reason, h.Message)
		assert.Equal(c, reason, h.Reason)
	}, hibernateWithin, poll, "Cluster %s hibernated (%s)", cl.Name, reason)
	return got
}

// waitEvent waits for an Event of reason about cl.
func waitEvent(t *testing.T, cl *clustersv1alpha1.Cluster, reason string) {
	t.Helper()
	waitEventOn(t, env.Client, cl, reason)
}

// waitEventOn is waitEvent with the platform's client pc.
func waitEventOn(t *testing.T, pc client.Client, cl *clustersv1alpha1.Cluster, reason string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		evs := &corev1.EventList{}
		require.NoError(c, pc.List(t.Context(), evs, client.InNamespace(cl.Namespace)))
		found := false
		for _, e := range evs.Items {
			found = found || (e.InvolvedObject.Name == cl.Name && e.Reason == reason)
		}
		assert.True(c, found, "an Event %s of Cluster %s", reason, cl.Name)
	}, convergeWithin, poll)
}
