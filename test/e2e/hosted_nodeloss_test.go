package e2e

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os/exec"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// nodeLossPrefix is the key prefix of the drill's snapshots in its bucket.
const nodeLossPrefix = "node-loss"

// restoreAfterNodeLossWithin bounds the restore after a node loss: besides the restore itself
// (the serve fetching the snapshot from the store, etcd replaced, the API servers started), the
// pods of the lost node are deleted by the pod garbage collector only 40 s after their Node, and
// the operator's leader may have been one of them.
const restoreAfterNodeLossWithin = 8 * time.Minute

// TestHostedNodeLossOnKind is the drill of a lost host node (issue 42) on the kind platform: a
// hosted Cluster whose ProviderConfig keeps its snapshots in an object store (SeaweedFS on this
// machine, on the gateway of kind's Docker network, which pods reach), data, a token kubeconfig,
// a snapshot on demand taken while the other workers are cordoned (so that the snapshots' claim
// is on etcd's node too: the worst case), its objects in the bucket, more data; then etcd's node
// removed (`docker rm -f` of its container) and deleted (`kubectl delete node`), and the steps of
// docs/backups.md "Restore a hosted Cluster whose node is gone" run as written, with kubectl:
// the snapshots' claim, on the lost node, deleted, etcd's claim and pod deleted, the snapshot
// restored in place from the store. The Cluster is Ready on the same endpoint with the same CA,
// has the data of before the snapshot and not after, and the token kubeconfig and the admin
// client made before work. (A watch from before the restore ending in 410 Gone is
// TestHostedRestoreDrill's: it needs a list of etcd's data past the snapshot, which is gone with
// the node here.) The worker stays lost: make e2e-kind runs this last on its platform.
func TestHostedNodeLossOnKind(t *testing.T) {
	c, kubeconfig, pc := hostedTarget(t)
	docker, err := exec.LookPath("docker")
	if err != nil {
		testenv.MissingTool(t, "docker on the PATH (the drill removes a kind node's container)", err)
	}
	ctx := context.Background()
	pc = pc.DeepCopy()
	store, bucket := nodeLossStore(t, c, pc)
	// Deleted before the Secret and the store (cleanups run last in, first out): a snapshot before
	// the deletion needs both.
	cl := readyHostedCluster(t, c, pc, "hosted-node-loss-", "node-lost")
	endpoint := cl.Status.APIServer
	admin := hostedAdmin(t, c, cl)
	write := func(name string) {
		t.Helper()
		_, err := admin.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	write("before")
	user := tokenClient(t, c, cl)
	adminCA, userCA := clusterCAs(t, c, cl)

	hns := hosted.NamespaceFor(cl.UID)
	lost := workerOf(t, c, hns, hosted.NameEtcd+"-0")
	snap := snapshotOnNode(t, c, kubeconfig, cl, lost)
	sealed := awaitUploaded(t, store.Client(), bucket, cl, snap)
	write("after")

	// The node is lost: its container removed, then its Node deleted (the doc's step 1).
	lostAt := time.Now()
	out, err := exec.Command(docker, "rm", "-f", lost).CombinedOutput()
	require.NoError(t, err, "docker rm -f %s: %s", lost, out)
	t.Logf("node %s (etcd-0 and the snapshots' claim) removed: docker rm -f", lost)
	start := restoreAsDocumented(t, kubeconfig, cl, lost, snap)

	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cur := &clustersv1alpha1.Cluster{}
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cur))
		cond := meta.FindStatusCondition(cur.Status.Conditions, cluster.ConditionRestored)
		require.NotNil(ct, cond, "condition %s", cluster.ConditionRestored)
		assert.Equal(ct, cluster.ReasonRestoreDone, cond.Reason, "%s", cond.Message)
		assert.Equal(ct, common.PhaseReady, cur.Status.Phase, "conditions: %+v", cur.Status.Conditions)
	}, restoreAfterNodeLossWithin, poll, "restored from the object store, Ready")
	t.Logf("FIGURE hosted restore after a node loss, from the object store (a %d-byte snapshot, %d bytes encrypted): Ready %.1f s after kubectl annotate, %.1f s after docker rm -f of the node",
		snap.Size, sealed, time.Since(start).Seconds(), time.Since(lostAt).Seconds())

	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cl), cl))
	assert.Equal(t, endpoint, cl.Status.APIServer, "the same endpoint")
	adminCAAfter, userCAAfter := clusterCAs(t, c, cl)
	assert.Equal(t, adminCA, adminCAAfter, "the same CA in the admin Secret")
	assert.Equal(t, userCA, userCAAfter, "the same CA in the token kubeconfig")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := admin.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{})
		assert.NoError(ct, err, "written before the snapshot: back, through the admin client made before")
		_, err = admin.CoreV1().ConfigMaps("default").Get(ctx, "after", metav1.GetOptions{})
		assert.True(ct, apierrors.IsNotFound(err), "written after the snapshot: not there: %v", err)
		_, err = user.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{})
		assert.NoError(ct, err, "the token kubeconfig issued before the snapshot works: its CA verifies the server")
	}, 2*time.Minute, poll, "the snapshot's data, through the kubeconfigs made before the node was lost")
}

// nodeLossStore starts the drill's S3 server on the gateway of kind's Docker network, makes the
// store's credentials Secret in the operator's namespace and sets pc's spec.backup.objectStore to
// them (scheduled snapshots stay off: the drill takes its own). The Secret is deleted when the
// test ends, the server stopped with its data.
func nodeLossStore(t *testing.T, c client.Client, pc *providersv1alpha1.ProviderConfig) (*testenv.S3Server, string) {
	t.Helper()
	srv, bucket := testenv.S3On(t, kindGateway(t))
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: envOr("E2E_OPERATOR_NAMESPACE", "cluster-provider-system"), GenerateName: "node-loss-store-"},
		StringData: map[string]string{
			providersv1alpha1.ObjectStoreAccessKeyID:     srv.AccessKeyID,
			providersv1alpha1.ObjectStoreSecretAccessKey: srv.SecretAccessKey,
			providersv1alpha1.ObjectStoreEncryptionKey:   base64.StdEncoding.EncodeToString(key), // openssl rand -base64 32
		},
	}
	require.NoError(t, c.Create(context.Background(), secret))
	t.Cleanup(func() { _ = c.Delete(context.Background(), secret) })
	pc.Spec.Backup = &providersv1alpha1.BackupPolicy{Disabled: true, ObjectStore: &providersv1alpha1.BackupObjectStore{
		Endpoint: srv.Endpoint, Bucket: bucket, Prefix: nodeLossPrefix, Insecure: true, PathStyle: true,
		CredentialsSecretRef: providersv1alpha1.ObjectStoreSecretRef{Name: secret.Name},
	}}
	t.Logf("object store: SeaweedFS at %s, bucket %s, credentials Secret %s/%s", srv.Endpoint, bucket, secret.Namespace, secret.Name)
	return srv, bucket
}

// clusterCAs are the CA of cl's admin Secret and the CA data of its token kubeconfig (the
// AccessRequest tokenClient made).
func clusterCAs(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster) (admin, user []byte) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: hosted.NamespaceFor(cl.UID), Name: hosted.SecretAdmin}, s))
	admin = s.Data["ca.crt"]
	require.NotEmpty(t, admin, "the admin Secret's ca.crt")
	ar := &clustersv1alpha1.AccessRequest{}
	require.NoError(t, c.Get(ctx, client.ObjectKeyFromObject(cl), ar))
	require.NotNil(t, ar.Status.SecretRef, "AccessRequest %s names its Secret", ar.Name)
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: ar.Namespace, Name: ar.Status.SecretRef.Name}, s))
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data[clustersv1alpha1.SecretKeyKubeconfig])
	require.NoError(t, err)
	require.NotEmpty(t, cfg.CAData, "the token kubeconfig's CA data")
	return admin, cfg.CAData
}

// workerOf is the node of pod name in namespace ns; it must be a worker, not the control-plane
// node (whose address is the Clusters' endpoint, and which the platform cannot lose).
func workerOf(t *testing.T, c client.Client, ns, name string) string {
	t.Helper()
	pod := &corev1.Pod{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, pod))
	require.NotEmpty(t, pod.Spec.NodeName, "pod %s/%s is scheduled", ns, name)
	node := &corev1.Node{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: pod.Spec.NodeName}, node))
	_, controlPlane := node.Labels["node-role.kubernetes.io/control-plane"]
	require.False(t, controlPlane, "pod %s/%s runs on the control-plane node %s: the drill loses a worker", ns, name, node.Name)
	return node.Name
}

// snapshotOnNode takes a snapshot of cl on demand (kubectl annotate) while every worker but node
// is cordoned, so that the snapshots' claim (bound where its first Job runs) is on node, and
// returns it once listed; the workers are uncordoned before it returns.
func snapshotOnNode(t *testing.T, c client.Client, kubeconfig string, cl *clustersv1alpha1.Cluster, node string) listed {
	t.Helper()
	ctx := context.Background()
	nodes := &corev1.NodeList{}
	require.NoError(t, c.List(ctx, nodes))
	var cordoned []string
	t.Cleanup(func() { // t.Context() is cancelled by now: not kubectl()
		for _, n := range cordoned {
			_, _ = exec.Command("kubectl", "--kubeconfig", kubeconfig, "uncordon", n).CombinedOutput()
		}
	})
	for _, n := range nodes.Items {
		if _, controlPlane := n.Labels["node-role.kubernetes.io/control-plane"]; controlPlane || n.Name == node {
			continue
		}
		out, err := kubectl(t, kubeconfig, "cordon", n.Name)
		require.NoError(t, err, "%s", out)
		cordoned = append(cordoned, n.Name)
	}
	out, err := kubectl(t, kubeconfig, "-n", cl.Namespace, "annotate", "cluster", cl.Name, backend.AnnotationSnapshot+"=now", "--overwrite")
	require.NoError(t, err, "%s", out)
	snap := awaitBackups(t, c, cl, 1)[0]
	for _, n := range cordoned {
		out, err := kubectl(t, kubeconfig, "uncordon", n)
		require.NoError(t, err, "%s", out)
	}
	cordoned = nil
	claim := &corev1.PersistentVolumeClaim{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: hosted.BackupNamespace, Name: "snapshots-" + hosted.NamespaceFor(cl.UID)}, claim))
	require.Equal(t, node, volumeNode(t, c, claim.Spec.VolumeName), "the snapshots' claim is on etcd's node %s", node)
	return snap
}

// volumeNode is the node the local volume name is bound to.
func volumeNode(t *testing.T, c client.Client, name string) string {
	t.Helper()
	pv := &corev1.PersistentVolume{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKey{Name: name}, pv))
	require.NotNil(t, pv.Spec.NodeAffinity, "volume %s has a node affinity", name)
	require.NotNil(t, pv.Spec.NodeAffinity.Required, "volume %s has a node affinity", name)
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	t.Fatalf("volume %s is not bound to one node: %+v", name, pv.Spec.NodeAffinity)
	return ""
}

// awaitUploaded waits until the store's bucket holds snapshot snap of cl, encrypted, and its
// record, where docs/backups.md ("What is where") says, and returns the encrypted object's size.
func awaitUploaded(t *testing.T, s3 *minio.Client, bucket string, cl *clustersv1alpha1.Cluster, snap listed) int64 {
	t.Helper()
	dir := path.Join(nodeLossPrefix, cl.Namespace, string(cl.UID)) + "/"
	var sealed int64
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sizes := map[string]int64{}
		for obj := range s3.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: dir, Recursive: true}) {
			require.NoError(ct, obj.Err)
			sizes[strings.TrimPrefix(obj.Key, dir)] = obj.Size
		}
		sealed = sizes[snap.Name+".db.enc"]
		assert.Positive(ct, sealed, "%s.db.enc in %s/%s: %v", snap.Name, bucket, dir, sizes)
		assert.Contains(ct, sizes, snap.Name+".json", "its record")
	}, time.Minute, poll, "snapshot %s uploaded", snap.Name)
	return sealed
}

// restoreAsDocumented runs the steps of docs/backups.md "Restore a hosted Cluster whose node is
// gone" for cl, whose etcd-0 and snapshots' claim were on node lost (its container removed), with
// kubectl as written there, and returns when the restore of snap was asked for (the annotation).
func restoreAsDocumented(t *testing.T, kubeconfig string, cl *clustersv1alpha1.Cluster, lost string, snap listed) time.Time {
	t.Helper()
	run := func(args ...string) string {
		t.Helper()
		out, err := kubectl(t, kubeconfig, args...)
		require.NoError(t, err, "kubectl %s: %s", strings.Join(args, " "), out)
		return out
	}
	ns := run("-n", cl.Namespace, "get", "cluster", cl.Name, "-o", "jsonpath={.status.providerStatus.namespace}")
	require.Equal(t, hosted.NamespaceFor(cl.UID), ns, "NS of the doc")
	// 1. Tell Kubernetes the node is gone.
	run("delete", "node", lost)
	// 2. The snapshots' claim was on that node: its volume's node affinity names it. Delete it.
	volume := run("-n", hosted.BackupNamespace, "get", "pvc", "snapshots-"+ns, "-o", "jsonpath={.spec.volumeName}")
	nodes := run("get", "pv", volume, "-o", `jsonpath={.spec.nodeAffinity.required.nodeSelectorTerms[*].matchExpressions[*].values[*]}{"\n"}`)
	require.True(t, slices.Contains(strings.Fields(nodes), lost), "the doc's command names the lost node %s: %q", lost, nodes)
	run("-n", hosted.BackupNamespace, "delete", "pvc", "snapshots-"+ns)
	// 3. etcd's claim and pod of the lost member.
	run("-n", ns, "delete", "pvc", "data-etcd-0", "--wait=false")
	run("-n", ns, "delete", "pod", "etcd-0", "--force", "--grace-period=0", "--ignore-not-found")
	// 4. Pick the snapshot from the list (the store's, the claim gone) and restore in place.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := kubectl(t, kubeconfig, "-n", cl.Namespace, "get", "cluster", cl.Name, "-o", `jsonpath={range .status.providerStatus.backups[*]}{.name}{"\n"}{end}`)
		require.NoError(ct, err, "%s", out)
		assert.Contains(ct, strings.Fields(out), snap.Name)
	}, time.Minute, poll, "snapshot %s listed", snap.Name)
	start := time.Now()
	run("-n", cl.Namespace, "annotate", "cluster", cl.Name, backend.AnnotationRestore+"="+snap.Name)
	return start
}
