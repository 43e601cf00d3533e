package hosted

import (
	"context"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/snapshots"
)

// The steps of a restore after its serve (restore.go): stop, etcd, apiserver.

// stopping says what step stop waits for.
const stopping = "the API servers stop before etcd's data is swapped (their watch caches would serve the old data meanwhile)."

// stopsAPIServers reports whether the API servers are kept at zero replicas for run: from step
// stop until every etcd member runs the restored data; for a new Cluster made from a snapshot,
// from its start (its etcd restores the snapshot from its first pod).
func stopsAPIServers(run *restoreRun) bool {
	if run == nil {
		return false
	}
	switch run.Phase {
	case restoreStop, restoreEtcd:
		return true
	case restoreServe:
		return run.PreviousDataDir == ""
	}
	return false
}

// swapEtcd moves etcd to the restore's data folder, which its pods' init container restores the
// snapshot into (step etcd).
func swapEtcd(s *Spec, ps *providerStatus) {
	run := ps.Restore
	run.Phase, run.EtcdStarted = restoreEtcd, time.Now().UTC().Truncate(time.Second)
	ps.EtcdDataDir = run.DataDir
	ps.EtcdRestoredFrom = &RestoreSource{URL: serveURL(s.Namespace), SHA256: run.Snapshot.SHA256}
}

// stopStep waits until no API server runs (its Deployment scaled to zero: restoreSpec), then swaps
// etcd's data.
func stopStep(ctx context.Context, h *host, s *Spec, ps *providerStatus, msg string) (string, error) {
	stopped, err := apiServersStopped(ctx, h, s)
	if err != nil || !stopped {
		return msg + ": " + stopping, err
	}
	swapEtcd(s, ps)
	return msg + ": the API servers are stopped; etcd's members restore it into " + ps.Restore.DataDir + ".", nil
}

// apiServersStopped reports whether the API servers' Deployment is at zero replicas, seen so by
// its controller, and no API server pod is left (one terminating still serves).
func apiServersStopped(ctx context.Context, h *host, s *Spec) (bool, error) {
	dep := &appsv1.Deployment{}
	err := h.client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep)
	if client.IgnoreNotFound(err) != nil {
		return false, err
	}
	if err == nil && (ptr.Deref(dep.Spec.Replicas, 1) != 0 || dep.Status.ObservedGeneration < dep.Generation || dep.Status.Replicas != 0) {
		return false, nil
	}
	pods := &corev1.PodList{}
	if err := h.client.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels{LabelComponent: ComponentAPIServer}); err != nil {
		return false, err
	}
	return len(pods.Items) == 0, nil
}

// etcdStep replaces etcd's pods with pods of the restored data folder and waits until every
// member runs it, ready, the API servers stopped meanwhile; a serve that ended before every
// member fetched the snapshot is made anew. Nothing bounds it (restore.go).
func (b *Backend) etcdStep(ctx context.Context, h *host, s *Spec, ps *providerStatus, msg string) (string, error) {
	run := ps.Restore
	sts := &appsv1.StatefulSet{}
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameEtcd}, sts); err != nil {
		return "", client.IgnoreNotFound(err)
	}
	waiting, err := replaceEtcdPods(ctx, h, s, sts)
	if err != nil {
		return "", err
	}
	if len(waiting) > 0 {
		if err := b.keepServing(ctx, h, s, run); err != nil {
			return "", err
		}
		return etcdWaitMessage(msg, s, run, waiting), nil
	}
	run.Phase = restoreAPIServer
	ps.RestoredMark = run.DataDir
	return msg + ": every etcd member runs the restored data; the API servers start on it.", nil
}

// etcdWaitMessage says which members do not run the restored data yet and, once that lasts
// longer than restoreTimeout, what to do.
func etcdWaitMessage(msg string, s *Spec, run *restoreRun, waiting []string) string {
	m := fmt.Sprintf("%s: the API servers are stopped while etcd's members restore it into %s; not yet running it: %s.", msg, run.DataDir, strings.Join(waiting, ", "))
	if since := time.Since(run.EtcdStarted); !run.EtcdStarted.IsZero() && since > restoreTimeout {
		m += fmt.Sprintf(" They have not for %s: see why with `kubectl -n %s describe pod` of those members (a cordoned, full or lost node that holds a member's volume keeps it from starting: uncordon or repair it)."+
			" The cluster stays stopped on the restored data, never a mix of old and restored members, and the restore finishes when every member runs it.",
			since.Round(time.Minute), s.Namespace)
	}
	return m
}

// keepServing makes the restore's serve anew when it ended having failed (some member did not
// fetch the snapshot in its time) or is gone: a member that starts later still needs it.
func (b *Backend) keepServing(ctx context.Context, h *host, s *Spec, run *restoreRun) error {
	t := b.task(serveJobs, h, s)
	serve, err := t.observe(ctx)
	switch {
	case err != nil:
		return err
	case serve.job == nil:
		_, err = b.ensureServe(ctx, h, s, run)
		return err
	case serve.ended && serve.failed != "":
		b.opts.Logger.Info("A restore's serve ended before every etcd member fetched the snapshot; making it anew", "namespace", s.Namespace, "why", serve.failed)
		return t.drop(ctx, nil) // made anew at the next step
	}
	return nil
}

// replaceEtcdPods deletes every etcd pod that does not run the StatefulSet's current template once
// the StatefulSet controller has seen it, so that all members start on the restored data together
// (a rolling update would wait for a restored member that cannot be ready alone), and returns the
// members that do not run it, ready, yet, each with what it does (none: all of them run it).
func replaceEtcdPods(ctx context.Context, h *host, s *Spec, sts *appsv1.StatefulSet) ([]string, error) {
	members := int(s.replicas(ComponentEtcd))
	all := func(state string) []string {
		var out []string
		for i := range members {
			out = append(out, fmt.Sprintf("%s-%d (%s)", NameEtcd, i, state))
		}
		return out
	}
	if sts.Status.ObservedGeneration < sts.Generation || sts.Status.UpdateRevision == "" {
		return all("its StatefulSet is not updated yet"), nil
	}
	pods := &corev1.PodList{}
	if err := h.client.List(ctx, pods, client.InNamespace(s.Namespace), client.MatchingLabels(s.selector(ComponentEtcd))); err != nil {
		return nil, err
	}
	state := map[string]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels[appsv1.StatefulSetRevisionLabel] != sts.Status.UpdateRevision {
			if p.DeletionTimestamp == nil {
				if err := h.client.Delete(ctx, p); client.IgnoreNotFound(err) != nil {
					return nil, fmt.Errorf("deleting etcd pod %s/%s for the restore: %w", p.Namespace, p.Name, err)
				}
			}
			state[p.Name] = "its pod of the old data is replaced"
			continue
		}
		state[p.Name] = restoringMember(p)
	}
	var waiting []string
	for i := range members {
		name := fmt.Sprintf("%s-%d", NameEtcd, i)
		switch st, ok := state[name]; {
		case !ok:
			waiting = append(waiting, name+" (no pod yet)")
		case st != "":
			waiting = append(waiting, name+" ("+st+")")
		}
	}
	return waiting, nil
}

// restoringMember says what the etcd pod p of the restored data does: "" when it is ready.
func restoringMember(p *corev1.Pod) string {
	switch {
	case p.DeletionTimestamp != nil:
		return "terminating"
	case podReady(p):
		return ""
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return "not scheduled: " + firstLine(c.Reason+" "+c.Message)
		}
	}
	for _, c := range p.Status.InitContainerStatuses {
		if last := c.LastTerminationState.Terminated; last != nil && last.ExitCode != 0 && (c.State.Terminated == nil || c.State.Terminated.ExitCode != 0) {
			// A control-plane image built before its etcd-snapshot knew --initial-cluster-token
			// says "flag provided but not defined": rebuild it (make controlplane-image).
			return fmt.Sprintf("its restore failed %d times, last: %s", c.RestartCount, snapshots.LastLine(last.Message))
		}
		if c.State.Terminated == nil || c.State.Terminated.ExitCode != 0 {
			return "restoring the snapshot"
		}
	}
	if p.Status.Phase == corev1.PodPending {
		return "pending"
	}
	return "not ready"
}

// apiServerStep waits until the API servers, started again, serve the restored data only: then
// the restore is done and its serve goes.
func (b *Backend) apiServerStep(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, s *Spec, ps *providerStatus, msg string) (string, error) {
	run := ps.Restore
	dep := &appsv1.Deployment{}
	if err := h.client.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameAPIServer}, dep); client.IgnoreNotFound(err) != nil {
		return "", err
	}
	if dep.Spec.Template.Annotations[AnnotationRestored] != ps.RestoredMark || ptr.Deref(dep.Spec.Replicas, 1) == 0 || !rolledOut(dep) || oldAPIServers(ctx, h, s) {
		return msg + ": the API servers start anew on the restored data.", nil
	}
	ps.Restored = &backend.Restored{Snapshot: run.Snapshot, At: time.Now().UTC().Truncate(time.Second)}
	if run.PreviousDataDir != "" {
		ps.Restored.MovedAside = fmt.Sprintf("folder %s of etcd's claims, kept beside %s that etcd runs now", run.PreviousDataDir, run.DataDir)
	}
	ps.Restore = nil
	b.opts.Logger.Info("Restored a hosted control plane from a snapshot", "cluster", backend.RefOf(cl).String(), "snapshot", run.Snapshot.Ref())
	return "", b.endServe(ctx, h, s.Namespace)
}

// etcdClusterToken is the --initial-cluster-token of the etcd cluster a restore into data folder
// dir makes: the control plane's namespace (etcd's own flag: etcdHAArgs) for the first data
// folder, and one of the folder for each restore, so that each restore makes a new cluster ID
// which no member of an older cluster can join. etcd reads the token only when it makes its data
// folder (the restore's init container does): etcd's own flag, ignored once the folder exists,
// stays the namespace, so that no running etcd rolls for it.
func etcdClusterToken(namespace, dir string) string {
	if dir == "" || dir == "data" {
		return namespace
	}
	return namespace + "-" + dir
}
