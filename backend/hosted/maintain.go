package hosted

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/etcdmaint"
)

// A hosted control plane's etcd is kept healthy by maintenance Jobs (maintain-hcp-… in
// BackupNamespace, each with an etcd client certificate made for it: jobcert.go) that run
// cmd/etcd-snapshot maintain, backend/etcdmaint's pass, over its members: a full etcd (NOSPACE) is
// compacted, defragmented member by member and disarmed once below its quota; every maintainEvery,
// fragmented members are defragmented, one at a time and only while all answer. The report (the Job's
// termination message) is recorded (providerStatus.Etcd) and is the Cluster's EtcdHealthy
// condition. A Job runs:
//
//   - once a new control plane first serves (the condition's first value);
//   - every maintainEvery (the periodic defragmentation);
//   - while etcd is full, or an etcd member runs but has not been ready for suspectAfter (etcd's
//     readiness check fails on a NOSPACE alarm: that is how a full etcd shows), at most every
//     maintainAgain: what the user deleted is freed at the next one;
//   - once every member is ready after a report in which one did not answer (a member still
//     starting when a new control plane first served, a drained node), at most every
//     maintainAgain: EtcdHealthy does not say a member is down for hours after it came back.
const (
	ComponentMaintain = "etcd-maintain"
	maintainEvery     = backend.MaintenanceInterval
	maintainAgain     = time.Minute
	suspectAfter      = 30 * time.Second
	// maintainDeadline bounds a maintenance Job: three defragmentations (etcdmaint's timeout each).
	maintainDeadline = 3*etcdmaint.MaintenanceTimeout + 5*time.Minute
)

// etcdHealth is the last maintenance report of a control plane's etcd, in its record.
type etcdHealth struct {
	// Checked is when the last report came, Tried when the last Job ended (with a report or not),
	// Periodic when the last periodic pass ran (or the first check).
	Checked  time.Time `json:"checked,omitzero"`
	Tried    time.Time `json:"tried,omitzero"`
	Periodic time.Time `json:"periodic,omitzero"`
	// DBSize is the largest member's database, Quota etcd's --quota-backend-bytes.
	DBSize int64 `json:"dbSize"`
	Quota  int64 `json:"quota"`
	// NoSpace: the NOSPACE alarm stays (etcd takes no writes); FreedAt the revision it was freed at.
	NoSpace bool  `json:"noSpace,omitempty"`
	FreedAt int64 `json:"freedAt,omitempty"`
	// Defragmented are the members the last pass defragmented.
	Defragmented []string `json:"defragmented,omitempty"`
	// Down are the members that did not answer the last report.
	Down    []string `json:"down,omitempty"`
	Message string   `json:"message,omitempty"`
	// Running: a maintenance Job was started and its report not read yet.
	Running bool `json:"running,omitempty"`
	// Failures counts the Jobs in a row that brought no report: the next waits twice as long.
	Failures int `json:"failures,omitempty"`
}

// part is the Cluster's EtcdHealthy of e.
func (e *etcdHealth) part() *backend.Part {
	if e == nil || e.Checked.IsZero() {
		return nil
	}
	if e.NoSpace {
		return &backend.Part{Reason: backend.ReasonEtcdNoSpace, Message: e.Message}
	}
	return &backend.Part{Ready: true, Reason: backend.ReasonRunning, Message: e.Message}
}

// maintainJobs are the maintenance Jobs (task.go): after one that brought no report, the next
// waits maintainAgain, twice as long after each such Job in a row, up to maintainEvery.
var maintainJobs = jobKind{what: "etcd maintenance", component: ComponentMaintain, name: func(ns string) string { return namesFor(ns).maintain },
	deadline: maintainDeadline, leaf: clientLeaf, retry: wait.Backoff{Duration: maintainAgain, Factor: 2, Steps: math.MaxInt32, Cap: maintainEvery}}

// maintainEtcd starts a maintenance Job when one is due, and records the report of one that
// ended, in ps: the pipeline saves it at its end (no component after maintenanceComponent fails;
// were the save to fail, the record says a Job runs that is gone, which starts the next one). It returns how soon to look again (0: no sooner than otherwise; a Job's end notifies the
// Cluster). Nothing of it stops the control plane from serving: a Job that cannot run is tried
// again later.
func (b *Backend) maintainEtcd(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, s *Spec, ps *providerStatus, serves bool) (time.Duration, error) {
	t := b.task(maintainJobs, h, s)
	if ps.Etcd == nil || !ps.Etcd.Running {
		due, periodic, wait := b.maintenanceDue(ctx, h, s, ps, serves)
		if !due {
			return wait, nil
		}
		if err := b.startMaintenance(ctx, t, ps, periodic); err != nil {
			return 0, err
		}
		if ps.Etcd == nil {
			ps.Etcd = &etcdHealth{}
		}
		ps.Etcd.Running = true
		return 5 * time.Second, nil
	}
	run, err := t.observe(ctx)
	switch {
	case err != nil:
		return 0, err
	case run.job == nil:
		ps.Etcd.Running = false // deleted by someone: due again
		return time.Second, nil
	case !run.ended:
		return taskSafetyNet, nil // most end within seconds, and notify the Cluster
	}
	var r etcdmaint.Report
	err = t.result(ctx, run, &r)
	if err == nil && r.Unreachable {
		err = errors.New(r.Message)
	}
	b.recordReport(cl, ps.Etcd, run.job, r, err)
	return 0, t.drop(ctx, nil)
}

// recordReport records in e what the maintenance Job job brought: its report r, or why it brought
// none (failed: the last report stands until the next Job).
func (b *Backend) recordReport(cl *clustersv1alpha1.Cluster, e *etcdHealth, job *batchv1.Job, r etcdmaint.Report, failed error) {
	first := e.Checked.IsZero()
	e.Running, e.Tried = false, time.Now().UTC().Truncate(time.Second)
	if failed != nil {
		e.Failures++
		b.opts.Logger.Info("An etcd maintenance Job learnt nothing; the next one tries again", "cluster", backend.RefOf(cl).String(), "why", failed.Error(), "after", e.backoff().String())
		if first {
			e.Message = "etcd could not be checked yet: " + failed.Error()
		}
		return
	}
	e.Checked, e.Failures = e.Tried, 0
	if first || job.Annotations[annotationPeriodic] == "true" {
		e.Periodic = e.Checked // a new database needs no defragmentation
	}
	e.DBSize, e.Quota, e.NoSpace, e.FreedAt, e.Defragmented, e.Message = r.Largest(), r.Quota, r.NoSpace, r.FreedAt, r.Defragmented, r.Message
	e.Down = nil
	for _, m := range r.Members {
		if m.Error != "" {
			e.Down = append(e.Down, m.Name)
		}
	}
	if r.Disarmed || len(r.Defragmented) > 0 {
		b.opts.Logger.Info("Maintained a hosted etcd", "cluster", backend.RefOf(cl).String(), "disarmed", r.Disarmed, "defragmented", r.Defragmented, "bytes", r.Largest())
	}
}

// maintenanceDue reports whether a maintenance Job is due now, whether it is the periodic one,
// and otherwise how soon one is.
func (b *Backend) maintenanceDue(ctx context.Context, h *host, s *Spec, ps *providerStatus, serves bool) (due, periodic bool, wait time.Duration) {
	if ps.Restore != nil || ps.UpgradeFrom != "" {
		return false, false, 0 // etcd changes: after
	}
	e := ps.Etcd
	if e == nil {
		return serves, false, 0
	}
	again := e.backoff() - time.Since(e.Tried) // Jobs that fail are not started over and over
	if e.Checked.IsZero() {
		switch {
		case !serves:
			return false, false, 0
		case again <= 0:
			return true, false, 0
		}
		return false, false, again
	}
	if again <= 0 && time.Since(e.Periodic) >= maintainEvery {
		return true, true, 0
	}
	wait = maintainEvery - time.Since(e.Periodic)
	if e.NoSpace || etcdSuspect(ctx, h, s) || (len(e.Down) > 0 && etcdAllReady(ctx, h, s)) {
		if again <= 0 {
			return true, false, 0
		}
		wait = min(wait, again)
	}
	return false, false, max(wait, time.Second)
}

// backoff is the least time between the end of a Job and the start of the next: maintainAgain,
// twice as long after each Job in a row without a report (an image without etcd-snapshot
// maintain, etcd out of reach), up to maintainEvery.
func (e *etcdHealth) backoff() time.Duration { return maintainJobs.backoff(e.Failures) }

// etcdSuspect reports whether an etcd member runs, has started, and has not been ready for
// suspectAfter: what a NOSPACE alarm looks like from outside (etcd's readiness check fails on it).
func etcdSuspect(ctx context.Context, h *host, s *Spec) bool {
	pods := &corev1.PodList{}
	if err := h.cache.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels(s.selector(ComponentEtcd))); err != nil {
		return false
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionFalse && time.Since(c.LastTransitionTime.Time) >= suspectAfter && started(p, containerEtcd) {
				return true
			}
		}
	}
	return false
}

// etcdAllReady reports whether every etcd member of s is ready, as its StatefulSet says.
func etcdAllReady(ctx context.Context, h *host, s *Spec) bool {
	sts := &appsv1.StatefulSet{}
	return h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts) == nil &&
		sts.Status.ObservedGeneration >= sts.Generation && sts.Status.ReadyReplicas >= s.replicas(ComponentEtcd)
}

// started reports whether container of p runs and has passed its startup check.
func started(p corev1.Pod, container string) bool {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == container {
			return c.State.Running != nil && ptr.Deref(c.Started, false)
		}
	}
	return false
}

// annotationPeriodic marks the maintenance Job of the periodic pass.
const annotationPeriodic = "hosted.clusters.openmcp.cloud/periodic"

// startMaintenance starts the maintenance Job of t, the periodic pass or not.
func (b *Backend) startMaintenance(ctx context.Context, t task, ps *providerStatus, periodic bool) error {
	var freedAt int64
	if ps.Etcd != nil {
		freedAt = ps.Etcd.FreedAt
	}
	return t.start(ctx, t.s.backupSpec().MaintenanceJob(t.s, periodic, freedAt), nil)
}

// etcdMemberFlags are the --member flags of cmd/etcd-snapshot (maintain, save) for s's etcd: each
// member by its own DNS name (the peer Service's) when highly available, the one member by etcd's
// Service otherwise.
func (s *Spec) etcdMemberFlags() []string {
	if !s.HighAvailability {
		return []string{fmt.Sprintf("--member=%s-0=https://%s.%s.svc:%d", NameEtcd, NameEtcd, s.Namespace, portEtcd)}
	}
	flags := make([]string, haEtcdMembers)
	for i := range flags {
		flags[i] = fmt.Sprintf("--member=%s-%d=https://%s:%d", NameEtcd, i, etcdMember(s.Namespace, i), portEtcd)
	}
	return flags
}

// MaintenanceJob is the Job (in BackupNamespace: s is a backupSpec) of one maintenance pass over
// the etcd members of cp's control plane, with the etcd client certificate in the Secret of its
// own name.
func (s *Spec) MaintenanceJob(cp *Spec, periodic bool, freedAt int64) *batchv1.Job {
	const pki = "/etc/etcd/pki"
	args := []string{"maintain", "--quota=" + strconv.FormatInt(cp.etcdQuota(), 10), "--freed-at=" + strconv.FormatInt(freedAt, 10),
		"--cacert=" + pki + "/ca.crt", "--cert=" + pki + "/tls.crt", "--key=" + pki + "/tls.key"}
	if periodic {
		args = append(args, "--defrag")
	}
	args = append(args, cp.etcdMemberFlags()...)
	pod := s.podSpec(ComponentMaintain, []corev1.Container{{
		Name:    ComponentMaintain,
		Image:   cp.Image,
		Command: []string{binDir + "etcd-snapshot"},
		Args:    args,
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "pki", MountPath: pki, ReadOnly: true}},
	}})
	pod.Volumes = append(pod.Volumes, maintainJobs.secretVolume("pki", cp.Namespace))
	job := maintainJobs.template(s, cp.Namespace, pod)
	job.Annotations[annotationPeriodic] = strconv.FormatBool(periodic)
	return job
}
