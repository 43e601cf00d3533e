package api

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	clustersv1alpha1 "github.com/openmcp-local/cluster-provider/api/clusters/v1alpha1"
)

// TestSpecExamplesAreAccepted creates every YAML example of cluster-providers.md, copied
// verbatim into testdata (the AccessRequest example split into its token and OIDC variants,
// because exactly one of them is allowed), and checks that the server kept every field: nothing
// was rejected and nothing was pruned. It also decodes each strictly into the Go types, so the
// Go API knows every field of the wire format.
func TestSpecExamplesAreAccepted(t *testing.T) {
	examples := []struct {
		file  string
		typed client.Object
	}{
		{"clusterprofile.yaml", &clustersv1alpha1.ClusterProfile{}},
		{"cluster.yaml", &clustersv1alpha1.Cluster{}},
		{"accessrequest-token.yaml", &clustersv1alpha1.AccessRequest{}},
		{"accessrequest-oidc.yaml", &clustersv1alpha1.AccessRequest{}},
	}
	ctx := context.Background()
	for _, ex := range examples {
		t.Run(ex.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", ex.file))
			require.NoError(t, err)
			require.NoError(t, yaml.UnmarshalStrict(data, ex.typed), "the Go types must know every field")

			want := &unstructured.Unstructured{}
			require.NoError(t, yaml.Unmarshal(data, &want.Object))
			ensureNamespace(t, want.GetNamespace())
			require.NoError(t, env.Client.Create(ctx, want.DeepCopy()))
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(want.GroupVersionKind())
			require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(want), got))

			assert.Equal(t, want.Object["spec"], got.Object["spec"], "the server changed or pruned the spec")
			assert.Equal(t, want.GetLabels(), got.GetLabels())
			assert.Equal(t, want.GetAnnotations(), got.GetAnnotations())
			require.NoError(t, env.Client.Delete(ctx, got))
		})
	}
}

func ensureNamespace(t *testing.T, name string) {
	t.Helper()
	if name == "" {
		return
	}
	err := env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// fromYAML decodes a manifest into a new object of the type of into.
func fromYAML[T runtime.Object](t *testing.T, manifest string, into T) T {
	t.Helper()
	require.NoError(t, yaml.UnmarshalStrict([]byte(manifest), into))
	return into
}

// TestSamplesAreAccepted dry-runs every manifest in deploy/samples (and its subfolders but
// config/, which holds the operator's --config files, checked in cmd/cluster-provider) against
// the API server with the project's CRDs: the admission rules accept it and prune or change
// nothing. The server may add defaults (openMCP's: an OIDC request's usernameClaim and
// groupsClaim).
func TestSamplesAreAccepted(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "samples", "*.yaml"))
	require.NoError(t, err)
	more, err := filepath.Glob(filepath.Join("..", "..", "deploy", "samples", "*", "*.yaml"))
	require.NoError(t, err)
	for _, f := range more {
		if filepath.Base(filepath.Dir(f)) != "config" {
			files = append(files, f)
		}
	}
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f))+"/"+filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			want := &unstructured.Unstructured{}
			require.NoError(t, yaml.Unmarshal(data, &want.Object))
			got := want.DeepCopy()
			require.NoError(t, env.Client.Create(context.Background(), got, client.DryRunAll))
			assertKept(t, "spec", want.Object["spec"], got.Object["spec"])
		})
	}
}

// assertKept fails unless got holds every value of want: the server pruned and changed nothing
// (a number compared by its value),
// though it may have added fields (defaults) to objects, in lists too.
func assertKept(t *testing.T, path string, want, got any) {
	t.Helper()
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !assert.True(t, ok, "%s: the server changed an object into %v", path, got) {
			return
		}
		for k, v := range w {
			if gv, ok := g[k]; assert.True(t, ok, "%s.%s: the server pruned the field", path, k) {
				assertKept(t, path+"."+k, v, gv)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !assert.True(t, ok, "%s: the server changed a list into %v", path, got) || !assert.Len(t, g, len(w), path) {
			return
		}
		for i := range w {
			assertKept(t, fmt.Sprintf("%s[%d]", path, i), w[i], g[i])
		}
	default:
		// EqualValues: the YAML's numbers read as float64, the server's integers as int64.
		assert.EqualValues(t, want, got, "%s: the server changed the value", path)
	}
}
