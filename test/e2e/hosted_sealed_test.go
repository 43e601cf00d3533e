package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
	"github.com/openmcp-local/cluster-provider/api/common"
	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/encryption"
	"github.com/openmcp-local/cluster-provider/backend/hosted"
	"github.com/openmcp-local/cluster-provider/controllers/cluster"
	"github.com/openmcp-local/cluster-provider/test/testenv"
)

// encryptionOf is the encryption part of cl's status.providerStatus.
func encryptionOf(ct require.TestingT, cl *clustersv1alpha1.Cluster) encryption.Status {
	var ps struct {
		Encryption *encryption.Status `json:"encryption"`
	}
	require.NotNil(ct, cl.Status.ProviderStatus)
	require.NoError(ct, json.Unmarshal(cl.Status.ProviderStatus.Raw, &ps))
	require.NotNil(ct, ps.Encryption, "status.providerStatus.encryption")
	return *ps.Encryption
}

// awaitEncrypted waits until every Secret of cl is written with a key other than not (and no
// key is staged), and returns that key.
func awaitEncrypted(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster, not string, within time.Duration) string {
	t.Helper()
	var key string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		cur := &clustersv1alpha1.Cluster{}
		require.NoError(ct, c.Get(context.Background(), client.ObjectKeyFromObject(cl), cur))
		enc := encryptionOf(ct, cur)
		assert.True(ct, enc.Rewritten && enc.Staged == "" && enc.Key != "" && enc.Key != not, "encryption: %+v", enc)
		key = enc.Key
	}, within, poll, "every Secret of %s written with a new key", cl.Name)
	return key
}

// rawEtcdValue is etcd's value of key, read in etcd's own pod of cl's control plane with etcdctl
// of the control-plane image and etcd's certificate.
func rawEtcdValue(t *testing.T, kubeconfig string, cl *clustersv1alpha1.Cluster, key string) string {
	t.Helper()
	const pki = "/etc/etcd/pki"
	out, err := kubectl(t, kubeconfig, "-n", hosted.NamespaceFor(cl.UID), "exec", "etcd-0", "-c", "etcd", "--",
		"etcdctl", "--endpoints=https://127.0.0.1:2379", "--cacert="+pki+"/ca.crt", "--cert="+pki+"/server.crt", "--key="+pki+"/server.key",
		"get", key, "--print-value-only")
	require.NoError(t, err, "%s", out)
	require.NotEmpty(t, out, "etcd has %s", key)
	return out
}

// checkSealed is the tenant isolation of a hosted control plane on the kind platform (issue 33):
// a Secret written through an issued kubeconfig is in etcd encrypted with the cluster's key, no
// plain text of it; the audit log, streamed by the API server's audit sidecar, names the user who
// wrote it and never holds the Secret's data; a key rotation (kubectl annotate) stages the new key,
// rolls the API servers, and rewrites the Secret with it, with no request failing to read it.
func checkSealed(t *testing.T, c client.Client, kubeconfig string, cl *clustersv1alpha1.Cluster) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	first := awaitEncrypted(t, c, cl, "", 3*time.Minute)
	t.Logf("FIGURE hosted encryption at rest: every Secret rewritten with key %s %.1f s after Ready at the latest", first, time.Since(start).Seconds())

	ar := &clustersv1alpha1.AccessRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: cl.Namespace, Name: cl.Name + "-secrets"},
		Spec: clustersv1alpha1.AccessRequestSpec{
			ClusterRef: &common.ObjectReference{Name: cl.Name, Namespace: cl.Namespace},
			Token: &clustersv1alpha1.TokenConfig{Permissions: []clustersv1alpha1.PermissionsRequest{{
				Namespace: "default",
				Rules:     []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create", "get"}}},
			}}},
		},
	}
	require.NoError(t, c.Create(ctx, ar))
	user := grantedClient(t, c, ar)
	var review *authenticationv1.SelfSubjectReview
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		review, err = user.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		assert.NoError(ct, err)
	}, time.Minute, poll, "the issued kubeconfig answers")
	username := review.Status.UserInfo.Username
	require.NotEmpty(t, username)

	value := "sealed-" + rand.String(16)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "tenant-" + rand.String(5)}, StringData: map[string]string{"password": value}}
	_, err := user.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = user.CoreV1().Secrets("default").Get(ctx, secret.Name, metav1.GetOptions{})
	require.NoError(t, err)
	etcdKey := "/registry/secrets/default/" + secret.Name
	raw := rawEtcdValue(t, kubeconfig, cl, etcdKey)
	assert.True(t, strings.HasPrefix(raw, encryption.Prefix+first+":"), "etcd's value begins %.40q", raw)
	assert.NotContains(t, raw, value, "no plain text of the Secret in etcd")

	// The audit log names the user and the Secret, never its data.
	ns := hosted.NamespaceFor(cl.UID)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		out, err := kubectl(t, kubeconfig, "-n", ns, "logs", "deploy/"+hosted.NameAPIServer, "-c", "audit")
		require.NoError(ct, err, "%s", out)
		found := false
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, `"name":"`+secret.Name+`"`) && strings.Contains(line, `"verb":"get"`) {
				found = true
				assert.Contains(ct, line, fmt.Sprintf(`"username":%q`, username), "the audit event names who wrote it")
			}
		}
		assert.True(ct, found, "an audit event of the Secret read")
		assert.NotContains(ct, out, value, "the audit log never holds a Secret's data")
	}, time.Minute, poll, "the audit sidecar streams the audit log")

	// A rotation: staged, rolled, rewritten.
	start = time.Now()
	out, err := kubectl(t, kubeconfig, "-n", cl.Namespace, "annotate", "cluster", cl.Name, backend.AnnotationRotateEncryptionKey+"="+time.Now().UTC().Format(time.RFC3339), "--overwrite")
	require.NoError(t, err, "%s", out)
	second := awaitEncrypted(t, c, cl, first, 5*time.Minute)
	t.Logf("FIGURE hosted key rotation (staged, two rolls of the API server, every Secret rewritten): %.1f s after kubectl annotate", time.Since(start).Seconds())
	raw = rawEtcdValue(t, kubeconfig, cl, etcdKey)
	assert.True(t, strings.HasPrefix(raw, encryption.Prefix+second+":"), "rewritten with the new key: %.40q", raw)
	got, err := user.CoreV1().Secrets("default").Get(ctx, secret.Name, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, value, string(got.Data["password"]))
}

// checkExposure is the exposure of a hosted control plane on the kind platform (issue 33): its
// endpoint is one node's address (no externalHost): condition EndpointResilient says so; source
// ranges set on the ProviderConfig (with that address as externalHost, so the endpoint stays) reach
// the running control plane: its external Service keeps clients' addresses and its NetworkPolicy
// admits 6443 only from the ranges and the host's pods, and EndpointResilient turns True. The
// kind platform's network plugin does not enforce NetworkPolicies: their content is what is checked.
func checkExposure(t *testing.T, c client.Client, cl *clustersv1alpha1.Cluster, pcName string) {
	t.Helper()
	ctx := context.Background()
	cur := &clustersv1alpha1.Cluster{}
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cur))
		cond := meta.FindStatusCondition(cur.Status.Conditions, cluster.ConditionEndpointResilient)
		if assert.NotNil(ct, cond) {
			assert.Equal(ct, metav1.ConditionFalse, cond.Status)
			assert.Equal(ct, backend.ReasonSingleNodeEndpoint, cond.Reason)
		}
	}, time.Minute, poll, "EndpointResilient False on one node's address")
	assert.Equal(t, common.PhaseReady, cur.Status.Phase, "a warning only")

	var ps struct {
		ExternalHost string `json:"externalHost"`
	}
	require.NoError(t, json.Unmarshal(cur.Status.ProviderStatus.Raw, &ps))
	require.NotEmpty(t, ps.ExternalHost)
	pc := &providersv1alpha1.ProviderConfig{ObjectMeta: metav1.ObjectMeta{Name: pcName}}
	testenv.Update(ctx, t, c, pc, func(pc *providersv1alpha1.ProviderConfig) {
		pc.Spec.Hosted.ExternalHost = ps.ExternalHost
		pc.Spec.Hosted.AllowedSourceRanges = []string{"198.51.100.0/24"}
	})

	ns := hosted.NamespaceFor(cl.UID)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		svc := &corev1.Service{}
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: hosted.NameExternal}, svc))
		assert.Equal(ct, corev1.ServiceExternalTrafficPolicyLocal, svc.Spec.ExternalTrafficPolicy)
		np := &networkingv1.NetworkPolicy{}
		require.NoError(ct, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: hosted.NameAPIServer}, np))
		if assert.Len(ct, np.Spec.Ingress, 1) && assert.Len(ct, np.Spec.Ingress[0].From, 2) {
			assert.Equal(ct, "198.51.100.0/24", np.Spec.Ingress[0].From[0].IPBlock.CIDR)
			// The operator's pods (it runs in the platform): its namespace and labels, no other pod.
			op := np.Spec.Ingress[0].From[1]
			if assert.NotNil(ct, op.NamespaceSelector) && assert.NotNil(ct, op.PodSelector) {
				assert.NotEmpty(ct, op.NamespaceSelector.MatchLabels[corev1.LabelMetadataName])
				assert.NotEmpty(ct, op.PodSelector.MatchLabels)
			}
		}
		require.NoError(ct, c.Get(ctx, client.ObjectKeyFromObject(cl), cur))
		cond := meta.FindStatusCondition(cur.Status.Conditions, cluster.ConditionEndpointResilient)
		if assert.NotNil(ct, cond) {
			assert.Equal(ct, metav1.ConditionTrue, cond.Status)
		}
		assert.Equal(ct, common.PhaseReady, cur.Status.Phase)
	}, 2*time.Minute, poll, "the source ranges reach the running control plane")

	testenv.Update(ctx, t, c, pc, func(pc *providersv1alpha1.ProviderConfig) { pc.Spec.Hosted.AllowedSourceRanges = nil })
}
