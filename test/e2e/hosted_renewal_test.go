package e2e

import (
	"context"
	"crypto/tls"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// TestHostedRenewalOnKind renews a hosted control plane's certificates on the kind platform while
// a client polls it every 200 ms with a kubeconfig issued before (issue 31): the operator of
// deploy/hosted runs with leaves valid 10 minutes, renewed 9 minutes before their end, so that a
// renewal comes a minute after the Cluster is made; the API server's Deployment rolls (blue/green)
// by the certificates' checksum, the API server presents a serving certificate that ends later,
// and the client sees no failed request. The operator's flags are put back at the end.
func TestHostedRenewalOnKind(t *testing.T) {
	c, _, pc := hostedTarget(t)
	ctx := context.Background()

	withOperatorArgs(t, c, "--certificate-validity=10m", "--certificate-renew-before=9m")

	cl := readyHostedCluster(t, c, pc, "hosted-renewal-", "renewed")
	user := tokenClient(t, c, cl)

	hns := hosted.NamespaceFor(cl.UID)
	dep := &appsv1.Deployment{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: hns, Name: hosted.NameAPIServer}, dep))
	sum := dep.Spec.Template.Annotations[hosted.AnnotationCertificates]
	first, err := servingNotAfter(cl.Status.APIServer)
	require.NoError(t, err)
	polled := startPollers([]kubernetes.Interface{user}, 200*time.Millisecond)
	start := time.Now()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: hns, Name: hosted.NameAPIServer}, dep))
		assert.NotEqual(ct, sum, dep.Spec.Template.Annotations[hosted.AnnotationCertificates], "renewed certificates")
		assert.Equal(ct, dep.Generation, dep.Status.ObservedGeneration)
		assert.Equal(ct, int32(1), dep.Status.UpdatedReplicas)
		assert.Equal(ct, int32(1), dep.Status.Replicas, "the old pod is gone")
		assert.Equal(ct, int32(1), dep.Status.AvailableReplicas)
		now, err := servingNotAfter(cl.Status.APIServer)
		if assert.NoError(ct, err) {
			assert.True(ct, now.After(first), "the API server presents the renewed certificate")
		}
	}, 6*time.Minute, poll, "a renewal rolled the API server")
	during := summarize(polled.stop())
	t.Logf("FIGURE hosted certificate renewal: the API server's Deployment rolled %.1f s after polling began; a client polling every 200 ms with the kubeconfig issued before: %s",
		time.Since(start).Seconds(), during)
	for _, e := range during.errors {
		t.Errorf("during the renewal: %v", e)
	}
}

// withOperatorArgs rolls the operator of deploy/hosted out with extra flags, and back to its own
// when t ends.
func withOperatorArgs(t *testing.T, c client.Client, extra ...string) {
	t.Helper()
	ctx := context.Background()
	op := &appsv1.Deployment{}
	require.NoError(t, c.Get(ctx, client.ObjectKey{Namespace: envOr("E2E_OPERATOR_NAMESPACE", "cluster-provider-system"), Name: "cluster-provider"}, op))
	args := slices.Clone(op.Spec.Template.Spec.Containers[0].Args)
	setArgs := func(a []string) {
		t.Helper()
		// The Deployment controller writes the Deployment's status meanwhile.
		testenv.Update(ctx, t, c, op, func(op *appsv1.Deployment) { op.Spec.Template.Spec.Containers[0].Args = a })
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(op), op))
			assert.Equal(ct, op.Generation, op.Status.ObservedGeneration)
			assert.Equal(ct, *op.Spec.Replicas, op.Status.UpdatedReplicas)
			assert.Equal(ct, op.Status.Replicas, op.Status.UpdatedReplicas, "old pods gone")
			assert.Equal(ct, *op.Spec.Replicas, op.Status.AvailableReplicas)
		}, 5*time.Minute, poll, "the operator rolled out with %v", a)
	}
	setArgs(append(slices.Clone(args), extra...))
	t.Cleanup(func() { setArgs(args) })
}

// servingNotAfter is the end of the certificate the API server at endpoint presents (not
// verified: only its dates are read).
func servingNotAfter(endpoint string) (time.Time, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return time.Time{}, err
	}
	conn, err := tls.DialWithDialer(&netDialer, "tcp", u.Host, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // dates only
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].NotAfter, nil
}

var netDialer = net.Dialer{Timeout: 10 * time.Second}
