// Package policy embeds the admission policies of the platform cluster (operator.yaml: what the
// operator's own identity may write, and that only it makes and labels its namespaces;
// references.yaml: a reference across namespaces needs the verb use), so that `cluster-provider init` and the tests
// apply exactly the files every deploy/ base ships.
package policy

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

//go:embed operator.yaml references.yaml
var files embed.FS

// Objects returns the objects of the embedded files, in file order then document order.
func Objects() ([]*unstructured.Unstructured, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []*unstructured.Unstructured
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			u := &unstructured.Unstructured{}
			if err := dec.Decode(&u.Object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				return nil, fmt.Errorf("decoding embedded policy %s: %w", name, err)
			}
			if len(u.Object) == 0 {
				continue // an empty document
			}
			out = append(out, u)
		}
	}
	return out, nil
}
