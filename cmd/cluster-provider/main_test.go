package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRun covers the command's exit codes and where its messages go, without a cluster: every
// case fails (or helps) before anything connects.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badConfig, []byte("accessRequest:\n  selector:\n    matchExpressions:\n    - {key: a, operator: Like, values: [x]}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	noScheduler := filepath.Join(dir, "access.yaml")
	if err := os.WriteFile(noScheduler, []byte("accessRequest: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badScheduler := filepath.Join(dir, "scheduler.yaml")
	if err := os.WriteFile(badScheduler, []byte("scheduler:\n  purposeMappings:\n    mcp:\n      tenancyCount: 2\n      template: {spec: {profile: p, tenancy: Exclusive}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A --local-binaries folder of an earlier release: kube-apiserver and etcd, no controller manager.
	oldBins := filepath.Join(dir, "bins")
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if err := os.MkdirAll(oldBins, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(oldBins, name), []byte("#!/bin/sh\necho Kubernetes v1.37.1\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := map[string]struct {
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		"no command":         {args: nil, wantCode: exitUsage, wantStderr: "Usage: cluster-provider <command>"},
		"help":               {args: []string{"help"}, wantCode: exitOK, wantStdout: "Commands:"},
		"--help":             {args: []string{"--help"}, wantCode: exitOK, wantStdout: "Commands:"},
		"unknown command":    {args: []string{"start"}, wantCode: exitUsage, wantStderr: `unknown command "start"`},
		"run -h":             {args: []string{"run", "-h"}, wantCode: exitOK, wantStdout: "-provider-name"},
		"init -h":            {args: []string{"init", "--help"}, wantCode: exitOK, wantStdout: "-timeout"},
		"run without name":   {args: []string{"run"}, wantCode: exitUsage, wantStderr: "--provider-name is required"},
		"run bad controller": {args: []string{"run", "--provider-name=x", "--controllers=foo"}, wantCode: exitUsage, wantStderr: "valid are accessrequest, providerconfig, scheduler"},
		"run bad config": {
			args: []string{"run", "--provider-name=x", "--config", badConfig}, wantCode: exitUsage,
			wantStderr: "accessRequest.selector.matchExpressions[0].operator",
		},
		"run scheduler without config": {
			args: []string{"run", "--provider-name=x", "--controllers=scheduler"}, wantCode: exitUsage,
			wantStderr: "--controllers names scheduler, which needs --config with a scheduler: section",
		},
		"run scheduler without section": {
			args: []string{"run", "--provider-name=x", "--controllers=scheduler,accessrequest", "--config", noScheduler}, wantCode: exitUsage,
			wantStderr: "--config " + noScheduler + " has no scheduler: section",
		},
		"run bad scheduler section": {
			args: []string{"run", "--provider-name=x", "--controllers=scheduler", "--config", badScheduler}, wantCode: exitUsage,
			wantStderr: "scheduler.purposeMappings[mcp].tenancyCount",
		},
		"run missing kubeconfig": {
			args:       []string{"run", "--provider-name=x", "--kubeconfig", filepath.Join(dir, "nope"), "--metrics-bind-address=0", "--health-probe-bind-address=0"},
			wantCode:   exitFailure,
			wantStderr: "--kubeconfig " + filepath.Join(dir, "nope"),
		},
		"run with a binaries folder that lacks kube-controller-manager": {
			args: []string{"run", "--provider-name=x", "--local-binaries", oldBins}, wantCode: exitUsage,
			wantStderr: filepath.Join(oldBins, "kube-controller-manager") + ": no such file",
		},
		"init bad flag": {args: []string{"init", "--timeout=-1s"}, wantCode: exitUsage, wantStderr: "--timeout -1s: must be positive"},
		"init missing kubeconfig": {
			args: []string{"init", "--kubeconfig", filepath.Join(dir, "nope")}, wantCode: exitFailure,
			wantStderr: "--kubeconfig " + filepath.Join(dir, "nope"),
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, &stdout, &stderr)
			assert.Equal(t, tt.wantCode, code, "stderr: %s", stderr.String())
			if tt.wantStdout != "" {
				assert.Contains(t, stdout.String(), tt.wantStdout)
			}
			if tt.wantStderr != "" {
				assert.Contains(t, stderr.String(), tt.wantStderr)
			}
			if code == exitUsage {
				assert.Empty(t, stdout.String(), "errors go to stderr")
			}
		})
	}
}
