package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestVersions: versions writes what the image's kube-apiserver and etcd report to --result, or
// why it could not read them.
func TestVersions(t *testing.T) {
	script := func(dir, name, out string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\nprintf '"+out+"'\n"), 0o755))
	}
	for _, tc := range []struct {
		name      string
		apiserver string // "": missing
		etcd      string
		want      Versions
		fails     string
	}{
		{"both", `Kubernetes v1.37.1\n`, `etcd Version: 3.7.0\nGit SHA: v3.7.0\n`, Versions{Kubernetes: "1.37.1", Etcd: "3.7.0"}, ""},
		{"etcd 3.5", `Kubernetes v1.37.1\n`, `etcd Version: 3.5.21\n`, Versions{Kubernetes: "1.37.1", Etcd: "3.5.21"}, ""},
		{"no kube-apiserver", "", `etcd Version: 3.7.0\n`, Versions{}, "kube-apiserver: "},
		{"no etcd", `Kubernetes v1.37.1\n`, "", Versions{Kubernetes: "1.37.1"}, "etcd: "},
		{"an etcd that names no version", `Kubernetes v1.37.1\n`, `hello\n`, Versions{Kubernetes: "1.37.1"}, `no "etcd Version: X.Y.Z"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.apiserver != "" {
				script(dir, "kube-apiserver", tc.apiserver)
			}
			if tc.etcd != "" {
				script(dir, "etcd", tc.etcd)
			}
			result := filepath.Join(t.TempDir(), "result")
			err := versions(t.Context(), []string{"--bin=" + dir, "--result=" + result})
			data, rerr := os.ReadFile(result)
			require.NoError(t, rerr)
			var got Versions
			require.NoError(t, json.Unmarshal(data, &got))
			if tc.fails != "" {
				require.Error(t, err)
				assert.Contains(t, got.Error, tc.fails)
				got.Error = ""
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
