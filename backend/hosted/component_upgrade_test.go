package hosted

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// TestEnsureVersionChange: the version contract on the hosted backend. A control plane keeps its
// version when the default moves; a named next minor rolls etcd (on a claim) to the new image
// and says Upgrading; a downgrade is refused; a control plane whose etcd is on an emptyDir
// refuses any change and keeps its workloads as they are.
func TestEnsureVersionChange(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.Images["1.36.3"] = image136

	t.Run("emptyDir: refused, nothing changes", func(t *testing.T) {
		cl := newCluster("upgrade-emptydir")
		h.ensureWant(t, cl, want136)
		h.etcdUp(t, cl)
		sts := get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd)
		s := h.ensureWant(t, cl, want137)
		require.NotNil(t, s.VersionChange)
		assert.True(t, s.VersionChange.Refused)
		assert.Contains(t, s.VersionChange.Message, "upgrade from 1.36.3 to 1.37.1 is refused: this control plane's etcd keeps its data on an emptyDir")
		assert.Equal(t, "1.36.3", s.Runs)
		assert.Equal(t, sts.ResourceVersion, get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd).ResourceVersion, "etcd is not touched")
		assert.Equal(t, "1.36.3", record(t, cl).Version)
	})

	t.Run("on a claim: upgrades, and a downgrade is refused", func(t *testing.T) { upgradeOnAClaim(t, h) })
}

// The versions and images of TestEnsureVersionChange.
const image136 = "cluster-provider/controlplane:v1.36.3"

var (
	want136 = backend.Want{Version: "1.36.3", Requested: "1.36.3"}
	want137 = backend.Want{Version: "1.37.1", Requested: "1.37.1"}
)

// etcdImage is the image of cl's etcd.
func etcdImage(t *testing.T, cl *clustersv1alpha1.Cluster) string {
	t.Helper()
	return get(t, &appsv1.StatefulSet{}, NamespaceFor(cl.UID), NameEtcd).Spec.Template.Spec.Containers[0].Image
}

// upgradeOnAClaim: a control plane whose etcd is on a claim upgrades, etcd first, and refuses a
// downgrade.
func upgradeOnAClaim(t *testing.T, h *harness) {
	h.pc.Spec.Hosted.StorageClassName = "standard"
	defer func() { h.pc.Spec.Hosted.StorageClassName = "" }()
	cl := newCluster("upgrade-claim")
	h.ensureWant(t, cl, want136)
	h.etcdUp(t, cl)
	require.Equal(t, image136, etcdImage(t, cl))

	s := h.ensureWant(t, cl, backend.Want{Version: "1.37.1"}) // the default moved; nothing named
	assert.Nil(t, s.VersionChange)
	assert.Equal(t, "1.36.3", s.Runs)
	assert.Equal(t, image136, etcdImage(t, cl), "a Cluster naming no version keeps its own")

	upgradeRollsEtcdFirst(t, h, cl)
	upgradeWaitsForOldAPIServer(t, h, cl)

	s = h.ensureWant(t, cl, want136)
	require.NotNil(t, s.VersionChange)
	assert.True(t, s.VersionChange.Refused)
	assert.Contains(t, s.VersionChange.Message, "downgrade from 1.37.1 to 1.36.3 is refused")
	assert.Equal(t, image1, etcdImage(t, cl))
}

// apiImage is the image of cl's API server.
func apiImage(t *testing.T, cl *clustersv1alpha1.Cluster) string {
	t.Helper()
	return apiServerImage(get(t, &appsv1.Deployment{}, NamespaceFor(cl.UID), NameAPIServer))
}

// upgradeRollsEtcdFirst: naming 1.37.1 checks the new image, then rolls etcd on its claim while
// the API server keeps the old image.
func upgradeRollsEtcdFirst(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	s := h.ensureWant(t, cl, want137)
	require.NotNil(t, s.VersionChange)
	assert.Equal(t, image136, etcdImage(t, cl), "nothing rolls before the new image is checked")
	h.imageChecked(t, cl, image1, "1.37.1", "3.7.0")
	s = h.ensureWant(t, cl, want137)
	forceGone(t, preflightJobs.name(NamespaceFor(cl.UID))) // read and deleted: envtest has no garbage collector
	require.NotNil(t, s.VersionChange)
	assert.False(t, s.VersionChange.Refused, s.VersionChange.Message)
	assert.Equal(t, "1.36.3", s.Runs, "the old version runs until the new API server serves")
	assert.Equal(t, image1, etcdImage(t, cl), "etcd rolls first, on its claim")
	assert.Equal(t, image136, apiImage(t, cl), "the API server rolls once etcd runs the new version")
	assert.Equal(t, "1.37.1", record(t, cl).Version)
	assert.Equal(t, "1.36.3", record(t, cl).UpgradeFrom)
	s = h.ensureWant(t, cl, want137)
	require.NotNil(t, s.VersionChange, "still upgrading while the new API server does not serve")
	assert.False(t, s.VersionChange.Refused)
}

// upgradeWaitsForOldAPIServer: the API server rolls once etcd rolled out; the upgrade is done
// only once the old API server is gone and the controller manager rolled out.
func upgradeWaitsForOldAPIServer(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	// Rolled out and answering 1.37.1, but the old API server still serves its shutdown delay:
	// not done until it is gone.
	rolledOutNow(t, cl) // etcd rolled out: the API server rolls
	require.Eventually(t, func() bool {
		h.ensureWant(t, cl, want137)
		return apiImage(t, cl) == image1
	}, 10*time.Second, 50*time.Millisecond, "the API server rolls once etcd runs the new version")
	h.version = "1.37.1"
	rolledOutNow(t, cl)
	ns := NamespaceFor(cl.UID)
	oldPod := terminatingOldAPIServer(t, h, cl)
	s := h.ensureWant(t, cl, want137)
	require.NotNil(t, s.VersionChange, "an old API server still serves")
	assert.Equal(t, "1.36.3", s.Runs)
	oldPod = get(t, &corev1.Pod{}, ns, oldPod.Name)
	oldPod.Finalizers = nil
	require.NoError(t, env.Client.Update(t.Context(), oldPod))
	require.Eventually(t, func() bool {
		s = h.ensureWant(t, cl, want137)
		dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
		return containerImage(dep.Spec.Template.Spec, containerKCM) == image1
	}, 10*time.Second, 50*time.Millisecond, "the controller manager rolls once the old API server is gone")
	require.NotNil(t, s.VersionChange, "not done while the controller manager rolls")
	rolledOutNow(t, cl)
	require.Eventually(t, func() bool {
		s = h.ensureWant(t, cl, want137)
		return s.VersionChange == nil
	}, 10*time.Second, 50*time.Millisecond, "done once the controller manager rolled out")
	assert.Equal(t, "1.37.1", s.Runs)
	assert.Empty(t, record(t, cl).UpgradeFrom)
}

// terminatingOldAPIServer makes an old API server Pod of cl that a finalizer holds while it
// terminates, and waits until the backend's cache sees it terminating.
func terminatingOldAPIServer(t *testing.T, h *harness, cl *clustersv1alpha1.Cluster) *corev1.Pod {
	t.Helper()
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
	return oldPod
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
	assert.Equal(t, image1, etcdImage(claim), "nothing rolls before the new image is checked")
	h.imageChecked(t, claim, image2, "1.37.1", "3.7.0")
	s = h.ensure(t, claim)
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
