// Command front-door is the hosted backend's front door, in the control-plane image: a pod of a
// control plane's namespace whose Service is the cluster's endpoint (apiserver-external) when its
// ProviderConfig sets spec.hibernation. It passes every connection, TLS untouched, to the API
// server's Service, holding it while the API server does not answer (hibernated and woken, or
// restarting) for up to --wake-timeout (meanwhile, with --endpoints, it dials a woken API server
// pod directly as soon as its /readyz answers, seconds before the Service reaches it), and reports its use in an annotation of the Lease
// --lease (backend/frontdoor.Usage): the operator hibernates the control plane once no client
// used it for spec.hibernation.idleAfter, and wakes it when a connection opens.
//
//	front-door --upstream HOST:PORT --lease NAME [--endpoints SERVICE] [--listen :6443] [--health :8081] [--report-every 5s] [--wake-timeout 90s]
//	    POD_NAMESPACE and POD_NAME from the environment (the downward API); the pod's service
//	    account may patch that Lease only. Runs until SIGTERM or SIGINT (exit 0).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/openmcp-local/cluster-provider/backend/frontdoor"
)

func main() {
	listen := flag.String("listen", ":6443", "the address the door listens on")
	health := flag.String("health", ":8081", "the address of its health check (GET /healthz), which the kubelet probes: not a client's use")
	upstream := flag.String("upstream", "", "the API server's Service, host:port")
	lease := flag.String("lease", "", "the Lease of the pod's namespace in which the door reports its use")
	every := flag.Duration("report-every", 5*time.Second, "at most one report per this long (the first after a quiet one at once)")
	wake := flag.Duration("wake-timeout", 90*time.Second, "how long a connection waits for the API server to answer")
	endpoints := flag.String("endpoints", "", "the Service whose EndpointSlices list the API server pods: a pod is dialled directly once its /readyz answers, before the Service reaches it (empty: the upstream only)")
	flag.Parse()
	ns, pod := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")
	if *upstream == "" || *lease == "" || ns == "" || pod == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: front-door --upstream HOST:PORT --lease NAME [--endpoints SERVICE] [--listen :6443] [--health :8081] [--report-every 5s] [--wake-timeout 90s], with POD_NAMESPACE and POD_NAME set")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := rest.InClusterConfig()
	if err == nil {
		err = run(ctx, cfg, door{listen: *listen, health: *health, upstream: *upstream, endpoints: *endpoints, namespace: ns, pod: pod, lease: *lease, every: *every, wake: *wake}, nil)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "front-door:", err)
		os.Exit(1)
	}
}

// door is what a front door is told.
type door struct {
	listen, health, upstream, endpoints, namespace, pod, lease string
	every, wake                                                time.Duration
}

// run runs the door o until ctx ends, reporting with cfg; listening, when not nil, gets the port
// it listens on, then the health check's. The health check is a listener of its own: the
// kubelet's probes would otherwise count as clients and keep the control plane awake.
func run(ctx context.Context, cfg *rest.Config, o door, listening chan<- int) error {
	listen, upstream, ns, pod, lease, every, wake := o.listen, o.upstream, o.namespace, o.pod, o.lease, o.every, o.wake
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	key := frontdoor.AnnotationFor(pod)
	report := func(ctx context.Context, u *frontdoor.Usage) error {
		var value any // nil: the annotation goes
		if u != nil {
			b, err := json.Marshal(u)
			if err != nil {
				return err
			}
			value = string(b)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: value}}})
		if err != nil {
			return err
		}
		_, err = cs.CoordinationV1().Leases(ns).Patch(ctx, lease, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			fmt.Fprintf(os.Stderr, "front-door: reporting to Lease %s/%s: %v\n", ns, lease, err)
		}
		return err
	}
	d, err := frontdoor.Listen(listen)
	if err != nil {
		return err
	}
	r := frontdoor.NewReporter(every, report)
	d.OnChange(r.Changed)
	hl, err := net.Listen("tcp", o.health)
	if err != nil {
		d.Close()
		return fmt.Errorf("listening for the health check on %s: %w", o.health, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	defer hs.Close()
	if listening != nil {
		listening <- d.Port()
		listening <- hl.Addr().(*net.TCPAddr).Port
	}
	var sooner func(context.Context) net.Conn
	if o.endpoints != "" {
		sooner = newAPIServers(cs, ns, o.endpoints).dial
	}
	reported := make(chan struct{})
	go func() { r.Run(ctx); close(reported) }()
	go d.Serve(func(c net.Conn) {
		dctx, cancel := context.WithTimeout(ctx, wake)
		defer cancel()
		up, err := frontdoor.DialRetry(dctx, upstream, 200*time.Millisecond, sooner)
		if err != nil {
			c.Close()
			return
		}
		d.Splice(c, up)
	})
	fmt.Fprintf(os.Stderr, "front-door: passing %s to %s, reporting to Lease %s/%s\n", listen, upstream, ns, lease)
	<-ctx.Done()
	d.Close()
	<-reported
	return nil
}
