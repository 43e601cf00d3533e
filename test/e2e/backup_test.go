package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
)

// TestLocalRestoreDrill is the restore drill of docs/backups.md, done as a platform engineer does it: the
// operator binary with the local backend, a Cluster whose first scheduled snapshot is taken once it
// is Ready, data written with the kubeconfig of an AccessRequest, one more snapshot on demand
// (kubectl annotate) that holds it and the request's ServiceAccount, more data, and then the cluster's etcd data folder destroyed while the
// operator is down. The cluster comes back empty (DataLost) and the kubeconfig answers 401; a
// restore of a snapshot that does not exist is refused and changes nothing; the restore of the
// snapshot on demand brings back what was written before it, not what came after, on the same
// endpoint, and the issued kubeconfig works again. The snapshots outlive the Cluster.
func TestLocalRestoreDrill(t *testing.T) {
	bin := buildBinary(t)
	kubeconfig := writeKubeconfig(t, operatorUser(t))
	platform := writeKubeconfig(t, env.Config) // the platform team's kubectl
	kubectlPath(t)
	stateDir := t.TempDir()
	op := runLocal(t, bin, kubeconfig, "e2eb", stateDir)
	pc, cl := localCluster(t, "e2eb")
	require.Equal(t, "1h0m0s", pc.Spec.Backup.Interval.Duration.String(), "the sample's schedule")
	cl = waitReady(t, cl)
	endpoint := cl.Status.APIServer
	ar := clusterAccessRequest(t, cl)
	user := waitKubeconfig(t, ar)
	write := func(name string) {
		t.Helper()
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			out, err := kubectl(t, user, "-n", "sample-apps", "create", "configmap", name)
			require.NoError(c, err, "%s", out)
		}, convergeWithin, poll, "kubectl create configmap %s", name)
	}
	write("before")

	// The first scheduled snapshot is taken once the Cluster is Ready (before the grant, maybe);
	// one more is asked for, which holds the request's ServiceAccount and the data.
	awaitBackups(t, env.Client, cl, 1)
	out, err := kubectl(t, platform, "-n", cl.Namespace, "annotate", "cluster", cl.Name, backend.AnnotationSnapshot+"=now")
	require.NoError(t, err, "%s", out)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &clustersv1alpha1.Cluster{}
		require.NoError(c, env.Client.Get(t.Context(), client.ObjectKeyFromObject(cl), got))
		assert.NotContains(c, got.Annotations, backend.AnnotationSnapshot, "removed once taken")
		assert.Len(c, backupsOf(c, got), 2)
	}, convergeWithin, poll, "the snapshot on demand")
	asked := awaitBackups(t, env.Client, cl, 2)[0] // newest first
	write("after")

	// etcd's data folder is lost while the operator is down.
	require.NoError(t, op.cmd.Process.Signal(syscall.SIGTERM))
	<-op.done
	require.NoError(t, os.RemoveAll(filepath.Join(stateDir, string(cl.UID), "etcd")))
	op = runLocal(t, bin, kubeconfig, "e2eb", stateDir)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := &clustersv1alpha1.Cluster{}
		require.NoError(c, env.Client.Get(t.Context(), client.ObjectKeyFromObject(cl), got))
		cond := meta.FindStatusCondition(got.Status.Conditions, cluster.ConditionProvisioned)
		require.NotNil(c, cond)
		assert.Equal(c, cluster.ReasonDataLost, cond.Reason)
	}, clusterReadyWithin, poll, "the Cluster says its data was lost")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl(t, user, "-n", "sample-apps", "get", "configmap", "before")
		assert.Error(c, err)
		assert.Contains(c, out, "You must be logged in", "401: the kubeconfig's ServiceAccount went with the data")
	}, clusterReadyWithin, poll)

	// A snapshot that does not exist is refused; the annotation stays for the user to fix.
	out, err = kubectl(t, platform, "-n", cl.Namespace, "annotate", "cluster", cl.Name, backend.AnnotationRestore+"=20990101T000000Z")
	require.NoError(t, err, "%s", out)
	refused := awaitCondition(t, env.Client, cl, cluster.ConditionRestored, backend.ReasonRestoreRefused)
	assert.Contains(t, refused.Message, `there is no snapshot "20990101T000000Z"`)
	assert.Contains(t, refused.Message, asked.Name, "the message lists the snapshots there are")

	out, err = kubectl(t, platform, "-n", cl.Namespace, "annotate", "--overwrite", "cluster", cl.Name, backend.AnnotationRestore+"="+asked.Name)
	require.NoError(t, err, "%s", out)
	done := awaitCondition(t, env.Client, cl, cluster.ConditionRestored, cluster.ReasonRestoreDone)
	assert.Contains(t, done.Message, asked.Name)
	back := waitReady(t, cl)
	assert.Equal(t, endpoint, back.Status.APIServer, "the same endpoint")
	assert.NotContains(t, back.Annotations, backend.AnnotationRestore)
	assert.Equal(t, cluster.ReasonProvisioned, meta.FindStatusCondition(back.Status.Conditions, cluster.ConditionProvisioned).Reason, "the data is back")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := kubectl(t, user, "-n", "sample-apps", "get", "configmap", "before")
		assert.NoError(c, err, "the issued kubeconfig works again and the data is back: %s", out)
	}, clusterReadyWithin, poll)
	out, err = kubectl(t, user, "-n", "sample-apps", "get", "configmap", "after")
	require.Error(t, err)
	assert.Contains(t, out, "NotFound", "written after the snapshot")

	require.NoError(t, env.Client.Delete(t.Context(), cl))
	waitGone(t, cl)
	entries, err := os.ReadDir(filepath.Join(stateDir, "backups", string(cl.UID)))
	require.NoError(t, err)
	assert.NotEmpty(t, entries, "the snapshots outlive their Cluster")
	require.NoError(t, op.cmd.Process.Signal(syscall.SIGTERM))
	<-op.done
	require.NoError(t, op.err)
	assert.NotContains(t, op.output.String(), "forbidden", "the generated ClusterRole lacks a permission")
}

// listed is a snapshot as status.providerStatus.backups lists it.
type listed struct {
	Name     string    `json:"name"`
	Taken    time.Time `json:"taken"`
	Size     int64     `json:"size"`
	Revision int64     `json:"revision"`
}

// backupsOf reads the snapshots listed in cl's status.
func backupsOf(c assert.TestingT, cl *clustersv1alpha1.Cluster) []listed {
	if cl.Status.ProviderStatus == nil {
		return nil
	}
	var ps struct {
		Backups []listed `json:"backups"`
	}
	assert.NoError(c, json.Unmarshal(cl.Status.ProviderStatus.Raw, &ps))
	return ps.Backups
}

// awaitBackups waits until cl's status (read with c) lists n snapshots and BackedUp is True.
func awaitBackups(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster, n int) []listed {
	t.Helper()
	var got []listed
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cur := &clustersv1alpha1.Cluster{}
		require.NoError(ct, c.Get(t.Context(), client.ObjectKeyFromObject(cl), cur))
		got = backupsOf(ct, cur)
		assert.Len(ct, got, n)
		cond := meta.FindStatusCondition(cur.Status.Conditions, cluster.ConditionBackedUp)
		if assert.NotNil(ct, cond) {
			assert.Equal(ct, metav1.ConditionTrue, cond.Status, cond.Message)
		}
	}, clusterReadyWithin, poll, "%d snapshots listed", n)
	for _, s := range got {
		assert.Positive(t, s.Size)
		assert.True(t, strings.HasPrefix(s.Name, s.Taken.UTC().Format("20060102T1504")), "named by when it was taken: %+v", s)
	}
	return got
}

// awaitCondition waits until cl's condition (read with c) has reason and returns it.
func awaitCondition(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster, condType, reason string) metav1.Condition {
	t.Helper()
	var got metav1.Condition
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cur := &clustersv1alpha1.Cluster{}
		require.NoError(ct, c.Get(t.Context(), client.ObjectKeyFromObject(cl), cur))
		cond := meta.FindStatusCondition(cur.Status.Conditions, condType)
		require.NotNil(ct, cond, "condition %s", condType)
		assert.Equal(ct, reason, cond.Reason, "%s", cond.Message)
		got = *cond
	}, clusterReadyWithin, poll, "condition %s reason %s", condType, reason)
	return got
}
