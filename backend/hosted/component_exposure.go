package hosted

import (
	"context"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"k8s.io/apimachinery/pkg/util/intstr"
	"slices"
)

// exposureComponent finds the API server's external endpoint (Service apiserver-external, made
// by namespaceComponent) and records its host: before the PKI, whose serving certificate names it.
type exposureComponent struct{}

func (exposureComponent) name() string { return "exposure" }

func (exposureComponent) step(ctx context.Context, sc *scope) (result, error) {
	external, waiting, err := sc.b.external(ctx, sc.h, sc.s, sc.settings, &sc.ps)
	if err != nil {
		return result{}, err
	}
	sc.external, sc.waiting = external, waiting
	return result{waiting: waiting}, nil
}

// external finds the API server's external host and port. ps.ExternalHost is kept once set;
// waiting says why there is none yet (a load balancer without an address).
func (b *Backend) external(ctx context.Context, h *host, s *Spec, settings *providersv1alpha1.HostedBackendConfig, ps *providerStatus) (string, string, error) {
	svc := &corev1.Service{}
	key := client.ObjectKey{Namespace: s.Namespace, Name: NameExternal}
	err := h.cache.Get(ctx, key, svc)
	if apierrors.IsNotFound(err) { // just made: not in the cache yet
		err = h.client.Get(ctx, key, svc)
	}
	if err != nil {
		return "", "", fmt.Errorf("reading Service %s/%s: %w", s.Namespace, NameExternal, err)
	}
	if s.exposure() == corev1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a := in.IP + in.Hostname; a != "" {
				ps.ExternalHost = a
				return externalURL(a, PortService), "", nil
			}
		}
		return "", fmt.Sprintf("Service %s/%s (LoadBalancer) has no address yet", s.Namespace, NameExternal), nil
	}
	var port int32
	for _, p := range svc.Spec.Ports {
		port = p.NodePort
	}
	if port == 0 {
		return "", fmt.Sprintf("Service %s/%s has no node port yet", s.Namespace, NameExternal), nil
	}
	if settings.ExternalHost != "" {
		ps.ExternalHost = settings.ExternalHost
	}
	if ps.ExternalHost == "" {
		host, err := firstNodeAddress(ctx, h.client)
		if err != nil {
			return "", "", err
		}
		ps.ExternalHost = host
	}
	return externalURL(ps.ExternalHost, port), "", nil
}

// exposure says whether the endpoint of s survives the loss of one node: not while it is the
// address of the host's first node, which a NodePort control plane without externalHost gets.
func exposure(s *Spec, settings *providersv1alpha1.HostedBackendConfig, host, pcName string) *backend.Part {
	switch {
	case s.exposure() == corev1.ServiceTypeLoadBalancer:
		return &backend.Part{Ready: true, Reason: backend.ReasonLoadBalancer, Message: "The endpoint is the load balancer of Service " + s.Namespace + "/" + NameExternal + "."}
	case settings.ExternalHost != "":
		return &backend.Part{Ready: true, Reason: backend.ReasonExternalHost, Message: fmt.Sprintf(
			"The endpoint is spec.hosted.externalHost %s of ProviderConfig %s, which the platform keeps reaching a node.", settings.ExternalHost, pcName)}
	}
	return &backend.Part{Reason: backend.ReasonSingleNodeEndpoint, Message: fmt.Sprintf(
		"The endpoint %s is one node's address (spec.hosted.externalHost of ProviderConfig %s is not set): while that node is down, clients cannot reach this API server. Set spec.hosted.externalHost to a load balancer or DNS name in front of the nodes, or use exposure LoadBalancer.",
		host, pcName)}
}

// firstNodeAddress is the InternalIP of the host cluster's first node by name.
func firstNodeAddress(ctx context.Context, c client.Client) (string, error) {
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return "", fmt.Errorf("listing the host cluster's nodes for the clusters' external address (or set spec.hosted.externalHost): %w", err)
	}
	sort.Slice(nodes.Items, func(i, j int) bool { return nodes.Items[i].Name < nodes.Items[j].Name })
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				return a.Address, nil
			}
		}
	}
	return "", errors.New("no node of the host cluster has an InternalIP: set spec.hosted.externalHost")
}

// InternalService is the API server's Service inside the host cluster (apiserver-internal).
func (s *Spec) InternalService() *corev1.Service {
	return &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: s.meta(NameAPIServer, ComponentAPIServer),
		Spec: corev1.ServiceSpec{
			Selector: s.selector(ComponentAPIServer),
			Ports:    []corev1.ServicePort{{Name: "https", Port: PortService, TargetPort: intstr.FromInt32(PortAPIServer), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// ExternalService is the API server's Service for clients outside the host cluster
// (apiserver-external): NodePort or LoadBalancer.
func (s *Spec) ExternalService() *corev1.Service {
	svc := &corev1.Service{
		TypeMeta:   typeMeta("v1", "Service"),
		ObjectMeta: s.meta(NameExternal, ComponentAPIServer),
		Spec: corev1.ServiceSpec{
			Type:     s.exposure(),
			Selector: s.selector(s.endpointComponent()),
			Ports:    []corev1.ServicePort{{Name: "https", Port: PortService, TargetPort: intstr.FromInt32(PortAPIServer), Protocol: corev1.ProtocolTCP}},
		},
	}
	if len(s.AllowedSourceRanges) > 0 {
		// The client's address reaches the pod (no SNAT), for the NetworkPolicy to check; only
		// nodes running an API server answer.
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
			svc.Spec.LoadBalancerSourceRanges = slices.Clone(s.AllowedSourceRanges)
		}
	}
	return svc
}

// endpointComponent is what the external Service selects: the front door when the control plane
// has one that serves (Spec.DoorServes), else the API servers.
func (s *Spec) endpointComponent() string {
	if s.FrontDoor && s.DoorServes {
		return ComponentFrontDoor
	}
	return ComponentAPIServer
}

func (s *Spec) exposure() corev1.ServiceType {
	if s.Exposure == corev1.ServiceTypeLoadBalancer {
		return corev1.ServiceTypeLoadBalancer
	}
	return corev1.ServiceTypeNodePort
}
