package hosted

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/openmcp-local/cluster-provider/backend"
)

// TestExposure: an endpoint on spec.hosted.externalHost or a load balancer survives a node's
// loss; the default, one node's address, is reported as not resilient (a warning).
func TestExposure(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("exposure")
	st := h.ensure(t, cl)
	require.NotNil(t, st.Part(backend.PartEndpoint))
	assert.True(t, st.Part(backend.PartEndpoint).Ready)
	assert.Equal(t, backend.ReasonExternalHost, st.Part(backend.PartEndpoint).Reason)

	h.pc.Spec.Hosted.ExternalHost = ""
	st = h.ensure(t, cl)
	assert.False(t, st.Part(backend.PartEndpoint).Ready)
	assert.Equal(t, backend.ReasonSingleNodeEndpoint, st.Part(backend.PartEndpoint).Reason)
	assert.Contains(t, st.Part(backend.PartEndpoint).Message, "The endpoint 203.0.113.10 is one node's address")
	assert.Contains(t, st.Part(backend.PartEndpoint).Message, "Set spec.hosted.externalHost")

	h.pc.Spec.Hosted.Exposure = corev1.ServiceTypeLoadBalancer
	lb := newCluster("exposure-lb")
	st = h.ensure(t, lb)
	assert.True(t, st.Part(backend.PartEndpoint).Ready)
	assert.Equal(t, backend.ReasonLoadBalancer, st.Part(backend.PartEndpoint).Reason)
}

func TestExternalService(t *testing.T) {
	s := testSpec()
	assert.Equal(t, corev1.ServiceTypeNodePort, s.ExternalService().Spec.Type, "NodePort by default")
	s.Exposure = corev1.ServiceTypeLoadBalancer
	assert.Equal(t, corev1.ServiceTypeLoadBalancer, s.ExternalService().Spec.Type)
	assert.Equal(t, corev1.ServiceType(""), corev1.ServiceType(s.InternalService().Spec.Type), "ClusterIP")
	assert.Equal(t, int32(443), s.InternalService().Spec.Ports[0].Port)
	assert.True(t, s.EtcdService().Spec.PublishNotReadyAddresses)
}

func TestServingHosts(t *testing.T) {
	h := ServingHosts("hcp-x", "198.18.0.0/16", []string{"172.18.0.3", ""})
	for _, want := range []string{"apiserver.hcp-x.svc", "127.0.0.1", "198.18.0.1", "kubernetes.default.svc", "172.18.0.3"} {
		assert.Contains(t, h, want)
	}
	assert.NotContains(t, h, "")
}
