# Common layer of the Temporal stand-ins: what their entry points and the compose file's health
# checks use (nc, curl, tini, CA certificates).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl netcat-openbsd tini \
 && rm -rf /var/lib/apt/lists/*
