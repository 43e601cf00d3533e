package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// applyFieldManager owns the fields that apply sets.
const applyFieldManager = "devcluster"

// apply server-side applies every object in files, in order, forcing ownership: applying the
// same files again changes nothing.
func apply(ctx context.Context, kubeconfig string, files []string, stdout io.Writer) error {
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		cfg, err = ctrl.GetConfig()
	}
	if err != nil {
		return fmt.Errorf("loading the kubeconfig: %w", err)
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	for _, file := range files {
		objs, err := readObjects(file)
		if err != nil {
			return err
		}
		for _, u := range objs {
			if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(applyFieldManager), client.ForceOwnership); err != nil {
				return fmt.Errorf("%s: applying %s %s: %w", file, u.GetKind(), u.GetName(), err)
			}
			fmt.Fprintf(stdout, "%s/%s serverside-applied\n", strings.ToLower(u.GetKind()), u.GetName())
		}
	}
	return nil
}

// readObjects decodes the YAML (or JSON) documents of file, skipping empty ones.
func readObjects(file string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("%s: an object without apiVersion or kind", file)
		}
		out = append(out, u)
	}
}
