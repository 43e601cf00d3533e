package hosted

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/openmcp-local/cluster-provider/backend"
)

// Image checks. Before a control plane rolls to a new image (an upgrade, an image refresh), a Job
// of that image (preflight-hcp-… in BackupNamespace) runs `etcd-snapshot versions`, which reports
// the versions its kube-apiserver and etcd print (the image has no shell). The image may roll only
// when its kube-apiserver is of the target's minor and its etcd of the release line the target
// ships with (backend.CheckImageVersions, backend.EtcdLine): an image named for 1.37 but built
// with etcd 3.5 is refused before any pod changes, and the cluster keeps running as it was. The
// result is remembered in the record (providerStatus.Preflight), so each target image is checked
// once; a check that brought no versions (the image cannot be pulled, lacks the command) is tried
// again after preflightAgain.
const (
	// ComponentPreflight labels the image checks' pods.
	ComponentPreflight = "image-check"
	// preflightDeadline bounds an image check, its pod's start (the image's pull) included.
	preflightDeadline = 10 * time.Minute
	// preflightAgain is how soon an image check that brought no versions is tried again.
	preflightAgain = 10 * time.Minute
)

// preflightJobs are the image checks (task.go): no certificate, no retry of their own (the
// record's Checked decides when a failed one runs again).
var preflightJobs = jobKind{what: "image check", component: ComponentPreflight, name: func(ns string) string { return "preflight-" + ns },
	deadline: preflightDeadline}

// imageCheck is the record of the last image check of a control plane.
type imageCheck struct {
	// Image is the image checked; Kubernetes and Etcd the versions it reported.
	Image      string `json:"image"`
	Kubernetes string `json:"kubernetes,omitempty"`
	Etcd       string `json:"etcd,omitempty"`
	// Failed says why the check brought no versions.
	Failed string `json:"failed,omitempty"`
	// Checked is when its Job ended.
	Checked time.Time `json:"checked,omitzero"`
}

// imageVersions is what `etcd-snapshot versions` writes as its termination message.
type imageVersions struct {
	Kubernetes string `json:"kubernetes"`
	Etcd       string `json:"etcd"`
}

// PreflightJob is the Job that reports the Kubernetes and etcd versions image carries, for the
// control plane in namespace ns (s is its backupSpec).
func (s *Spec) PreflightJob(ns, image string) *batchv1.Job {
	pod := s.podSpec(ComponentPreflight, []corev1.Container{{
		Name:    ComponentPreflight,
		Image:   image,
		Command: []string{binDir + "etcd-snapshot"},
		Args:    []string{"versions"},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("32Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
	}})
	return preflightJobs.template(s, ns, pod)
}

// checkImage checks image for Kubernetes version to: why it may not roll ("": it may), or checking
// while its Job runs (the Job's end notifies the Cluster). A result is recorded in sc.ps.
func (sc *scope) checkImage(ctx context.Context, to, image string) (why string, checking bool, err error) {
	if c := sc.ps.Preflight; c != nil && c.Image == image {
		switch since := time.Since(c.Checked); {
		case c.Failed == "":
			return backend.CheckImageVersions(to, c.Kubernetes, c.Etcd), false, nil
		case since < preflightAgain:
			sc.retryWithin(preflightAgain - since)
			return fmt.Sprintf("its check brought no versions (%s; tried again at %s): the image must hold %setcd-snapshot with its versions command (make controlplane-image)",
				c.Failed, c.Checked.Add(preflightAgain).UTC().Format(time.RFC3339), binDir), false, nil
		}
	}
	cl := sc.cl
	s := &Spec{Namespace: NamespaceFor(cl.UID), Cluster: ClusterRef{Namespace: cl.Namespace, Name: cl.Name, Profile: cl.Spec.Profile, UID: cl.UID}, Image: image}
	t := sc.b.task(preflightJobs, sc.h, s)
	run, err := t.observe(ctx)
	switch {
	case err != nil:
		return "", false, err
	case run.job == nil:
		if err := t.prepare(ctx); err != nil {
			return "", false, err
		}
		if err := sc.h.client.Create(ctx, s.backupSpec().PreflightJob(s.Namespace, image)); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", false, fmt.Errorf("starting the image check of %s: %w", image, err)
		}
		sc.b.opts.Logger.Info("Checking the versions a control-plane image carries", "cluster", backend.RefOf(cl).String(), "image", image)
		sc.retryWithin(taskSafetyNet)
		return "", true, nil
	case imageOf(run.job) != image: // the check of an image no longer the target
		return "", true, t.drop(ctx, nil)
	case !run.ended:
		sc.retryWithin(taskSafetyNet)
		return "", true, nil
	}
	var v imageVersions
	c := &imageCheck{Image: image, Checked: time.Now().UTC()}
	if err := t.result(ctx, run, &v); err != nil {
		c.Failed = err.Error()
	} else {
		c.Kubernetes, c.Etcd = v.Kubernetes, v.Etcd
	}
	sc.ps.Preflight = c
	sc.b.opts.Logger.Info("Checked a control-plane image", "cluster", backend.RefOf(cl).String(), "image", image,
		"kubernetes", c.Kubernetes, "etcd", c.Etcd, "failed", c.Failed)
	if err := t.drop(ctx, nil); err != nil {
		return "", false, err
	}
	return sc.checkImage(ctx, to, image)
}

// upgradeChecked returns change refused when the image of its target fails its check
// (checkImage); while the check runs, sc.checking says so and change is returned as it is.
func (sc *scope) upgradeChecked(ctx context.Context, change *backend.VersionChange) (*backend.VersionChange, error) {
	image, err := imageFor(sc.settings, change.To, sc.pc.Name)
	if err != nil {
		return nil, err
	}
	why, checking, err := sc.checkImage(ctx, change.To, image)
	switch {
	case err != nil:
		return nil, err
	case checking:
		sc.checking = &backend.VersionChange{From: change.From, To: change.To, Message: fmt.Sprintf(
			"Upgrading from Kubernetes %s to %s: checking the Kubernetes and etcd versions image %s carries; nothing rolls before.", change.From, change.To, image)}
	case why != "":
		line, _ := backend.EtcdLine(change.To)
		return backend.Refuse(change.From, change.To, fmt.Sprintf(
			"upgrade from %s to %s is refused: image %s: %s; the cluster keeps running %s. Name an image of Kubernetes %s built with etcd 3.%d in the ProviderConfig's spec.hosted.images, or set spec.kubernetes.version back to %s",
			change.From, change.To, image, why, change.From, change.To, line, change.From)), nil
	}
	return change, nil
}
