package hosted

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// imageEtcd35 is an image named for 1.37 but built with etcd 3.5.
const imageEtcd35 = "cluster-provider/controlplane:v1.37.1-etcd3.5"

// TestUpgradeInOrder: the image an upgrade rolls to is checked before anything rolls (a Job of
// it reports its versions: envtest runs no pod, the test writes its termination message); an
// image with the wrong etcd is refused and nothing changes; the right one rolls etcd, then the API
// servers, then the controller manager once every API server runs the new image; the upgrade is
// done only when every pod runs the new image.
func TestUpgradeInOrder(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.Images["1.36.3"] = image136
	h.pc.Spec.Hosted.StorageClassName = "standard"
	cl := newCluster("upgrade-order")
	h.ensureWant(t, cl, want136)
	h.etcdUp(t, cl)
	rolledOutNow(t, cl)
	h.version = "1.36.3"
	c := &orderCase{h: h, cl: cl, ns: NamespaceFor(cl.UID)}

	t.Run("an image with the wrong etcd is refused before anything rolls", c.wrongEtcdRefused)
	t.Run("the right image rolls etcd first", c.rightImageRollsEtcd)
	t.Run("the controller manager waits for every API server", c.controllerManagerLast)
	t.Run("done only when every pod runs the new image", c.doneWhenEveryPod)
}

type orderCase struct {
	h  *harness
	cl *clustersv1alpha1.Cluster
	ns string
}

func (c *orderCase) deployment(t *testing.T) *appsv1.Deployment {
	return get(t, &appsv1.Deployment{}, c.ns, NameAPIServer)
}

// checkImage ends the image check of cl with the versions its pod reports.
func (c *orderCase) checkImage(t *testing.T, image, kubernetes, etcd string) {
	t.Helper()
	c.h.imageChecked(t, c.cl, image, kubernetes, etcd)
}

// imageChecked ends the image check of cl's control plane (its Job must check image) with the
// versions its pod reports, as Kubernetes would.
func (h *harness) imageChecked(t *testing.T, cl *clustersv1alpha1.Cluster, image, kubernetes, etcd string) {
	t.Helper()
	name := preflightJobs.name(NamespaceFor(cl.UID))
	job := get(t, &batchv1.Job{}, BackupNamespace, name)
	require.Equal(t, image, imageOf(job), "the check runs the image to check")
	require.Equal(t, []string{"versions"}, job.Spec.Template.Spec.Containers[0].Args)
	out, err := json.Marshal(imageVersions{Kubernetes: kubernetes, Etcd: etcd})
	require.NoError(t, err)
	h.endJob(t, name, batchv1.JobComplete, string(out))
}

func (c *orderCase) wrongEtcdRefused(t *testing.T) {
	h := c.h
	h.pc.Spec.Hosted.Images["1.37.1"] = imageEtcd35
	defer func() { h.pc.Spec.Hosted.Images["1.37.1"] = image1 }()
	sts, dep := get(t, &appsv1.StatefulSet{}, c.ns, NameEtcd), c.deployment(t)

	s := h.ensureWant(t, c.cl, want137)
	require.NotNil(t, s.VersionChange)
	assert.False(t, s.VersionChange.Refused, "checking is not refusing")
	assert.Contains(t, s.VersionChange.Message, "checking the Kubernetes and etcd versions image "+imageEtcd35+" carries")
	assert.Equal(t, "1.36.3", s.Runs)
	c.checkImage(t, imageEtcd35, "1.37.1", "3.5.21")

	s = h.ensureWant(t, c.cl, want137)
	require.NotNil(t, s.VersionChange)
	assert.True(t, s.VersionChange.Refused)
	assert.Contains(t, s.VersionChange.Message, "upgrade from 1.36.3 to 1.37.1 is refused: image "+imageEtcd35+": it carries etcd 3.5.21, and Kubernetes 1.37.1 needs etcd 3.7; the cluster keeps running 1.36.3")
	assert.Equal(t, "1.36.3", s.Runs)
	assert.Equal(t, sts.ResourceVersion, get(t, &appsv1.StatefulSet{}, c.ns, NameEtcd).ResourceVersion, "etcd is not touched")
	assert.Equal(t, dep.ResourceVersion, c.deployment(t).ResourceVersion, "nor the API servers")
	rec := record(t, c.cl)
	assert.Equal(t, "1.36.3", rec.Version)
	assert.Empty(t, rec.UpgradeFrom)
	require.NotNil(t, rec.Preflight)
	assert.Equal(t, imageCheck{Image: imageEtcd35, Kubernetes: "1.37.1", Etcd: "3.5.21", Checked: rec.Preflight.Checked}, *rec.Preflight)

	forceGone(t, preflightJobs.name(c.ns))
	s = h.ensureWant(t, c.cl, want137)
	require.NotNil(t, s.VersionChange)
	assert.True(t, s.VersionChange.Refused, "still refused")
	err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: BackupNamespace, Name: preflightJobs.name(c.ns)}, &batchv1.Job{})
	assert.True(t, apierrors.IsNotFound(err), "an image is checked once: %v", err)
}

func (c *orderCase) rightImageRollsEtcd(t *testing.T) {
	h := c.h
	s := h.ensureWant(t, c.cl, want137)
	require.NotNil(t, s.VersionChange)
	assert.False(t, s.VersionChange.Refused, "another image: checked anew")
	assert.Equal(t, image136, etcdImage(t, c.cl), "nothing rolls while it is checked")
	c.checkImage(t, image1, "1.37.1", "3.7.0")

	s = h.ensureWant(t, c.cl, want137)
	require.NotNil(t, s.VersionChange)
	assert.False(t, s.VersionChange.Refused, s.VersionChange.Message)
	assert.Equal(t, image1, etcdImage(t, c.cl), "etcd rolls first")
	assert.Equal(t, image136, apiServerImage(c.deployment(t)), "the API servers wait for etcd")
	assert.Equal(t, "1.36.3", s.Runs)
	assert.Equal(t, "1.36.3", record(t, c.cl).UpgradeFrom)
	forceGone(t, preflightJobs.name(c.ns))
}

func (c *orderCase) controllerManagerLast(t *testing.T) {
	h := c.h
	rolledOutNow(t, c.cl) // etcd rolled out: the API servers roll
	require.Eventually(t, func() bool {
		h.ensureWant(t, c.cl, want137)
		return apiServerImage(c.deployment(t)) == image1
	}, 10*time.Second, 50*time.Millisecond, "the API servers roll once etcd runs the new image")
	assert.Equal(t, image136, containerImage(c.deployment(t).Spec.Template.Spec, containerKCM), "the controller manager keeps its image")

	// The Deployment says it rolled out, but an API server replica of the old image still runs.
	h.version = "1.37.1"
	rolledOutNow(t, c.cl)
	c.cachedStatus(t)
	old := c.pod(t, "apiserver-old", ComponentAPIServer, map[string]string{containerAPIServer: image136, containerKCM: image136})
	s := h.ensureWant(t, c.cl, want137)
	assert.Equal(t, image136, containerImage(c.deployment(t).Spec.Template.Spec, containerKCM), "not while an API server runs the old image")
	require.NotNil(t, s.VersionChange)
	assert.Equal(t, "1.36.3", s.Runs)

	c.gone(t, old)
	require.Eventually(t, func() bool {
		h.ensureWant(t, c.cl, want137)
		return containerImage(c.deployment(t).Spec.Template.Spec, containerKCM) == image1
	}, 10*time.Second, 50*time.Millisecond, "the controller manager rolls once every API server runs the new image")
	assert.Equal(t, image1, apiServerImage(c.deployment(t)))
}

func (c *orderCase) doneWhenEveryPod(t *testing.T) {
	h := c.h
	s := h.ensureWant(t, c.cl, want137)
	require.NotNil(t, s.VersionChange, "the controller manager's roll has not rolled out")
	rolledOutNow(t, c.cl)
	c.cachedStatus(t)
	for _, p := range []struct {
		name, component string
		images          map[string]string
	}{
		{"etcd-old", ComponentEtcd, map[string]string{containerEtcd: image136}},
		{"apiserver-kcm-old", ComponentAPIServer, map[string]string{containerAPIServer: image1, containerKCM: image136}},
	} {
		pod := c.pod(t, p.name, p.component, p.images)
		s = h.ensureWant(t, c.cl, want137)
		require.NotNil(t, s.VersionChange, "not done while pod %s runs the old image", p.name)
		assert.Equal(t, "1.36.3", s.Runs)
		assert.Equal(t, "1.36.3", record(t, c.cl).UpgradeFrom)
		c.gone(t, pod)
	}
	require.Eventually(t, func() bool {
		s = h.ensureWant(t, c.cl, want137)
		return s.VersionChange == nil
	}, 10*time.Second, 50*time.Millisecond, "done once every pod runs the new image")
	assert.Equal(t, "1.37.1", s.Runs)
	assert.Empty(t, record(t, c.cl).UpgradeFrom)
}

// cachedStatus waits until the backend's cache holds the status of cl's workloads as it is now.
func (c *orderCase) cachedStatus(t *testing.T) {
	t.Helper()
	hst, err := c.h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	sts, dep := get(t, &appsv1.StatefulSet{}, c.ns, NameEtcd), c.deployment(t)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		seenSts, seenDep := &appsv1.StatefulSet{}, &appsv1.Deployment{}
		if assert.NoError(ct, hst.cache.Get(t.Context(), client.ObjectKeyFromObject(sts), seenSts)) {
			assert.Equal(ct, sts.Status, seenSts.Status)
		}
		if assert.NoError(ct, hst.cache.Get(t.Context(), client.ObjectKeyFromObject(dep), seenDep)) {
			assert.Equal(ct, dep.Status, seenDep.Status)
		}
	}, 10*time.Second, 10*time.Millisecond, "the backend's cache sees the workloads' status")
}

// pod makes a pod of component of cl's control plane whose containers run images (envtest runs
// none: only the backend's cache sees it) and waits until the cache does.
func (c *orderCase) pod(t *testing.T, name, component string, images map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name,
		Labels:      map[string]string{LabelManagedBy: ManagedBy, LabelClusterUID: string(c.cl.UID), LabelComponent: component},
		Annotations: map[string]string{AnnotationCluster: c.cl.Namespace + "/" + c.cl.Name}},
		Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptrTo(true), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}
	for ctr, image := range images {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: ctr, Image: image, SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptrTo(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}})
	}
	require.NoError(t, env.Client.Create(t.Context(), p))
	c.cachedPod(t, p, true)
	return p
}

// gone deletes p and waits until the backend's cache no longer holds it.
func (c *orderCase) gone(t *testing.T, p *corev1.Pod) {
	t.Helper()
	require.NoError(t, env.Client.Delete(t.Context(), p, client.GracePeriodSeconds(0)))
	c.cachedPod(t, p, false)
}

func (c *orderCase) cachedPod(t *testing.T, p *corev1.Pod, there bool) {
	t.Helper()
	hst, err := c.h.b.hostFor(t.Context(), nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		err := hst.cache.Get(t.Context(), client.ObjectKeyFromObject(p), &corev1.Pod{})
		return (err == nil) == there && (there || apierrors.IsNotFound(err))
	}, 10*time.Second, 10*time.Millisecond, "the backend's cache sees pod %s (there: %v)", p.Name, there)
}

// TestImageCheckFailed: an image check whose Job brings no versions refuses the change, says why,
// and is tried again after preflightAgain; nothing rolls meanwhile.
func TestImageCheckFailed(t *testing.T) {
	h := startBackend(t)
	h.pc.Spec.Hosted.Images["1.36.3"] = image136
	h.pc.Spec.Hosted.StorageClassName = "standard"
	cl := newCluster("upgrade-check-failed")
	h.ensureWant(t, cl, want136)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	h.ensureWant(t, cl, want137)
	name := preflightJobs.name(ns)
	h.endJob(t, name, batchv1.JobFailed, `{"error":"kube-apiserver: exec: no such file"}`)
	s := h.ensureWant(t, cl, want137)
	require.NotNil(t, s.VersionChange)
	assert.True(t, s.VersionChange.Refused)
	assert.Contains(t, s.VersionChange.Message, "its check brought no versions (kube-apiserver: exec: no such file")
	assert.Equal(t, image136, etcdImage(t, cl))
	assert.Equal(t, backend.Normalize("1.36.3"), record(t, cl).Version)
	forceGone(t, name)

	// preflightAgain later, it runs again.
	cm := get(t, &corev1.ConfigMap{}, ns, NameRecord)
	rec := record(t, cl)
	rec.Preflight.Checked = rec.Preflight.Checked.Add(-preflightAgain - time.Minute)
	data, err := json.Marshal(rec)
	require.NoError(t, err)
	cm.Data[recordKey] = string(data)
	require.NoError(t, env.Client.Update(t.Context(), cm))
	s = h.ensureWant(t, cl, want137)
	require.NotNil(t, s.VersionChange)
	assert.False(t, s.VersionChange.Refused, "checked again")
	assert.Equal(t, image1, imageOf(get(t, &batchv1.Job{}, BackupNamespace, name)))
}
