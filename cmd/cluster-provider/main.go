package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openmcp-local/cluster-provider/backend/kind"
	"github.com/openmcp-local/cluster-provider/backend/local"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1 // the operator or init failed at run time
	exitUsage   = 2 // a bad command, flag or configuration file
)

const usage = `Usage: cluster-provider <command> [flags]

Commands:
  init   install the CRDs (openMCP's only where absent) and wait until they are Established
  run    run the operator (--provider-name is required)

Run 'cluster-provider <command> -h' for the flags of a command.
`

func main() {
	if kind.IsDockerShim() { // the kind backend's docker, on an engine that refuses --privileged
		os.Exit(kind.RunDockerShim(os.Args[1:]))
	}
	os.Exit(run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command: it returns the exit code. Cancelling ctx (SIGTERM, SIGINT) stops a
// running operator cleanly, with exit code 0.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "init":
		return initCommand(ctx, args[1:], stdout, stderr)
	case "run":
		return runCommand(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "cluster-provider: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

// initCommand is `cluster-provider init`.
func initCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseInitOptions(args)
	if code, done := usageResult(err, stdout, stderr, "init", func(w io.Writer) {
		printFlags(w, newInitFlags(&initOptions{}), "Installs the CRDs embedded in this binary (its own ProviderConfig CRD server-side applied; openMCP's four only where absent, never changed) and waits until they are Established.")
	}); done {
		return code
	}
	if err := initCluster(ctx, o, stdout); err != nil {
		fmt.Fprintf(stderr, "cluster-provider init: %v\n", err)
		return exitFailure
	}
	return exitOK
}

// runCommand is `cluster-provider run`: parse → validate → build → run.
func runCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseRunOptions(args)
	if code, done := usageResult(err, stdout, stderr, "run", func(w io.Writer) {
		printFlags(w, newRunFlags(&runOptions{}), "Runs the operator until SIGTERM or SIGINT.")
	}); done {
		return code
	}
	cfg, err := loadConfig(o.ConfigPath)
	if err == nil {
		err = cfg.checkControllers(o.Enabled, o.ConfigPath)
	}
	if err != nil {
		fmt.Fprintf(stderr, "cluster-provider run: %v\n", err)
		return exitUsage
	}

	bins, err := local.LoadBinaries(ctx, o.LocalBinaryDirs)
	if err != nil {
		fmt.Fprintf(stderr, "cluster-provider run: %v\n", err)
		return exitUsage
	}

	log := zap.New(zap.UseFlagOptions(&o.Zap), zap.WriteTo(stderr))
	ctrl.SetLogger(log)
	klog.SetLogger(log)

	mgr, err := newOperator(ctx, o, cfg, bins, log)
	if err != nil {
		fmt.Fprintf(stderr, "cluster-provider run: %v\n", err)
		return exitFailure
	}
	log.Info("Starting the operator", "providerName", o.ProviderName, "environment", o.Environment, "controllers", o.Controllers)
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "cluster-provider run: %v\n", err)
		return exitFailure
	}
	log.Info("The operator stopped")
	return exitOK
}

// usageResult handles the error of parsing a command's flags: -h prints the usage to stdout
// (exit 0), any other error prints the message and a hint to stderr (exit 2). done is false when
// there was no error.
func usageResult(err error, stdout, stderr io.Writer, command string, printUsage func(io.Writer)) (code int, done bool) {
	switch {
	case err == nil:
		return exitOK, false
	case errors.Is(err, flag.ErrHelp):
		printUsage(stdout)
		return exitOK, true
	default:
		fmt.Fprintf(stderr, "cluster-provider %s: %v\nRun 'cluster-provider %s -h' for the flags.\n", command, err, command)
		return exitUsage, true
	}
}
