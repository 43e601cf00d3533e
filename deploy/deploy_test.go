// Package deploy holds the operator's manifests; its test is `make deploy-check`: every
// kustomization builds, and the API server (envtest, with the project's CRDs) accepts every
// object it yields in a server-side dry-run apply.
package deploy

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/openmcp-local/cluster-provider/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, &env)) }

// kustomizations are the bases and overlays of deploy/.
var kustomizations = []string{"default", filepath.Join("overlays", "ephemeral")}

func TestKustomizationsApply(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			objs := build(t, dir)
			require.NotEmpty(t, objs)
			ctx := context.Background()
			// Namespaces are created for real: a dry run does not make the namespace the
			// other objects need.
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					err := env.Client.Create(ctx, o.DeepCopy())
					require.True(t, err == nil || apierrors.IsAlreadyExists(err), "%v", err)
				}
			}
			for _, o := range objs {
				err := env.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
					client.DryRunAll, client.FieldOwner("deploy-check"), client.ForceOwnership)
				assert.NoError(t, err, "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
			}
		})
	}
}

// TestDeployment checks what the Deployment of each kustomization promises: leader election,
// probes, a non-root container with a read-only root filesystem, limits, the state volume.
func TestDeployment(t *testing.T) {
	for _, dir := range kustomizations {
		t.Run(dir, func(t *testing.T) {
			var d *appsv1.Deployment
			for _, o := range build(t, dir) {
				if o.GetKind() == "Deployment" {
					d = &appsv1.Deployment{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
				}
			}
			require.NotNil(t, d, "a Deployment")
			pod := d.Spec.Template.Spec
			require.Len(t, pod.Containers, 1)
			c := pod.Containers[0]
			assert.Contains(t, c.Args, "--leader-elect")
			assert.Contains(t, c.Args, "--leader-election-namespace=$(POD_NAMESPACE)")
			assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
			assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
			assert.True(t, *pod.SecurityContext.RunAsNonRoot)
			assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
			assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
			assert.False(t, c.Resources.Limits.Memory().IsZero())
			assert.False(t, c.Resources.Requests.Cpu().IsZero())
			var env []string
			for _, e := range c.Env {
				env = append(env, e.Name)
			}
			assert.Subset(t, env, []string{"POD_NAMESPACE", "PROVIDER_NAME", "ENVIRONMENT"})
			assert.Equal(t, appsv1.RecreateDeploymentStrategyType, d.Spec.Strategy.Type, "never two pods on the claim")
		})
	}
}

// TestStateVolume: deploy/default keeps the clusters' state on its PersistentVolumeClaim (no data
// lost with the pod); the ephemeral overlay keeps it in an emptyDir and yields no claim.
func TestStateVolume(t *testing.T) {
	for _, tc := range []struct {
		dir   string
		claim bool
	}{
		{"default", true},
		{filepath.Join("overlays", "ephemeral"), false},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			var d *appsv1.Deployment
			var claims []string
			for _, o := range build(t, tc.dir) {
				switch o.GetKind() {
				case "Deployment":
					d = &appsv1.Deployment{}
					require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, d))
				case "PersistentVolumeClaim":
					claims = append(claims, o.GetNamespace()+"/"+o.GetName())
				}
			}
			require.NotNil(t, d)
			var state *corev1.Volume
			for i, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == "state" {
					state = &d.Spec.Template.Spec.Volumes[i]
				}
			}
			require.NotNil(t, state, "the state volume")
			if tc.claim {
				require.NotNil(t, state.PersistentVolumeClaim, "the state is on a claim")
				assert.Nil(t, state.EmptyDir)
				assert.Equal(t, []string{"cluster-provider-system/" + state.PersistentVolumeClaim.ClaimName}, claims, "the claim is part of the output")
			} else {
				assert.NotNil(t, state.EmptyDir)
				assert.Nil(t, state.PersistentVolumeClaim)
				assert.Empty(t, claims, "no claim")
			}
		})
	}
}

// build runs kustomize on deploy/<dir>.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err, "kustomize build deploy/%s", dir)
	var out []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		data, err := r.MarshalJSON()
		require.NoError(t, err)
		u := &unstructured.Unstructured{}
		require.NoError(t, u.UnmarshalJSON(data))
		out = append(out, u)
	}
	return out
}
