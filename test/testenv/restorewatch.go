package testenv

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// beforeRestoreMargin is how far past the snapshot's revision a client's resourceVersion is taken
// before a restore: more than the restored API server writes as it starts (leases, events), so
// that its watch cache, which starts at its first list, still holds that resourceVersion and only
// the revision bump (not the cache's start) can answer 410 Gone.
const beforeRestoreMargin = 500

// SeenBeforeRestore writes ConfigMaps into the cluster as it runs before a restore (the restore
// takes them away) until its revision is beforeRestoreMargin past snapshotRevision, and returns the
// resourceVersion of a list of every ConfigMap, as a client that lists and then watches holds it.
func SeenBeforeRestore(t *testing.T, cs kubernetes.Interface, snapshotRevision int64) string {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pre-restore"}}, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	for i := 0; ; i++ {
		cm, err := cs.CoreV1().ConfigMaps("pre-restore").Create(t.Context(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "lost-"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		rv, err := strconv.ParseInt(cm.ResourceVersion, 10, 64)
		require.NoError(t, err, "etcd's resourceVersions are its revisions")
		if rv > snapshotRevision+beforeRestoreMargin {
			break
		}
		require.Less(t, i, 10000, "the revision (%d) does not pass the snapshot's (%d)", rv, snapshotRevision)
	}
	list, err := cs.CoreV1().ConfigMaps(metav1.NamespaceAll).List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, list.ResourceVersion)
	return list.ResourceVersion
}

// WatchFromBeforeRestoreGone checks, after a restore, that a watch from rv (a resourceVersion
// handed out before it) ends in 410 Gone, so that its client lists anew. First the cluster writes
// until its revision has passed rv: a restore without a revision bump starts again at the
// snapshot's revision, below rv, and a watch from rv would then be answered with the new history
// as if it continued the old one (the objects written after the snapshot never reported deleted).
func WatchFromBeforeRestoreGone(t *testing.T, cs kubernetes.Interface, rv string) {
	t.Helper()
	before, err := strconv.ParseUint(rv, 10, 64)
	require.NoError(t, err, "etcd's resourceVersions are its revisions")
	for i := 0; ; i++ {
		cm, err := cs.CoreV1().ConfigMaps(metav1.NamespaceDefault).Create(t.Context(),
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "after-restore-"}}, metav1.CreateOptions{})
		require.NoError(t, err)
		now, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		require.NoError(t, err)
		if now > before {
			break
		}
		require.Less(t, i, 5000, "the revision after the restore (%d) does not pass the one seen before it (%d)", now, before)
	}
	w, err := cs.CoreV1().ConfigMaps(metav1.NamespaceAll).Watch(t.Context(), metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		assert.True(t, apierrors.IsResourceExpired(err) || apierrors.IsGone(err), "a watch from resourceVersion %s, handed out before the restore: %v", rv, err)
		return
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		require.True(t, ok, "the watch from resourceVersion %s ended without an event", rv)
		require.Equal(t, watch.Error, ev.Type, "the first event of a watch from resourceVersion %s, handed out before the restore, is an error, not %s %#v", rv, ev.Type, ev.Object)
		err := apierrors.FromObject(ev.Object)
		assert.True(t, apierrors.IsResourceExpired(err) || apierrors.IsGone(err), "410 Gone: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("a watch from resourceVersion %s, handed out before the restore, got no event in 30 s: it goes on as if the restore had not happened", rv)
	}
}
