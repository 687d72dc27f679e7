# Stand-in for temporalio/server:1.29.1: .bin/temporal-server and .bin/temporal built from
# tools/go.mod (server 1.29.1, CLI 1.5.1), the server's own config/docker.yaml template of the
# same version (rendered by the server from the environment: DB, POSTGRES_*, BIND_ON_IP, ...),
# and an entry point with the upstream image's contract.
FROM choria-temporal/standin-base:bookworm
RUN groupadd -g 1000 temporal && useradd -u 1000 -g temporal -m temporal \
 && mkdir -p /etc/temporal/config/dynamicconfig
WORKDIR /etc/temporal
ENV TEMPORAL_HOME=/etc/temporal
COPY temporal-server temporal /usr/local/bin/
COPY config/docker.yaml /etc/temporal/config/docker.yaml
COPY config/dynamicconfig/docker.yaml /etc/temporal/config/dynamicconfig/docker.yaml
COPY temporal-server-entrypoint.sh /etc/temporal/entrypoint.sh
RUN chown -R temporal:temporal /etc/temporal/config
USER temporal
EXPOSE 6933 6934 6935 6939 7233 7234 7235 7239
ENTRYPOINT ["/etc/temporal/entrypoint.sh"]
