# The mcpcancel image: one static binary (gateway, coordinator, worker) on
# an empty base with CA certificates, running as a non-root user.
#
#   docker build --build-arg VERSION=v0.1.0 -t mcpcancel:0.1.0 .
#
# The tag is the chart's appVersion (helm/mcpcancel/Chart.yaml), which is the
# chart's default image tag; VERSION is the same with a "v". A test in
# deploy/charttest keeps them in step.
#
# The build stage's Go version is go.mod's `go` line; a test in
# deploy/charttest keeps the two the same.

FROM golang:1.26.8-alpine AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# VERSION and COMMIT are what `mcpcancel version` prints
# (--build-arg COMMIT=$(git rev-parse HEAD)).
ARG VERSION=dev
ARG COMMIT=unknown
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X github.com/mcpcancel/mcpcancel/internal/version.release=${VERSION} -X github.com/mcpcancel/mcpcancel/internal/version.commit=${COMMIT}" \
      -o /out/usr/local/bin/mcpcancel ./cmd/mcpcancel
# The runtime image has no shell: prepare its few files here. /tmp is for
# upstream MCP server commands (the chart mounts an emptyDir over it, as the
# root filesystem is read-only there).
RUN mkdir -p /out/etc/ssl/certs /out/tmp /out/home/nonroot \
 && cp /etc/ssl/certs/ca-certificates.crt /out/etc/ssl/certs/ \
 && echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > /out/etc/passwd \
 && echo 'nonroot:x:65532:' > /out/etc/group \
 && chmod 1777 /out/tmp \
 && chown 65532:65532 /out/home/nonroot

FROM scratch
COPY --from=build /out/ /
USER 65532:65532
ENV HOME=/home/nonroot
# gateway HTTP (MCP), coordinator gRPC, console, worker gRPC, admin (/metrics, /readyz)
EXPOSE 7800 7801 7802 7900 9090
ENTRYPOINT ["/usr/local/bin/mcpcancel"]
CMD ["help"]
