package hosted

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	apiserverv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"

	providersv1alpha1 "github.com/openmcp-local/cluster-provider/api/providers/v1alpha1"
	"github.com/openmcp-local/cluster-provider/backend"
	"github.com/openmcp-local/cluster-provider/backend/authconfig"
)

func TestSetJWTAuthenticators(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("oidc")
	h.ensure(t, cl)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	// A pod of the Deployment, as the ReplicaSet controller would make it (envtest has none).
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	pod := &corev1.Pod{ObjectMeta: *dep.Spec.Template.ObjectMeta.DeepCopy(), Spec: *dep.Spec.Template.Spec.DeepCopy()}
	pod.Namespace, pod.Name = ns, "apiserver-1"
	require.NoError(t, env.Client.Create(t.Context(), pod))

	jwt := []apiserverv1.JWTAuthenticator{{
		Issuer:        apiserverv1.Issuer{URL: "https://idp.example.com", Audiences: []string{"cp"}},
		ClaimMappings: apiserverv1.ClaimMappings{Username: apiserverv1.PrefixedClaimOrExpression{Claim: "sub", Prefix: ptrTo("oidc:")}},
	}}
	want, err := authconfig.Render(jwt)
	require.NoError(t, err)
	// The API server does not run here: Applied cannot read its metrics, but the configuration
	// and the pod's annotation are written first.
	require.Eventually(t, func() bool {
		applied, err := h.b.SetJWTAuthenticators(t.Context(), cl, jwt)
		assert.False(t, applied)
		assert.Error(t, err)
		got := get(t, &corev1.Pod{}, ns, pod.Name)
		return got.Annotations[AnnotationAuthn] == hashOf([]string{string(want)})
	}, 10*time.Second, 50*time.Millisecond, "the pod is annotated so that the kubelet refreshes its volume at once")
	assert.Equal(t, string(want), get(t, &corev1.ConfigMap{}, ns, NameAuthn).Data[authnKey])
}

// TestAuditLive: the ProviderConfig's audit switch reaches an existing control plane: its API
// server's Deployment rolls with the audit sidecar and flags, and without them when turned off;
// AdminConfig of a new operator (no credentials in memory yet) changes nothing of it.
func TestAuditLive(t *testing.T) {
	h := startBackend(t)
	cl := newCluster("audited")
	want := backend.Want{Version: "1.37.1"}
	h.ensureWant(t, cl, want)
	h.etcdUp(t, cl)
	ns := NamespaceFor(cl.UID)
	audited := func() (sidecar, flag bool) {
		pod := get(t, &appsv1.Deployment{}, ns, NameAPIServer).Spec.Template.Spec
		for _, c := range pod.Containers {
			sidecar = sidecar || c.Name == containerAudit
		}
		return sidecar, slices.ContainsFunc(pod.InitContainers[0].Args, func(a string) bool { return strings.HasPrefix(a, "--audit-log-path=") })
	}
	h.ensureWant(t, cl, want)
	sidecar, flag := audited()
	assert.True(t, sidecar && flag, "audit on: sidecar %v, flag %v", sidecar, flag)
	assert.Contains(t, get(t, &corev1.ConfigMap{}, ns, NameAuditPolicy).Data[auditPolicyKey], "level: Metadata")

	// A new operator's first call for the control plane may be AdminConfig (an AccessRequest
	// reconciled before its Cluster): it leaves the workloads as they are.
	dep := get(t, &appsv1.Deployment{}, ns, NameAPIServer)
	h2 := startBackend(t)
	h2.pc = h.pc
	_, err := h2.b.AdminConfig(t.Context(), cl)
	require.NoError(t, err)
	assert.Equal(t, dep.Generation, get(t, &appsv1.Deployment{}, ns, NameAPIServer).Generation, "AdminConfig rolls nothing")

	h.pc.Spec.Audit = &providersv1alpha1.AuditPolicy{Disabled: true}
	h.ensureWant(t, cl, want)
	sidecar, flag = audited()
	assert.False(t, sidecar || flag, "audit off: sidecar %v, flag %v", sidecar, flag)

	h.pc.Spec.Audit = nil
	h.ensureWant(t, cl, want)
	sidecar, flag = audited()
	assert.True(t, sidecar && flag, "on again")
}

func TestAPIServerDeployment(t *testing.T) {
	s := testSpec()
	dep := s.APIServerDeployment()
	assert.Equal(t, int32(1), *dep.Spec.Replicas)
	ru := dep.Spec.Strategy.RollingUpdate
	assert.Equal(t, "100%", ru.MaxSurge.String(), "blue/green: the new pod starts before the old goes")
	assert.Equal(t, 0, ru.MaxUnavailable.IntValue())
	assert.Equal(t, Rendered(dep), dep.Annotations[AnnotationInputs])

	pod := dep.Spec.Template.Spec
	assert.False(t, *pod.AutomountServiceAccountToken, "the control plane does not call its host")
	assert.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.NotNil(t, pod.Affinity.PodAntiAffinity)
	assert.Equal(t, corev1.LabelHostname, pod.Affinity.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey)
	assert.Equal(t, corev1.LabelHostname, pod.TopologySpreadConstraints[0].TopologyKey)

	require.Len(t, pod.InitContainers, 1)
	assert.Equal(t, containerAPIServer, pod.InitContainers[0].Name, "the API server starts first, as a sidecar")
	assert.Equal(t, corev1.ContainerRestartPolicyAlways, *pod.InitContainers[0].RestartPolicy)
	api := container(t, pod, containerAPIServer)
	assert.Equal(t, s.Image, api.Image)
	assert.Equal(t, corev1.PullIfNotPresent, api.ImagePullPolicy, "images loaded without a registry")
	assert.Equal(t, []string{"/usr/local/bin/kube-apiserver"}, api.Command)
	f := flags(t, api.Args)
	assert.Equal(t, "https://etcd."+s.Namespace+".svc:2379", f["--etcd-servers"])
	assert.Equal(t, "10s", f["--shutdown-delay-duration"], "a rolled-out API server serves on while the Services forget it")
	assert.Greater(t, *dep.Spec.Template.Spec.TerminationGracePeriodSeconds, int64(10), "and has time to finish after that")
	assert.Equal(t, "/etc/kubernetes/pki/etcd-client.crt", f["--etcd-certfile"])
	assert.Equal(t, "198.18.0.0/16", f["--service-cluster-ip-range"])
	assert.Equal(t, "/etc/kubernetes/authn/authn.yaml", f["--authentication-config"])
	assert.Equal(t, "https://kubernetes.default.svc.cluster.local", f["--service-account-issuer"])
	assert.Equal(t, "$(POD_IP)", f["--advertise-address"])
	assert.Equal(t, "6443", f["--secure-port"])
	assert.Equal(t, "true", f["--enable-priority-and-fairness"])
	assert.Equal(t, "RBAC", f["--authorization-mode"])
	// Probes: no initial delay; the startup probe asks every second.
	for _, p := range []*corev1.Probe{api.StartupProbe, api.ReadinessProbe, api.LivenessProbe} {
		require.NotNil(t, p)
		assert.Zero(t, p.InitialDelaySeconds)
		assert.Equal(t, corev1.URISchemeHTTPS, p.HTTPGet.Scheme)
	}
	assert.Equal(t, int32(1), api.StartupProbe.PeriodSeconds)
	assert.Equal(t, "/readyz", api.ReadinessProbe.HTTPGet.Path)
	assert.True(t, *api.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, resource.MustParse("768Mi"), api.Resources.Limits[corev1.ResourceMemory])
	assert.Equal(t, "limits.memory", envFrom(api, "GOMEMLIMIT"))

	kcm := container(t, pod, containerKCM)
	f = flags(t, kcm.Args)
	assert.Equal(t, "true", f["--leader-elect"], "a rollout runs two for a moment")
	assert.Equal(t, "40s", f["--leader-elect-renew-deadline"], "a busy node does not make it exit")
	assert.Equal(t, "/etc/kubernetes/kcm/ca.key", f["--cluster-signing-key-file"])
	assert.Nil(t, kcm.ReadinessProbe, "a restarting controller manager does not take the API server out of its Service")
	assert.NotNil(t, kcm.LivenessProbe)

	// The API server's container sees no CA key: only the controller manager signs.
	for _, v := range pod.Volumes {
		if v.Name != "pki" {
			continue
		}
		for _, src := range v.Projected.Sources {
			for _, it := range src.Secret.Items {
				assert.NotEqual(t, "ca.key", it.Key, "%s", src.Secret.Name)
			}
		}
	}
}

func envFrom(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			return e.ValueFrom.ResourceFieldRef.Resource
		}
	}
	return ""
}

// TestAuditAndEncryptionPlan: with Spec.Audit the API server writes its audit log (the policy
// of its ConfigMap, Metadata only) onto a size-capped volume which a sidecar of the control-plane
// image streams to its output; with Spec.Encryption it reads its EncryptionConfiguration from the
// encryption Secret, and the pod template carries its checksum. Without them, neither.
func TestAuditAndEncryptionPlan(t *testing.T) {
	for _, c := range []struct {
		name              string
		audit, ha         bool
		encryption        string
		wantObjectsExtras int
	}{
		{name: "neither"},
		{name: "audit", audit: true, wantObjectsExtras: 1},
		{name: "audit, highly available", audit: true, ha: true, wantObjectsExtras: 1},
		{name: "encryption", encryption: "abc123"},
		{name: "both", audit: true, encryption: "abc123", wantObjectsExtras: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := testSpec()
			s := testSpec()
			s.Audit, s.Encryption = c.audit, c.encryption
			if c.ha {
				base.HighAvailability, base.StorageClassName = true, "fast"
				s.HighAvailability, s.StorageClassName = true, "fast"
			}
			assert.Len(t, s.Objects(), len(base.Objects())+c.wantObjectsExtras)
			dep := s.APIServerDeployment()
			pod := dep.Spec.Template.Spec
			f := flags(t, container(t, pod, containerAPIServer).Args)
			names := func() (n []string) {
				for _, c := range pod.Containers {
					n = append(n, c.Name)
				}
				return n
			}()

			if c.audit {
				assert.Equal(t, "/etc/kubernetes/audit/policy.yaml", f["--audit-policy-file"])
				assert.Equal(t, "/var/log/kubernetes/audit/audit.log", f["--audit-log-path"])
				assert.Equal(t, "50", f["--audit-log-maxsize"])
				sidecar := container(t, pod, containerAudit)
				assert.Equal(t, s.Image, sidecar.Image)
				assert.Equal(t, []string{"/usr/local/bin/audit-log", "--file=/var/log/kubernetes/audit/audit.log"}, sidecar.Command)
				assert.True(t, *sidecar.SecurityContext.ReadOnlyRootFilesystem)
				assert.True(t, sidecar.VolumeMounts[0].ReadOnly, "the sidecar only reads the log")
				req, limit := sidecar.Resources.Requests[corev1.ResourceMemory], sidecar.Resources.Limits[corev1.ResourceMemory]
				assert.Equal(t, c.ha, req.Equal(limit), "highly available: memory requested as limited, as every container of it (%s of %s)", req.String(), limit.String())
				var vol *corev1.Volume
				for i := range pod.Volumes {
					if pod.Volumes[i].Name == "audit-log" {
						vol = &pod.Volumes[i]
					}
				}
				require.NotNil(t, vol)
				assert.Equal(t, "300Mi", vol.EmptyDir.SizeLimit.String(), "five files of 50 MB and room")
				cm := s.AuditPolicyConfigMap()
				assert.Contains(t, cm.Data[auditPolicyKey], "level: Metadata")
				assert.NotContains(t, cm.Data[auditPolicyKey], "RequestResponse", "no body is ever logged")
			} else {
				assert.NotContains(t, f, "--audit-policy-file")
				assert.NotContains(t, names, containerAudit)
			}

			mounted := false
			for _, v := range pod.Volumes {
				if v.Name == "pki" {
					for _, src := range v.Projected.Sources {
						mounted = mounted || src.Secret.Name == SecretEncryption
					}
				}
			}
			assert.Equal(t, c.encryption != "", mounted)
			assert.Equal(t, c.encryption, dep.Spec.Template.Annotations[AnnotationEncryption])
			if c.encryption != "" {
				assert.Equal(t, "/etc/kubernetes/pki/encryption-config.yaml", f["--encryption-provider-config"])
			} else {
				assert.NotContains(t, f, "--encryption-provider-config")
			}
			if c.audit || c.encryption != "" {
				assert.NotEqual(t, Rendered(base.APIServerDeployment()), Rendered(dep), "a change rolls the API servers")
			}
		})
	}
}
