# Stand-in for temporalio/ui:2.42.1: the ui-server of the same version (github.com/temporalio/
# ui-server/v2 v2.42.1, the module the temporal CLI embeds, built from tools/go.mod with its web
# assets inside) and that module's config/docker.yaml template, rendered by ui-server from the
# environment (TEMPORAL_ADDRESS, TEMPORAL_CODEC_ENDPOINT, TEMPORAL_CORS_ORIGINS, ...).
FROM choria-temporal/standin-base:bookworm
RUN groupadd -g 1000 temporal && useradd -u 1000 -g temporal -m temporal \
 && mkdir -p /home/ui-server/config
WORKDIR /home/ui-server
COPY ui-server ./
COPY config/docker.yaml ./config/docker.yaml
COPY temporal-ui-start.sh ./start-ui-server.sh
RUN chown -R temporal:temporal /home/ui-server
USER temporal
EXPOSE 8080
ENTRYPOINT ["./start-ui-server.sh"]
