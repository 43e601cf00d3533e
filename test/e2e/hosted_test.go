package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/test/idp"
	"github.com/openmcp-local/cluster-provider/test/scenario"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// hostedTarget is the platform of `make e2e-kind` with deploy/hosted applied: its client and
// kubeconfig, and the ProviderConfig a hosted profile needs ($E2E_CONTROLPLANE_IMAGE, the
// StorageClass hack/localprovisioner serves, no scheduled snapshots).
func hostedTarget(t *testing.T) (client.Client, string, *providersv1alpha1.ProviderConfig) {
	t.Helper()
	kubeconfig := os.Getenv("E2E_KIND_KUBECONFIG")
	image := os.Getenv("E2E_CONTROLPLANE_IMAGE")
	if kubeconfig == "" || image == "" {
		t.Skip("E2E_KIND_KUBECONFIG or E2E_CONTROLPLANE_IMAGE is not set: this runs under make e2e-kind, which needs a Docker engine")
	}
	kubectlPath(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	require.NoError(t, err)
	version := strings.TrimPrefix(image[strings.LastIndex(image, ":")+1:], "v")
	pc := &providersv1alpha1.ProviderConfig{Spec: providersv1alpha1.ProviderConfigSpec{
		Backend: providersv1alpha1.BackendHosted,
		// Snapshot Jobs only where a test is about them (TestHostedBackupOnKind).
		Backup: &providersv1alpha1.BackupPolicy{Disabled: true},
		Hosted: &providersv1alpha1.HostedBackendConfig{
			Images:           map[string]string{version: image},
			StorageClassName: envOr("E2E_STORAGE_CLASS", "hosted-local"),
		},
	}}
	return c, kubeconfig, pc
}

// TestScenarioHostedOnKind runs the scenario suite against the operator of deploy/hosted: the
// Cluster's control plane runs as pods of the kind platform, its kubeconfigs name the NodePort on
// a node's address, which this machine reaches directly (kind's Docker network), and the
// identity provider listens on the Docker network's gateway, which the API server's pod reaches.
func TestScenarioHostedOnKind(t *testing.T) {
	c, _, pc := hostedTarget(t)
	scenario.Run(t, scenario.Target{
		Client: c, ProviderName: envOr("E2E_PROVIDER_NAME", "local"), Environment: envOr("E2E_ENVIRONMENT", "default"),
		ProviderConfig: pc, Within: 5 * time.Minute, IdP: idp.StartAt(t, kindGateway(t)),
		ClusterGone: func(t *testing.T, uid types.UID) {
			hostedGone(t, c, uid)
		},
	})
}

// hostedGone checks that the control plane's namespace, its claims and their volumes are gone.
func hostedGone(t *testing.T, c client.Client, uid types.UID) {
	t.Helper()
	ns := hosted.NamespaceFor(uid)
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(c.Get(context.Background(), client.ObjectKey{Name: ns}, &corev1.Namespace{}))
	}, 3*time.Minute, poll, "namespace %s goes with its Cluster", ns)
	require.Eventually(t, func() bool {
		pvs := &corev1.PersistentVolumeList{}
		require.NoError(t, c.List(context.Background(), pvs))
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
				return false
			}
		}
		return true
	}, 2*time.Minute, poll, "the volumes of namespace %s go with it", ns)
}

// TestHostedOnKind is the hosted backend's acceptance on the kind platform (issue 26): (a) ten
// Clusters Ready, spread over the nodes, with create → Ready figures; (b) the operator's pods
// deleted and then rolled to a new image while a client polls every cluster every 200 ms with a
// kubeconfig issued before: no control-plane pod restarts, no failed request; (c) a control
// plane's API server pod and then its etcd pod deleted: the data is kept; figures of the pods'
// memory. $E2E_OPERATOR_NEXT_IMAGE is the image of the rollout (loaded into the nodes).
func TestHostedOnKind(t *testing.T) {
	c, kubeconfig, pc := hostedTarget(t)
	nextImage := os.Getenv("E2E_OPERATOR_NEXT_IMAGE")
	require.NotEmpty(t, nextImage, "E2E_OPERATOR_NEXT_IMAGE: the operator image of the rollout")
	ctx := context.Background()
	opNS := envOr("E2E_OPERATOR_NAMESPACE", "cluster-provider-system")
	n := 10
	if v := os.Getenv("E2E_HOSTED_CLUSTERS"); v != "" {
		_, err := fmt.Sscan(v, &n)
		require.NoError(t, err)
	}

	pc = pc.DeepCopy()
	pc.GenerateName = "hosted-"
	require.NoError(t, c.Create(ctx, pc))
	t.Cleanup(func() { _ = c.Delete(context.Background(), pc) })
	profile := envOr("E2E_ENVIRONMENT", "default") + "." + envOr("E2E_PROVIDER_NAME", "local") + "." + pc.Name
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "hosted-"}}
	require.NoError(t, c.Create(ctx, ns))
	require.Eventually(t, func() bool {
		return c.Get(ctx, client.ObjectKey{Name: profile}, &clustersv1alpha1.ClusterProfile{}) == nil
	}, time.Minute, poll, "ClusterProfile %s", profile)

	// (a) n Clusters at once.
	clusters := make([]*clustersv1alpha1.Cluster, n)
	created := make([]time.Time, n)
	for i := range clusters {
		clusters[i] = &clustersv1alpha1.Cluster{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("c%02d", i)},
			Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyExclusive},
		}
		created[i] = time.Now()
		require.NoError(t, c.Create(ctx, clusters[i]))
	}
	t.Cleanup(func() {
		for _, cl := range clusters {
			_ = c.Delete(context.Background(), cl)
		}
		for _, cl := range clusters {
			hostedGone(t, c, cl.UID)
		}
	})
	took := make([]time.Duration, n)
	ready := 0
	require.Eventually(t, func() bool {
		for i, cl := range clusters {
			if took[i] != 0 {
				continue
			}
			require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
			if cl.Status.Phase == common.PhaseReady {
				took[i] = time.Since(created[i])
				ready++
			}
		}
		return ready == n
	}, 10*time.Minute, poll, "%d Clusters Ready", n)
	sorted := slices.Clone(took)
	slices.Sort(sorted)
	t.Logf("FIGURE hosted create→Ready of %d Clusters created at once: p50 %.1f s, p95 %.1f s, max %.1f s",
		n, sorted[n/2].Seconds(), sorted[(n*95+99)/100-1].Seconds(), sorted[n-1].Seconds())
	nodes := map[string]int{}
	for _, cl := range clusters {
		pods := &corev1.PodList{}
		require.NoError(t, c.List(ctx, pods, client.InNamespace(hosted.NamespaceFor(cl.UID))))
		for _, p := range pods.Items {
			nodes[p.Spec.NodeName]++
		}
	}
	t.Logf("control-plane pods per node: %v", nodes)
	assert.GreaterOrEqual(t, len(nodes), 2, "the control planes spread over at least 2 nodes")

	// Kubeconfigs issued before anything happens to the operator: one token AccessRequest each.
	clients := make([]kubernetes.Interface, n)
	for i, cl := range clusters {
		ar := &clustersv1alpha1.AccessRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: cl.Name},
			Spec: clustersv1alpha1.AccessRequestSpec{
				ClusterRef: &common.ObjectReference{Name: cl.Name, Namespace: ns.Name},
				Token: &clustersv1alpha1.TokenConfig{Permissions: []clustersv1alpha1.PermissionsRequest{{
					Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list"}}},
				}}},
			},
		}
		require.NoError(t, c.Create(ctx, ar))
		clients[i] = grantedClient(t, c, ar)
	}
	for i := range clients {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, err := clients[i].CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
			assert.NoError(ct, err)
		}, time.Minute, poll, "cluster %d answers its kubeconfig from this machine", i)
	}

	// (b) The operator's pods deleted, then rolled to a new image, while every cluster is polled.
	// First a quiet half minute of polling: the same clients on the same machine with nothing
	// happening to the operator, the baseline of the answers' latency on this machine.
	quiet := startPollers(clients, 200*time.Millisecond)
	time.Sleep(30 * time.Second) // a measurement window, not synchronisation
	base := summarize(quiet.stop())
	t.Logf("FIGURE hosted baseline, %d clusters polled for 30 s: %s", n, base)
	for _, e := range base.errors {
		t.Errorf("quiet half minute: %v", e)
	}
	before := controlPlanePods(t, c, clusters)
	pollers := startPollers(clients, 200*time.Millisecond)
	kc := func(args ...string) string {
		t.Logf("%s kubectl %s", time.Now().Format(time.TimeOnly), strings.Join(args, " "))
		out, err := kubectl(t, kubeconfig, args...)
		require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
		return out
	}
	kc("-n", opNS, "delete", "pod", "-l", "app.kubernetes.io/component=operator", "--wait=true")
	kc("-n", opNS, "rollout", "status", "deploy/cluster-provider", "--timeout=5m")
	kc("-n", opNS, "set", "image", "deploy/cluster-provider", "operator="+nextImage)
	kc("-n", opNS, "rollout", "status", "deploy/cluster-provider", "--timeout=5m")
	// The new operator has taken over: a Cluster created now becomes Ready.
	probe := &clustersv1alpha1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "after-rollout"},
		Spec:       clustersv1alpha1.ClusterSpec{Profile: profile, Tenancy: clustersv1alpha1.TenancyExclusive},
	}
	require.NoError(t, c.Create(ctx, probe))
	clusters = append(clusters, probe) // deleted with the others
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(probe), probe))
		assert.Equal(ct, common.PhaseReady, probe.Status.Phase)
	}, 5*time.Minute, poll, "a Cluster made after the rollout is Ready")
	during := summarize(pollers.stop())
	after := controlPlanePods(t, c, clusters[:n])
	assert.Equal(t, before, after, "no control-plane pod was restarted or replaced (name → uid/restarts)")
	for _, e := range during.errors {
		t.Errorf("during the operator's restarts: %v", e)
	}
	t.Logf("FIGURE hosted operator pods deleted and rolled out to %s, %d clusters polled every 200 ms: %s", nextImage, n, during)

	// (c) The API server's pod, then etcd's, deleted: the data stays.
	first := clusters[0]
	admin := hostedAdmin(t, c, first)
	_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kept"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	hns := hosted.NamespaceFor(first.UID)
	for _, component := range []string{hosted.ComponentAPIServer, hosted.ComponentEtcd} {
		start := time.Now()
		kc("-n", hns, "delete", "pod", "-l", hosted.LabelComponent+"="+component, "--wait=true")
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			cm, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "kept", metav1.GetOptions{})
			require.NoError(ct, err)
			assert.Equal(ct, "v", cm.Data["k"])
		}, 5*time.Minute, poll, "the data after the %s pod was deleted", component)
		t.Logf("FIGURE hosted %s pod deleted: the API answered with the data again after %.1f s", component, time.Since(start).Seconds())
	}

	// Memory of idle control planes and of the operator, from the kubelets' summaries.
	mem := podMemory(t, kubeconfig)
	var cp []float64
	for _, cl := range clusters[:n] {
		var sum float64
		for name, mib := range mem {
			if strings.HasPrefix(name, hosted.NamespaceFor(cl.UID)+"/") {
				sum += mib
			}
		}
		cp = append(cp, sum)
	}
	sort.Float64s(cp)
	var op []string
	for name, mib := range mem {
		if strings.HasPrefix(name, opNS+"/") {
			op = append(op, fmt.Sprintf("%s %.0f MiB", name, mib))
		}
	}
	t.Logf("FIGURE hosted memory (working set) per idle control plane, %d clusters: median %.0f MiB, max %.0f MiB; the operator's pods: %s",
		n+1, cp[len(cp)/2], cp[len(cp)-1], strings.Join(op, ", "))
}

// hostedProfile creates pc (its name generated from prefix) and a namespace for its Clusters, and
// waits for pc's ClusterProfile; pc is deleted when the test ends.
func hostedProfile(t *testing.T, c client.Client, pc *providersv1alpha1.ProviderConfig, prefix string) (profile, namespace string) {
	t.Helper()
	ctx := context.Background()
	pc.GenerateName = prefix
	require.NoError(t, c.Create(ctx, pc))
	t.Cleanup(func() { _ = c.Delete(context.Background(), pc) })
	profile = envOr("E2E_ENVIRONMENT", "default") + "." + envOr("E2E_PROVIDER_NAME", "local") + "." + pc.Name
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	require.NoError(t, c.Create(ctx, ns))
	require.Eventually(t, func() bool {
		return c.Get(ctx, client.ObjectKey{Name: profile}, &clustersv1alpha1.ClusterProfile{}) == nil
	}, time.Minute, poll, "ClusterProfile %s", profile)
	return profile, ns.Name
}

// tokenClient grants a token AccessRequest (get and list namespaces) for cl and returns a client
// of its kubeconfig once it answers from this machine.
func tokenClient(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster) kubernetes.Interface {
	t.Helper()
	ctx := context.Background()
	cfg := tokenConfig(t, c, cl, cl.Name)
	cfg.Timeout = pollTimeout
	user := kubernetes.NewForConfigOrDie(cfg)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := user.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		assert.NoError(ct, err)
	}, time.Minute, poll, "the kubeconfig of %s answers from this machine", cl.Name)
	return user
}

// grantedClient waits until ar is Granted and returns a client of its kubeconfig.
func grantedClient(t *testing.T, c client.Client, ar *clustersv1alpha1.AccessRequest) kubernetes.Interface {
	t.Helper()
	cfg := grantedConfig(t, c, ar)
	cfg.Timeout = pollTimeout
	return kubernetes.NewForConfigOrDie(cfg)
}

// grantedConfig waits until ar is Granted and returns the rest.Config of its kubeconfig.
func grantedConfig(t *testing.T, c client.Client, ar *clustersv1alpha1.AccessRequest) *rest.Config {
	t.Helper()
	got := &clustersv1alpha1.AccessRequest{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(ar), got))
		assert.Equal(ct, common.PhaseGranted, got.Status.Phase, "conditions: %+v", got.Status.Conditions)
	}, 3*time.Minute, poll, "AccessRequest %s is Granted", ar.Name)
	s := &corev1.Secret{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ar.Namespace, Name: got.Status.SecretRef.Name}, s))
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[clustersv1alpha1.SecretKeyKubeconfig])
	require.NoError(t, err)
	return cfg
}

// hostedAdminConfig is the rest.Config of hostedAdmin.
func hostedAdminConfig(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster) *rest.Config {
	t.Helper()
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(cl), cl))
	s := &corev1.Secret{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: hosted.NamespaceFor(cl.UID), Name: hosted.SecretAdmin}, s))
	return &rest.Config{Host: cl.Status.APIServer, Timeout: 5 * time.Second,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.Data["ca.crt"], CertData: s.Data["tls.crt"], KeyData: s.Data["tls.key"]}}
}

// hostedAdmin is an administrator's client of a hosted Cluster, from its admin Secret in the host
// namespace (what a platform administrator can read), through the external endpoint.
func hostedAdmin(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster) kubernetes.Interface {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(hostedAdminConfig(t, c, cl))
	// The Cluster is Ready once the operator's probe, through the in-cluster Service, answers; the
	// node's kube-proxy programs the NodePort of the external endpoint from the same EndpointSlice,
	// a moment later on a busy node (a refused connection until then, seen once in make e2e-kind).
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := cs.Discovery().ServerVersion()
		assert.NoError(ct, err)
	}, convergeWithin, poll, "the external endpoint %s answers", cl.Status.APIServer)
	return cs
}

// controlPlanePods maps each control-plane pod (namespace/name) to its uid and restart count.
func controlPlanePods(t *testing.T, c client.Client, clusters []*clustersv1alpha1.Cluster) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, cl := range clusters {
		pods := &corev1.PodList{}
		require.NoError(t, c.List(context.Background(), pods, client.InNamespace(hosted.NamespaceFor(cl.UID))))
		for _, p := range pods.Items {
			restarts := int32(0)
			for _, s := range p.Status.ContainerStatuses {
				restarts += s.RestartCount
			}
			out[p.Namespace+"/"+p.Name] = fmt.Sprintf("%s/%d", p.UID, restarts)
		}
	}
	return out
}

// pollTimeout is how long a polling client waits for an answer: a request that gets no answer in
// time, or an error, is a failure. Slower answers than slowAnswer are not failures; they are
// counted and reported with the slowest, so a loaded machine shows as what it is.
const (
	pollTimeout = 30 * time.Second
	slowAnswer  = 2 * time.Second
)

type pollResult struct {
	requests, slow int
	slowest        time.Duration
	errors         []error
}

// String is the figure of a polling window.
func (r pollResult) String() string {
	return fmt.Sprintf("%d requests, %d failed, %d answered after more than %s, the slowest after %.1f s",
		r.requests, len(r.errors), r.slow, slowAnswer, r.slowest.Seconds())
}

// summarize adds up the pollers' results; each error names its cluster.
func summarize(results []pollResult) pollResult {
	var sum pollResult
	for i, r := range results {
		sum.requests += r.requests
		sum.slow += r.slow
		sum.slowest = max(sum.slowest, r.slowest)
		for _, e := range r.errors {
			sum.errors = append(sum.errors, fmt.Errorf("cluster %d: %w", i, e))
		}
	}
	return sum
}

type pollers struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	results []pollResult
}

// startPollers GETs namespace default in every cluster every interval until stopped, each request
// bounded by pollTimeout.
func startPollers(clients []kubernetes.Interface, interval time.Duration) *pollers {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pollers{cancel: cancel, results: make([]pollResult, len(clients))}
	for i, cs := range clients {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			r := &p.results[i] // this goroutine's alone until stop
			pollNamespace(ctx, cs, interval, pollTimeout, func(sent time.Time, took time.Duration, err error) {
				r.requests++
				r.slowest = max(r.slowest, took)
				if took > slowAnswer {
					r.slow++
				}
				if err != nil {
					r.errors = append(r.errors, fmt.Errorf("sent %s, after %.1f s: %w", sent.Format("15:04:05.000"), took.Seconds(), err))
				}
			})
		}()
	}
	return p
}

func (p *pollers) stop() []pollResult {
	p.cancel()
	p.wg.Wait()
	return p.results
}

// podMemory is every pod's working set in MiB (namespace/name → MiB), from each node's kubelet
// summary (through the API server's node proxy).
func podMemory(t *testing.T, kubeconfig string) map[string]float64 {
	t.Helper()
	out, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "get", "nodes", "-o", "name").Output()
	require.NoError(t, err)
	mem := map[string]float64{}
	for _, node := range strings.Fields(string(out)) {
		raw, err := exec.Command("kubectl", "--kubeconfig", kubeconfig, "get", "--raw",
			"/api/v1/nodes/"+strings.TrimPrefix(node, "node/")+"/proxy/stats/summary").Output()
		require.NoError(t, err, "the kubelet summary of %s", node)
		var summary struct {
			Pods []struct {
				PodRef struct{ Name, Namespace string } `json:"podRef"`
				Memory struct {
					WorkingSetBytes float64 `json:"workingSetBytes"`
				} `json:"memory"`
			} `json:"pods"`
		}
		require.NoError(t, json.Unmarshal(raw, &summary))
		for _, p := range summary.Pods {
			mem[p.PodRef.Namespace+"/"+p.PodRef.Name] = p.Memory.WorkingSetBytes / (1 << 20)
		}
	}
	return mem
}
