# Stand-in for temporalio/admin-tools (the 1.29.1 release): .bin/temporal-sql-tool (server 1.29.1)
# and .bin/temporal (CLI 1.5.1; the upstream tag names CLI 1.5.0 and also carries tctl, which this
# one does not) built from tools/go.mod, the server's schema files, nc, and the upstream entry
# point (tini, then sleep: compose runs its one-shots with an entrypoint of their own).
FROM choria-temporal/standin-base:bookworm
RUN groupadd -g 1000 temporal && useradd -u 1000 -g temporal -m temporal
COPY temporal-sql-tool temporal /usr/local/bin/
COPY schema /etc/temporal/schema
USER temporal
WORKDIR /etc/temporal
ENTRYPOINT ["tini", "--", "sleep", "infinity"]
