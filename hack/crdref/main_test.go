package main

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

const widget = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Cluster
  names: {kind: Widget, plural: widgets, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        description: Widget is a test kind.
        properties:
          apiVersion: {type: string}
          kind: {type: string}
          metadata: {type: object}
          spec:
            type: object
            required: [size]
            x-kubernetes-validations:
            - {rule: "self.size > 0", message: spec.size must be positive}
            properties:
              size:
                type: integer
                minimum: 1
                maximum: 10
                default: 3
                description: |-
                  Size of the widget
                  in <units> | pieces.
              mode: {type: string, enum: [Fast, Slow], description: Mode is ` + "`Fast`" + ` or <b>.}
              storage:
                x-kubernetes-int-or-string: true
                pattern: ^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$
              images:
                type: object
                additionalProperties: {type: string}
              parts:
                type: array
                items:
                  type: object
                  properties:
                    name: {type: string, maxLength: 8, default: ""}
`

func TestRender(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict([]byte(widget), crd); err != nil {
		t.Fatal(err)
	}
	page, err := render(crd, "deploy/crds/widgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# Widget reference",
		"Group `example.com`, kind `Widget`, resource `widgets`, cluster-scoped, short names `wd`.",
		"## example.com/v1\n\nWidget is a test kind.\n",
		"| `spec` | object | rule: spec.size must be positive |  |",
		"| `spec.size` | integer | required; default `3`; minimum 1; maximum 10 | Size of the widget in &lt;units&gt; \\| pieces. |",
		"| `spec.mode` | string | one of `Fast`, `Slow` | Mode is `Fast` or &lt;b&gt;. |",
		"| `spec.images` | map[string]string |  |  |",
		"| `spec.storage` | quantity |  |  |",
		"| `spec.parts` | []object |  |  |",
		"| `spec.parts[].name` | string | default `\"\"`; max length 8 |  |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	for _, unwanted := range []string{"`apiVersion`", "`kind`", "`metadata`"} {
		if strings.Contains(page, "| "+unwanted+" |") {
			t.Errorf("page has a row for %s:\n%s", unwanted, page)
		}
	}
}
