// Command localprovisioner is the volume provisioner of `make e2e-kind`'s platform, whose offline
// node image has none: for each claim of StorageClass --class that the scheduler has placed on a
// node (WaitForFirstConsumer), it makes a folder in that node's container (docker exec) and a
// local PersistentVolume there for the claim; when a claim is deleted, it removes the folder and
// the volume (reclaim policy Delete; only the volume when its node is gone). It runs on the
// machine next to the kind cluster, for as long as the test does.
//
//	go run ./hack/localprovisioner --kubeconfig FILE [--class hosted-local]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Provisioner is the StorageClass provisioner name this command serves.
const Provisioner = "e2e.cluster-provider/local"

const (
	annSelectedNode  = "volume.kubernetes.io/selected-node"
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
	baseDir          = "/var/local-pv"
	owner            = "65532:65532" // the hosted pods' user
)

func main() {
	// --kubeconfig is controller-runtime's flag (ctrl.GetConfig).
	class := flag.String("class", "hosted-local", "the StorageClass to serve (made if missing)")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	if err := run(*class); err != nil {
		fmt.Fprintln(os.Stderr, "localprovisioner:", err)
		os.Exit(1)
	}
}

func run(class string) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: class},
		Provisioner:       Provisioner,
		ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
	}
	if err := c.Create(ctx, sc); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating StorageClass %s: %w", class, err)
	}
	p := &provisioner{c: mgr.GetClient(), class: class}
	if err := ctrl.NewControllerManagedBy(mgr).Named("claims").For(&corev1.PersistentVolumeClaim{}).
		Complete(reconcile.Func(p.claim)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named("volumes").For(&corev1.PersistentVolume{}).
		Complete(reconcile.Func(p.volume)); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

type provisioner struct {
	c     client.Client
	class string
}

// claim provisions a volume for a pending claim of the class once a node is selected.
func (p *provisioner) claim(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := p.c.Get(ctx, req.NamespacedName, pvc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	node := pvc.Annotations[annSelectedNode]
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != p.class || pvc.Spec.VolumeName != "" ||
		pvc.Status.Phase != corev1.ClaimPending || node == "" {
		return reconcile.Result{}, nil
	}
	name := "pvc-" + string(pvc.UID)
	dir := path.Join(baseDir, name)
	if out, err := exec.CommandContext(ctx, "docker", "exec", node, "sh", "-c",
		fmt.Sprintf("mkdir -p %s && chown %s %s && chmod 0750 %s", dir, owner, dir, dir)).CombinedOutput(); err != nil {
		return reconcile.Result{}, fmt.Errorf("making %s on node %s: %v: %s", dir, node, err, out)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: Provisioner}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   pvc.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              p.class,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: dir}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	if err := p.c.Create(ctx, pv); err != nil && !apierrors.IsAlreadyExists(err) {
		return reconcile.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Provisioned", "volume", name, "node", node, "dir", dir)
	return reconcile.Result{}, nil
}

// volume deletes a released volume of ours and its folder.
func (p *provisioner) volume(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pv := &corev1.PersistentVolume{}
	if err := p.c.Get(ctx, req.NamespacedName, pv); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if pv.Annotations[annProvisionedBy] != Provisioner || pv.Status.Phase != corev1.VolumeReleased ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Spec.Local == nil {
		return reconcile.Result{}, nil
	}
	node := pv.Spec.NodeAffinity.Required.NodeSelectorTerms[0].MatchExpressions[0].Values[0]
	if out, err := exec.CommandContext(ctx, "docker", "exec", node, "rm", "-rf", pv.Spec.Local.Path).CombinedOutput(); err != nil {
		// A node that is gone (its container removed and the Node deleted: TestHostedNodeLossOnKind)
		// took the folder with it; only the volume is left to delete.
		if gone, gerr := p.nodeGone(ctx, node); gerr != nil || !gone {
			return reconcile.Result{}, fmt.Errorf("removing %s on node %s: %v: %s", pv.Spec.Local.Path, node, err, out)
		}
		ctrl.LoggerFrom(ctx).Info("The volume's node is gone, and its folder with it", "volume", pv.Name, "node", node)
	}
	if err := p.c.Delete(ctx, pv); client.IgnoreNotFound(err) != nil {
		return reconcile.Result{}, err
	}
	ctrl.LoggerFrom(ctx).Info("Deleted", "volume", pv.Name, "node", node)
	return reconcile.Result{}, nil
}

// nodeGone reports whether the cluster has no Node named node.
func (p *provisioner) nodeGone(ctx context.Context, node string) (bool, error) {
	err := p.c.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}
