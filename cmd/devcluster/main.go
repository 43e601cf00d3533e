package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

const usage = `Usage:
  devcluster up --dir DIR [--assets DIR]          run etcd + kube-apiserver until SIGINT/SIGTERM
  devcluster apply [--kubeconfig FILE] FILE...    server-side apply the objects of YAML files
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctrl.SetLogger(zap.New(zap.WriteTo(stderr), zap.ConsoleEncoder()))
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "up":
		err = upCommand(ctx, args[1:], stdout)
	case "apply":
		err = applyCommand(ctx, args[1:], stdout)
	default:
		err = fmt.Errorf("unknown command %q", args[0])
	}
	var usageErr usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usageErr):
		fmt.Fprintf(stderr, "devcluster: %v\n%s", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "devcluster: %v\n", err)
		return 1
	}
}

// usageError is a bad command line.
type usageError struct{ error }

func upCommand(ctx context.Context, args []string, stdout io.Writer) error {
	o := upOptions{}
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.Dir, "dir", "", "Folder of the control plane's data, certificates, logs and kubeconfig (required).")
	fs.StringVar(&o.Assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"), "Folder with the etcd and kube-apiserver binaries; default $KUBEBUILDER_ASSETS.")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	switch {
	case o.Dir == "":
		return usageError{errors.New("up: --dir is required")}
	case o.Assets == "":
		return usageError{errors.New("up: --assets (or KUBEBUILDER_ASSETS) is required; `make envtest` builds the binaries")}
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("up: unexpected argument %q", fs.Arg(0))}
	}
	return up(ctx, o, func(kubeconfig string) {
		fmt.Fprintf(stdout, "devcluster: the control plane is up; kubeconfig %s\n", kubeconfig)
	})
}

func applyCommand(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("apply", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	kubeconfig := fs.String("kubeconfig", "", "Path to a kubeconfig; default $KUBECONFIG or ~/.kube/config.")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() == 0 {
		return usageError{errors.New("apply: name at least one file")}
	}
	return apply(ctx, *kubeconfig, fs.Args(), stdout)
}
