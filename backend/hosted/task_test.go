package hosted

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openmcp-local/cluster-provider/backend"
)

// TestJobBackoff: after a failed maintenance Job the next waits a minute, twice as long after each
// in a row, never more than the maintenance interval.
func TestJobBackoff(t *testing.T) {
	for failures, want := range map[int]time.Duration{
		0: maintainAgain, 1: 2 * maintainAgain, 2: 4 * maintainAgain, 8: 256 * maintainAgain,
		9: maintainEvery, 10: maintainEvery, 1000: maintainEvery,
	} {
		t.Run(fmt.Sprint(failures), func(t *testing.T) {
			assert.Equal(t, want, maintainJobs.backoff(failures))
			assert.Equal(t, want, (&etcdHealth{Failures: failures}).backoff())
		})
	}
}

// TestJobStatus: a Job has ended when Kubernetes says so, or when it outlived its deadline by
// jobGrace (Kubernetes did not end it).
func TestJobStatus(t *testing.T) {
	tk := task{jobKind: snapshotJobs}
	job := func(age time.Duration, conds ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(time.Now().Add(-age))}, Status: batchv1.JobStatus{Conditions: conds}}
	}
	for _, tc := range []struct {
		name   string
		job    *batchv1.Job
		ended  bool
		failed string
	}{
		{"runs", job(time.Minute), false, ""},
		{"runs within its grace", job(snapshotDeadline + jobGrace/2), false, ""},
		{"complete", job(time.Minute, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}), true, ""},
		{"failed", job(time.Minute, batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "DeadlineExceeded", Message: "too long"}),
			true, "DeadlineExceeded: too long"},
		{"a condition not true", job(time.Minute, batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionFalse}), false, ""},
		{"outlived its deadline", job(snapshotDeadline + 2*jobGrace), true, "it did not end within 10m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := tk.status(tc.job)
			assert.Equal(t, tc.ended, run.ended)
			assert.Equal(t, tc.failed, run.failed)
			assert.Same(t, tc.job, run.job)
		})
	}
}

// TestJobTemplates: every kind's Job runs its pod once within its deadline and mounts the Secret
// made for it.
func TestJobTemplates(t *testing.T) {
	cp := &Spec{Namespace: "hcp-x", Image: image1, Cluster: ClusterRef{Namespace: "team-a", Name: "x", UID: "x"}}
	bs := cp.backupSpec()
	for _, tc := range []struct {
		kind   jobKind
		job    *batchv1.Job
		volume string
	}{
		{snapshotJobs, bs.SnapshotJob(cp, "1.37.1", backend.KeepNewest(3)), "pki"},
		{maintainJobs, bs.MaintenanceJob(cp, false, 0), "pki"},
		{serveJobs, bs.ServeJob(cp.Namespace, backend.Snapshot{Name: "20261126T010000Z", Cluster: "x"}, 1), "serve"},
	} {
		t.Run(tc.kind.what, func(t *testing.T) {
			assert.Equal(t, tc.kind.name(cp.Namespace), tc.job.Name)
			assert.Equal(t, BackupNamespace, tc.job.Namespace)
			assert.Equal(t, int64(tc.kind.deadline.Seconds()), *tc.job.Spec.ActiveDeadlineSeconds)
			assert.Equal(t, int32(0), *tc.job.Spec.BackoffLimit)
			assert.Equal(t, corev1.RestartPolicyNever, tc.job.Spec.Template.Spec.RestartPolicy)
			assert.Equal(t, tc.kind.component, tc.job.Spec.Template.Labels[LabelComponent])
			assert.Contains(t, tc.job.Spec.Template.Spec.Volumes, tc.kind.secretVolume(tc.volume, cp.Namespace))
			assert.Equal(t, "team-a/x", tc.job.Annotations[AnnotationCluster], "its changes notify its Cluster")
		})
	}
}

// TestSnapshotJobRetention: the snapshot Job carries the ProviderConfig's retention as the flags
// cmd/etcd-snapshot save reads back into the same backend.Retention, before the members.
func TestSnapshotJobRetention(t *testing.T) {
	cp := &Spec{Namespace: "hcp-x", Image: image1, Cluster: ClusterRef{Namespace: "team-a", Name: "x", UID: "x"}}
	r := backend.Retention{Keep: 2, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 6}
	args := cp.backupSpec().SnapshotJob(cp, "1.37.1", r).Spec.Template.Spec.Containers[0].Args
	sep := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--member=") })
	require.Positive(t, sep, "the members are named: %v", args)
	for _, f := range r.Flags() {
		i := slices.Index(args, f)
		assert.True(t, i > 0 && i < sep, "%s before --: %v", f, args)
	}
}
