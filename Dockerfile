# The operator's image: a static cluster-provider, plus the kube-apiserver, kube-controller-manager
# and etcd its local backend runs (built from the Go module proxy exactly as `make envtest` builds them), on a
# minimal non-root base. `make image` builds it where a Docker engine runs.
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
ARG K8S_VERSION=1.37.1
ARG ETCD_VERSION=3.7.0
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/cluster-provider ./cmd/cluster-provider
RUN hack/build-envtest.sh kubernetes "${K8S_VERSION}" /out/k8s \
 && hack/build-envtest.sh etcd "${ETCD_VERSION}" /out/k8s/etcd

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/cluster-provider /usr/local/bin/cluster-provider
COPY --from=build /out/k8s /opt/cluster-provider/k8s
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/cluster-provider"]
