package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/openmcp-local/cluster-provider/backend"
)

// Versions is what versions writes to --result: the versions the image's kube-apiserver and etcd
// report (the hosted backend's image check before an upgrade rolls anything).
type Versions struct {
	Kubernetes string `json:"kubernetes,omitempty"`
	Etcd       string `json:"etcd,omitempty"`
	Error      string `json:"error,omitempty"`
}

// versions runs `kube-apiserver --version` and `etcd --version` of the image (beside this
// command, or in --bin) and writes the versions they report to --result.
func versions(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("versions", flag.ExitOnError)
	bin := fs.String("bin", "", "the folder of kube-apiserver and etcd (default: this command's)")
	result := fs.String("result", "/dev/termination-log", "where to write the result")
	_ = fs.Parse(args)
	if *bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return writeVersions(*result, Versions{}, err)
		}
		*bin = filepath.Dir(exe)
	}
	var v Versions
	out, err := backend.RunVersion(ctx, filepath.Join(*bin, "kube-apiserver"))
	if err == nil {
		v.Kubernetes, err = backend.ParseKubernetesVersion(out)
	}
	if err != nil {
		return writeVersions(*result, v, fmt.Errorf("kube-apiserver: %w", err))
	}
	if out, err = backend.RunVersion(ctx, filepath.Join(*bin, "etcd")); err != nil {
		return writeVersions(*result, v, fmt.Errorf("etcd: %w", err))
	}
	if v.Etcd = backend.ParseEtcdVersion(out); v.Etcd == "" {
		return writeVersions(*result, v, fmt.Errorf("etcd --version printed %q, no \"etcd Version: X.Y.Z\"", strings.TrimSpace(out)))
	}
	return writeVersions(*result, v, nil)
}

// writeVersions writes v as JSON to file (and stdout), and returns err.
func writeVersions(file string, v Versions, err error) error {
	if err != nil {
		v.Error = err.Error()
	}
	data, _ := json.Marshal(v)
	fmt.Println(string(data))
	if file != "" {
		if werr := os.WriteFile(file, data, 0o600); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}
