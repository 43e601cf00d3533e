// Package crds embeds the CustomResourceDefinitions generated into this folder by
// `make generate`, so that the binary (`cluster-provider init`) and the tests install exactly the
// files that are shipped. It must not contain hand-written CRDs.
package crds

import (
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// crdFiles matches the generated CRDs (<group>_<plural>.yaml), not kustomization.yaml.
const crdFiles = "*_*.yaml"

//go:embed *_*.yaml
var files embed.FS

// CRDs returns the embedded CustomResourceDefinitions, sorted by file name.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, crdFiles)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(names))
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decoding embedded CRD %s: %w", name, err)
		}
		out = append(out, crd)
	}
	return out, nil
}
