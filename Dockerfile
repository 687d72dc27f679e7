# The provisioner image: choria-provisioner (run, setup, hosts, codec-server), and for the demo
# stack choria-provisioner-dev (credentials, broker, fleet-server) and the example helper. Built by docker-compose.yaml; see docs/deployment-compose.md.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/choria-provisioner ./cmd/choria-provisioner \
 && CGO_ENABLED=0 go build -trimpath -o /out/choria-provisioner-dev ./cmd/choria-provisioner-dev \
 && CGO_ENABLED=0 go build -trimpath -o /out/example-helper ./cmd/example-helper

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home /var/lib/choria-provisioner --create-home choria
COPY --from=build /out/choria-provisioner /out/choria-provisioner-dev /out/example-helper /usr/bin/
USER choria
ENTRYPOINT ["/usr/bin/choria-provisioner"]
CMD ["run", "--config", "/site/provisioner.yaml"]
