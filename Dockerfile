# The provisioner image: choria-provisioner (run, setup, hosts, codec-server), and for the demo
# stack choria-provisioner-dev (credentials, broker, fleet-server) and the example helper. Built by docker-compose.yaml; see docs/operations.md ("The docker-compose stack").
FROM golang:1.26-bookworm AS build
# a module proxy or mirror of your own, if the default cannot be reached (make test-compose
# serves this machine's module cache)
ARG GOPROXY
ARG GOSUMDB
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# one go build: the three binaries' packages are compiled once and linked side by side
# VERSION is the worker's build ID under worker versioning: give each release its own
# (docker build --build-arg VERSION=1.2.0), as the package does
ARG VERSION=development
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X main.version=${VERSION}" -o /out/ ./cmd/choria-provisioner ./cmd/choria-provisioner-dev ./cmd/example-helper

FROM debian:bookworm-slim
# What the Choria Provisioner's image gave site helpers, so theirs run here unchanged: Ruby at
# /usr/bin/ruby with its standard library (the sample helpers and choria-io/helm's stock helper
# require json, yaml, base64, net/http and openssl), and nc, ps, openssl and curl for shell
# helpers; curl is also the compose stack's health check. No compilers: a helper needing a gem
# with native code wants an image built FROM this one.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates ruby curl netcat-openbsd procps openssl \
 && rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* \
 && groupadd --system --gid 2048 choria \
 && useradd --system --uid 2048 --gid 2048 --home /var/lib/choria-provisioner --create-home choria
COPY --from=build /out/choria-provisioner /out/choria-provisioner-dev /out/example-helper /usr/bin/
# numeric, so a pod's runAsNonRoot can check it; the Helm chart runs as the same 2048:2048
USER 2048:2048
ENTRYPOINT ["/usr/bin/choria-provisioner"]
CMD ["run", "--config", "/site/provisioner.yaml"]
