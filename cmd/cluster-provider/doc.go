// Command cluster-provider is the operator binary. It has two subcommands:
//
//	cluster-provider init   installs the embedded CRDs (openMCP's only where absent) and waits until they are Established
//	cluster-provider run    runs the operator: the controller engine, the ProviderConfig controller
//	                        and the central AccessRequest labeller
//
// `cluster-provider <command> -h` lists a command's flags. Flag and configuration parsing lives
// in options.go and config.go; they validate everything before anything connects to a cluster,
// and every message names the flag or field to fix. A usage or configuration error exits 2, a
// failure at run time 1, and a SIGTERM or SIGINT stops the operator cleanly with exit code 0.
//
// The command wires existing packages together (operator.go builds the manager); it must not
// contain reconcile logic of its own.
package main
