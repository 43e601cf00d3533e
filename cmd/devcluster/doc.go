// Command devcluster is the local control plane of `make run` (hack/run.sh); it is a development
// tool, not part of the operator. It has two subcommands:
//
//	devcluster up --dir .run --assets bin/k8s/<versions>
//	    starts etcd and kube-apiserver (the envtest binaries the tests use) through
//	    controller-runtime's envtest, writes an administrator kubeconfig to <dir>/kubeconfig once
//	    the API server answers, and stops both cleanly on SIGINT or SIGTERM, removing the
//	    kubeconfig. etcd keeps its data in <dir>/etcd, so objects survive a restart; the API
//	    server's certificates (<dir>/apiserver) and its port are new at every start, which is why
//	    the kubeconfig is written anew each time. The processes' output goes to <dir>/logs.
//
//	devcluster apply [--kubeconfig FILE] FILE...
//	    server-side applies the objects of YAML files (the samples in deploy/samples), so that
//	    `make run` needs no kubectl.
//
// It must not know about the operator's kinds: it applies any object the API server serves.
package main
