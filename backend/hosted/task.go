package hosted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/certs"
)

// The backend's Jobs, in BackupNamespace: snapshots (backup.go), etcd maintenance (maintain.go)
// and the serve of a restore (restore.go). Each kind (a jobKind) states its name, deadline,
// certificate and template, and how to read its result; one runner (task) does the rest for all:
//
//   - start: BackupNamespace is prepared and a Job created from its kind's template when there is
//     none, with a certificate made for it alone (jobcert.go) in a Secret of its name that it owns;
//   - deadline: activeDeadlineSeconds, and a Job that outlives it by jobGrace anyway (Kubernetes
//     did not end it) counts as failed;
//   - result: what its pod wrote as its termination message (JSON), or why it failed (result);
//   - backoff: the least time before the next try after failures in a row (jobKind.retry);
//   - cleanup: a Job whose result was read goes, its Secret with it (drop).
//
// Jobs are read from the host's cache, which watches them (host.go): a Job's change notifies its
// Cluster, so no one polls while a Job runs (taskSafetyNet is how soon to look again anyway). A
// Job the cache says is absent or ended is read again directly before the runner acts on it: the
// cache may not have seen a Job made or deleted a moment ago, and a Job is neither started twice
// nor its result read twice.

// jobGrace is how long a Job may outlive its deadline before the runner ends it itself.
const jobGrace = time.Minute

// taskSafetyNet is how soon a Cluster whose Job runs is looked at again, should its Job's end not
// notify it (a watch that broke).
const taskSafetyNet = 30 * time.Second

// jobKind is one kind of the backend's Jobs.
type jobKind struct {
	// what names it in messages: "snapshot", "etcd maintenance", "snapshot serve".
	what string
	// component labels its pods (the NetworkPolicies select them by it).
	component string
	// name is the name of its Job, and of the Job's Secret, for the control plane in namespace ns.
	name func(ns string) string
	// deadline bounds a Job, its pod's start included (activeDeadlineSeconds).
	deadline time.Duration
	// leaf is the certificate made for each Job of the control plane in namespace ns (of its etcd
	// CA; its validity is the runner's: jobCertValidity).
	leaf func(ns string) certs.Leaf
	// retry is the least time between the end of a Job and the start of the next, doubling after
	// each Job in a row that failed (zero: the caller decides when to try again).
	retry wait.Backoff
}

// backoff is the least time from the end of a Job to the start of the next after failures Jobs
// in a row failed.
func (k jobKind) backoff(failures int) time.Duration {
	next := k.retry.DelayFunc()
	d := next()
	for range min(failures, 64) {
		d = next()
	}
	return d
}

// template is the Job of kind k for the control plane in namespace ns, in BackupNamespace (s is
// its backupSpec), that runs pod once (no retry: the runner decides) within k's deadline.
func (k jobKind) template(s *Spec, ns string, pod corev1.PodSpec) *batchv1.Job {
	pod.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		TypeMeta:   typeMeta("batch/v1", "Job"),
		ObjectMeta: s.meta(k.name(ns), k.component),
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr.To[int32](0),
			ActiveDeadlineSeconds: ptr.To(int64(k.deadline.Seconds())),
			Template:              corev1.PodTemplateSpec{ObjectMeta: s.podMeta(k.component), Spec: pod},
		},
	}
}

// secretVolume is the volume of the Secret made for the Job of kind k of the control plane in
// namespace ns (its certificate: tls.crt, tls.key, ca.crt).
func (k jobKind) secretVolume(volume, ns string) corev1.Volume {
	return corev1.Volume{Name: volume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: k.name(ns), DefaultMode: ptr.To[int32](0o440)}}}
}

// task runs the Jobs of one kind for the control plane of s (its Spec; the Jobs go to
// BackupNamespace) on host h.
type task struct {
	jobKind
	b *Backend
	h *host
	s *Spec
}

func (b *Backend) task(k jobKind, h *host, s *Spec) task { return task{jobKind: k, b: b, h: h, s: s} }

func (t task) key() client.ObjectKey {
	return client.ObjectKey{Namespace: BackupNamespace, Name: t.name(t.s.Namespace)}
}

// jobRun is a task's Job as observed: job is nil when there is none.
type jobRun struct {
	job *batchv1.Job
	// ended: it ended, or outlived its deadline; failed says why it failed ("": it completed).
	ended  bool
	failed string
}

// observe reads the task's Job: from the cache while it runs; read again directly when the cache
// says it is absent or ended.
func (t task) observe(ctx context.Context) (jobRun, error) {
	key := t.key()
	job := &batchv1.Job{}
	err := t.h.cache.Get(ctx, key, job)
	switch {
	case err == nil:
		if run := t.status(job); !run.ended {
			return run, nil
		}
	case !apierrors.IsNotFound(err):
		return jobRun{}, fmt.Errorf("reading Job %s: %w", key, err)
	}
	job = &batchv1.Job{}
	if err := t.h.client.Get(ctx, key, job); apierrors.IsNotFound(err) {
		return jobRun{}, nil
	} else if err != nil {
		return jobRun{}, fmt.Errorf("reading Job %s: %w", key, err)
	}
	return t.status(job), nil
}

// status is what job says of itself, its deadline checked.
func (t task) status(job *batchv1.Job) jobRun {
	run := jobRun{job: job}
	run.ended, run.failed = jobEnded(job)
	if !run.ended && time.Since(job.CreationTimestamp.Time) > t.deadline+jobGrace {
		// Its deadline passed long ago and Kubernetes did not end it: the runner does.
		run.ended, run.failed = true, fmt.Sprintf("it did not end within %s", t.deadline)
	}
	return run
}

// jobEnded reports whether job ended, and why it failed if it did.
func jobEnded(job *batchv1.Job) (done bool, failed string) {
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, ""
		case batchv1.JobFailed:
			return true, fmt.Sprintf("%s: %s", c.Reason, c.Message)
		}
	}
	return false, ""
}

// start prepares BackupNamespace (prepare) and launches job (launch). Call it when observe found
// no Job.
func (t task) start(ctx context.Context, job *batchv1.Job, data map[string][]byte, also ...client.Object) error {
	if err := t.prepare(ctx, also...); err != nil {
		return err
	}
	return t.launch(ctx, job, data)
}

// prepare makes BackupNamespace, its NetworkPolicy and also (objects of BackupNamespace the Job
// needs), and removes the etcd client certificate earlier versions kept there for all of the
// control plane's Jobs.
func (t task) prepare(ctx context.Context, also ...client.Object) error {
	bs := t.s.backupSpec()
	for _, obj := range append([]client.Object{bs.BackupNamespaceObject(), bs.BackupNetworkPolicy()}, also...) {
		if err := t.h.apply(ctx, obj); err != nil {
			return err
		}
	}
	return t.b.dropSharedCredential(ctx, t.h, t.s)
}

// launch starts job (made from the kind's template) with a certificate of the control plane's
// etcd CA made for it alone (the kind's leaf, valid for job's deadline and jobCertMargin) and data
// besides, in the Secret of job's name.
func (t task) launch(ctx context.Context, job *batchv1.Job, data map[string][]byte) error {
	sec, err := t.b.jobSecret(ctx, t.h, t.s, job, t.leaf(t.s.Namespace))
	if err != nil {
		return err
	}
	maps.Copy(sec.Data, data)
	if err := startJob(ctx, t.h, job, sec); err != nil {
		return fmt.Errorf("starting the %s Job: %w", t.what, err)
	}
	return nil
}

// result reads what the pod of run's Job wrote as its termination message (JSON) into out. It
// returns why the Job failed: the tool's own words (the message's "error"), else why Kubernetes
// ended it (with why no result reads, if none does), else why no result reads; nil when it
// completed and left its result.
func (t task) result(ctx context.Context, run jobRun, out any) error {
	msg, err := podMessage(ctx, t.h, run.job)
	var said struct {
		Error string `json:"error"`
	}
	if err == nil {
		if jerr := json.Unmarshal([]byte(msg.text), out); jerr != nil {
			err = fmt.Errorf("its pod %s says %q", msg.pod, msg.text)
		} else {
			_ = json.Unmarshal([]byte(msg.text), &said) // the tools' results are JSON objects
		}
	}
	switch {
	case said.Error != "":
		return errors.New(said.Error)
	case run.failed != "" && err != nil:
		return fmt.Errorf("%s; %w", run.failed, err)
	case run.failed != "":
		return errors.New(run.failed)
	}
	return err
}

// termination is the termination message of a Job's pod.
type termination struct{ pod, text string }

// podMessage reads the termination message of job's pod (directly: the test pods and those of
// Jobs of an earlier release need not be in the cache; it is read once per Job).
func podMessage(ctx context.Context, h *host, job *batchv1.Job) (termination, error) {
	pods := &corev1.PodList{}
	if err := h.client.List(ctx, pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.ControllerUidLabel: string(job.UID)}); err != nil {
		return termination{}, err
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.ContainerStatuses {
			if t := c.State.Terminated; t != nil && t.Message != "" {
				return termination{pod: p.Name, text: t.Message}, nil
			}
		}
	}
	return termination{}, fmt.Errorf("its pod left no result (the control-plane image %s may lack %s: rebuild it with make controlplane-image)", imageOf(job), binDir+"etcd-snapshot")
}

func imageOf(job *batchv1.Job) string {
	if cs := job.Spec.Template.Spec.Containers; len(cs) > 0 {
		return cs[0].Image
	}
	return ""
}

// drop deletes the task's Job (its pod with it) and the Secret made for it, and returns err
// joined with what failed.
func (t task) drop(ctx context.Context, err error) error {
	key := t.key()
	meta := metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}
	for _, obj := range []client.Object{&batchv1.Job{ObjectMeta: meta}, &corev1.Secret{ObjectMeta: meta}} {
		if derr := t.h.client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(derr) != nil {
			err = errors.Join(err, fmt.Errorf("deleting %T %s: %w", obj, key, derr))
		}
	}
	return err
}

// startJob creates job with sec, the Secret of the same name that it mounts, made for it: sec
// replaces any earlier Secret of its name, is written before job so that job's pod finds it, and
// is then made job's (an ownerReference: the garbage collector deletes it with job). A Job of the
// name that exists already (another replica of the operator started it) is kept and gets sec.
func startJob(ctx context.Context, h *host, job *batchv1.Job, sec *corev1.Secret) error {
	if sec.Namespace != job.Namespace || sec.Name != job.Name {
		return fmt.Errorf("the Secret of Job %s/%s is named %s/%s", job.Namespace, job.Name, sec.Namespace, sec.Name)
	}
	if err := h.client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: sec.Namespace, Name: sec.Name}}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("deleting the Secret of an earlier Job %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	if err := h.client.Create(ctx, sec); err != nil {
		return fmt.Errorf("creating Secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	if err := h.client.Create(ctx, job); apierrors.IsAlreadyExists(err) {
		if err := h.client.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
			return fmt.Errorf("reading Job %s/%s: %w", job.Namespace, job.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("creating Job %s/%s: %w", job.Namespace, job.Name, err)
	}
	// Not blockOwnerDeletion: deleting the Job does not wait for its Secret (and needs no
	// permission on the Jobs' finalizers).
	patch := client.MergeFrom(sec.DeepCopy())
	sec.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: job.Name, UID: job.UID, Controller: ptr.To(true)}}
	if err := h.client.Patch(ctx, sec, patch); err != nil {
		return fmt.Errorf("making Secret %s/%s its Job's: %w", sec.Namespace, sec.Name, err)
	}
	return nil
}
