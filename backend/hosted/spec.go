package hosted

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
)

// AnnotationImageRefresh on a Cluster rolls its control plane to the image the ProviderConfig
// names now for the version it runs: the one deliberate way to bring a patched image of the SAME
// version to an existing Cluster (images otherwise stay as recorded at creation). Each new value
// refreshes once; the value refreshed is recorded.
const AnnotationImageRefresh = backend.AnnotationImageRefresh

// imageRefresh records the ProviderConfig's image of the running version in sc.ps when the Cluster
// asks for a refresh it has not had (AnnotationImageRefresh), once the image passed its check
// (checkImage; while it runs nothing changes). A control plane whose etcd is on an emptyDir
// refuses: a new etcd pod would start empty; so does an image that fails its check. A refusal is
// returned as a refused change.
func (sc *scope) imageRefresh(ctx context.Context) (*backend.VersionChange, error) {
	b, cl, ps := sc.b, sc.cl, &sc.ps
	want := cl.Annotations[AnnotationImageRefresh]
	if want == "" || want == ps.ImageRefresh {
		return nil, nil
	}
	image, err := imageFor(sc.settings, ps.Version, sc.pc.Name)
	if err != nil {
		return nil, err
	}
	if image == ps.Image {
		ps.ImageRefresh = want // nothing to roll
		return nil, nil
	}
	if refused, err := b.upgradeRefusal(ctx, sc.h, cl, &backend.VersionChange{From: ps.Version, To: ps.Version}); err != nil || refused.Refused {
		if err != nil {
			return nil, err
		}
		return backend.Refuse(ps.Version, ps.Version, fmt.Sprintf(
			"the image refresh %q (to %s) is refused: this control plane's etcd keeps its data on an emptyDir, which a new etcd pod would start without; the cluster keeps running %s. Remove the annotation %s, or create a new Cluster",
			want, image, ps.Image, AnnotationImageRefresh)), nil
	}
	why, checking, err := sc.checkImage(ctx, ps.Version, image)
	switch {
	case err != nil || checking:
		return nil, err // asked again once the check ended
	case why != "":
		return backend.Refuse(ps.Version, ps.Version, fmt.Sprintf(
			"the image refresh %q (to %s) is refused: %s; the cluster keeps running %s. Name an image of Kubernetes %s in the ProviderConfig's spec.hosted.images, or remove the annotation %s",
			want, image, why, ps.Image, ps.Version, AnnotationImageRefresh)), nil
	}
	b.opts.Logger.Info("Rolling a hosted control plane to a new image of its version", "cluster", backend.RefOf(cl).String(), "from", ps.Image, "to", image)
	ps.Image, ps.ImageRefresh = image, want
	return nil, nil
}

// upgradeRefusal returns change refused when this control plane cannot make it without losing
// data (its etcd keeps its data on an emptyDir, which a new etcd pod does not have), else change.
func (b *Backend) upgradeRefusal(ctx context.Context, h *host, cl *clustersv1alpha1.Cluster, change *backend.VersionChange) (*backend.VersionChange, error) {
	sts := &appsv1.StatefulSet{}
	err := h.cache.Get(ctx, client.ObjectKey{Namespace: NamespaceFor(cl.UID), Name: NameEtcd}, sts)
	switch {
	case apierrors.IsNotFound(err):
		return change, nil // nothing runs yet: nothing to lose
	case err != nil:
		return nil, fmt.Errorf("reading etcd's StatefulSet to check an upgrade: %w", err)
	case len(sts.Spec.VolumeClaimTemplates) == 0:
		return backend.Refuse(change.From, change.To, fmt.Sprintf(
			"upgrade from %s to %s is refused: this control plane's etcd keeps its data on an emptyDir, which a new etcd pod would start without; "+
				"the cluster keeps running %s. Create a new Cluster with spec.kubernetes.version %s (give the ProviderConfig spec.hosted.storageClassName so that new control planes keep etcd on a claim), or set spec.kubernetes.version back to %s",
			change.From, change.To, change.From, change.To, change.From)), nil
	}
	return change, nil
}

// spec builds the Spec of cl's control plane: the image, service range and exposure it was
// created with (its status) or, for a new one, those of now.
func (b *Backend) spec(cl *clustersv1alpha1.Cluster, pc *providersv1alpha1.ProviderConfig,
	settings *providersv1alpha1.HostedBackendConfig, version string, ps providerStatus) (*Spec, error) {
	s := &Spec{
		Namespace: NamespaceFor(cl.UID),
		Cluster:   ClusterRef{Namespace: cl.Namespace, Name: cl.Name, Profile: cl.Spec.Profile, UID: cl.UID},
		Image:     ps.Image, ServiceCIDR: ps.ServiceCIDR,
		StorageClassName: ps.StorageClassName,
		HighAvailability: ps.HighAvailability,
		Exposure:         settings.Exposure,
		ObjectStore:      objectStoreOf(pc),
		FrontDoor:        pc.Spec.Hibernation != nil,
		Hibernated:       ps.Hibernated != nil,
		APIServer:        DefaultAPIServer, ControllerManager: DefaultControllerManager, Etcd: DefaultEtcd,
	}
	if s.HighAvailability {
		if s.StorageClassName == "" {
			return nil, backend.Errorf(backend.ReasonStateDamaged,
				"the control plane in namespace %s is recorded highly available without a storage class: an etcd member cannot keep its data on an emptyDir; delete the Cluster and create it again with spec.hosted.storageClassName set",
				s.Namespace)
		}
		// Memory requested as much as its limit: the host never overcommits a highly available
		// control plane's memory, and evicts it under memory pressure only after pods that use
		// more than they requested. CPU is requested, not limited (no throttling).
		for _, r := range []*corev1.ResourceRequirements{&s.APIServer, &s.ControllerManager, &s.Etcd} {
			*r = memoryAsLimited(*r)
		}
	}
	if ps.Exposure != "" {
		s.Exposure = corev1.ServiceType(ps.Exposure)
	}
	s.Exposure = s.exposure() // the same inputs whether defaulted or recorded
	if ps.StorageSize != "" {
		q, err := resource.ParseQuantity(ps.StorageSize)
		if err != nil {
			return nil, fmt.Errorf("the record of namespace %s: storage size %q: %w", s.Namespace, ps.StorageSize, err)
		}
		s.StorageSize = q
	}
	if r := settings.Resources; r != nil {
		for _, x := range []struct {
			from *corev1.ResourceRequirements
			to   *corev1.ResourceRequirements
		}{{r.APIServer, &s.APIServer}, {r.ControllerManager, &s.ControllerManager}, {r.Etcd, &s.Etcd}} {
			if x.from != nil {
				*x.to = *x.from.DeepCopy()
			}
		}
	}
	s.AllowedSourceRanges = settings.AllowedSourceRanges // a live setting: not recorded
	if pc.Spec.OIDC != nil {
		s.IssuerPorts = IssuerPorts(pc.Spec.OIDC.AllowedIssuers)
		s.PrivateIssuers = pc.Spec.OIDC.AllowPrivateIssuers
	}
	if s.ServiceCIDR == "" {
		s.ServiceCIDR = b.opts.ServiceCIDR
	}
	if s.Image == "" || !backend.SameVersion(ps.Version, version) {
		image, err := imageFor(settings, version, pc.Name)
		if err != nil {
			return nil, err
		}
		s.Image = image
	}
	s.restoreSpec(ps)
	return s, nil
}

// hostSpec sets what s takes from its host h rather than from the ProviderConfig: the host's API
// endpoints, read anew at every reconcile so that a change of them reaches the NetworkPolicy, and
// the operator's pods when the operator runs in h.
func (b *Backend) hostSpec(ctx context.Context, h *host, s *Spec) error {
	endpoints, err := h.apiEndpoints(ctx)
	if err != nil {
		return err
	}
	s.HostAPIEndpoints = endpoints
	if s.FrontDoor {
		dep := &appsv1.Deployment{}
		err := h.cache.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: NameFrontDoor}, dep)
		s.DoorServes = s.Hibernated || err == nil && serves(dep)
	}
	if h.internal {
		b.mu.Lock()
		s.OperatorPods = b.operator
		b.mu.Unlock()
	}
	return nil
}

// memoryAsLimited returns r with its memory request raised to its memory limit, if it has one.
func memoryAsLimited(r corev1.ResourceRequirements) corev1.ResourceRequirements {
	r = *r.DeepCopy()
	if limit, ok := r.Limits[corev1.ResourceMemory]; ok {
		if r.Requests == nil {
			r.Requests = corev1.ResourceList{}
		}
		r.Requests[corev1.ResourceMemory] = limit
	}
	return r
}

// imageFor is the control-plane image of version in the ProviderConfig pcName's settings.
func imageFor(settings *providersv1alpha1.HostedBackendConfig, version, pcName string) (string, error) {
	if image, ok := backend.ImageFor(settings.Images, version); ok {
		return image, nil
	}
	return "", backend.Errorf(backend.ReasonVersionNotSupported,
		"ProviderConfig %s has no control-plane image for Kubernetes %s in spec.hosted.images; add one (make controlplane-image builds cluster-provider/controlplane:v%s)",
		pcName, version, backend.Normalize(version))
}
