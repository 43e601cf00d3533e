# The operator's image, FROM scratch: no base image is pulled (this project's machines reach no
# registry). `make image` runs hack/image.sh, which prepares the build context's rootfs/: a static
# cluster-provider, the kube-apiserver, kube-controller-manager and etcd its local backend runs
# (the binaries `make envtest` builds from the Go module proxy), CA certificates, and passwd/group
# entries for the non-root user 65532; state.tar holds /var/lib/cluster-provider, the default
# --state-dir, empty and owned by 65532 (mode 0700), so that the local backend can write there when
# no volume is mounted (its clusters then live and die with the container) and a volume mounted
# there without an fsGroup (openMCP's provider Deployments set no securityContext) starts from a
# folder the user may use. ADD keeps a tar's owners, COPY would not.
FROM scratch
COPY rootfs/ /
ADD state.tar /
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cluster-provider"]
