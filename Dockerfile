# The operator's image, FROM scratch: no base image is pulled (this project's machines reach no
# registry). `make image` runs hack/image.sh, which prepares the build context's rootfs/: a static
# cluster-provider, the kube-apiserver, kube-controller-manager and etcd its local backend runs
# (the binaries `make envtest` builds from the Go module proxy), CA certificates, and passwd/group
# entries for the non-root user 65532.
FROM scratch
COPY rootfs/ /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cluster-provider"]
