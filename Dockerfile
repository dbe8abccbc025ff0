# syntax=docker/dockerfile:1
#
# One image, three static binaries: the relay (the entrypoint), the example consumer
# (/usr/local/bin/inbox-example) and the healthcheck probe (/usr/local/bin/probe), so that
# docker-compose.yml runs every service from it. Build with the version stamped in:
#
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse --short HEAD) -t outbox-relay .

# Base images are pinned by exact version where the registry has one. To pin by digest too, look it
# up where a registry is reachable (docker buildx imagetools inspect golang:1.26.8-bookworm) and
# append it: FROM golang:1.26.8-bookworm@sha256:<digest>. distroless publishes no version tags, so
# for it a digest is the only pin: gcr.io/distroless/static-debian12:nonroot@sha256:<digest>.
FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/outbox-relay ./cmd/outbox-relay && \
    go build -trimpath -ldflags "-s -w" -o /out/inbox-example ./examples/consumer && \
    go build -trimpath -ldflags "-s -w" -o /out/probe ./deploy/probe

# Static binaries need no libc; distroless adds CA certificates and tzdata, and runs as the
# unprivileged user nonroot (65532). There is no shell: healthchecks use the probe binary.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/outbox-relay /out/inbox-example /out/probe /usr/local/bin/
USER nonroot:nonroot
# /metrics, /healthz and /readyz (run --metrics-addr, default :9187).
EXPOSE 9187
ENTRYPOINT ["/usr/local/bin/outbox-relay"]
CMD ["run"]
