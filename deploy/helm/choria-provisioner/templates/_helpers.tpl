{{- /* the chart's name, or nameOverride */ -}}
{{- define "choria-provisioner.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- /* the objects' name: fullnameOverride, else the release's name with the chart's (once) */ -}}
{{- define "choria-provisioner.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "choria-provisioner.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "choria-provisioner.selectorLabels" -}}
app.kubernetes.io/name: {{ include "choria-provisioner.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "choria-provisioner.labels" -}}
{{ include "choria-provisioner.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "choria-provisioner.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.registry -}}
{{- printf "%s/%s:%s" .Values.image.registry .Values.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{- /* where every file the provisioner reads is mounted */ -}}
{{- define "choria-provisioner.dir" -}}/etc/choria-provisioner{{- end -}}

{{- /* the Secret the chart makes for a token or password written in the values */ -}}
{{- define "choria-provisioner.credentialsName" -}}
{{- printf "%s-credentials" (include "choria-provisioner.fullname" .) -}}
{{- end -}}

{{- /*
Refuses what the chart cannot render into a working site, with the value to change. Every
template includes it, so `helm template` and `helm install` stop before anything is applied.
*/ -}}
{{- define "choria-provisioner.validate" -}}
{{- $v := .Values -}}
{{- if and $v.broker.connectionSecret $v.broker.credentials.secret -}}
{{- fail "broker.connectionSecret (x509) and broker.credentials.secret (Choria JWT security) exclude each other: set one" -}}
{{- end -}}
{{- if not (or $v.broker.connectionSecret $v.broker.credentials.secret) -}}
{{- fail "broker.connectionSecret (x509: cert.pem, key.pem, ca.pem) or broker.credentials.secret (provisioner.jwt, provisioner.seed) is required" -}}
{{- end -}}
{{- if and $v.broker.credentials.secret (not $v.broker.credentials.issuerPublicKey) -}}
{{- fail "broker.credentials.issuerPublicKey (hex) is required with broker.credentials.secret" -}}
{{- end -}}
{{- if and $v.broker.provisionerPassword $v.broker.provisionerPasswordSecret -}}
{{- fail "broker.provisionerPassword and broker.provisionerPasswordSecret exclude each other" -}}
{{- end -}}
{{- if and $v.provisioner.token $v.provisioner.tokenSecret -}}
{{- fail "provisioner.token and provisioner.tokenSecret exclude each other" -}}
{{- end -}}
{{- if and $v.pki.enabled $v.ed25519.enabled -}}
{{- fail "pki.enabled and ed25519.enabled exclude each other (features.pki, features.ed25519)" -}}
{{- end -}}
{{- if and (or $v.jwt.enabled $v.ed25519.enabled) (not (or $v.jwt.signerSecret $v.jwt.issuerPublicKey)) -}}
{{- fail "jwt.signerSecret (signer.pem) or jwt.issuerPublicKey is required to verify provisioning JWTs" -}}
{{- end -}}
{{- if and $v.jwt.signerSecret $v.jwt.issuerPublicKey -}}
{{- fail "jwt.signerSecret and jwt.issuerPublicKey exclude each other" -}}
{{- end -}}
{{- if and $v.ed25519.enabled (not $v.ed25519.signerSecret) -}}
{{- fail "ed25519.signerSecret (signer.seed, signer.jwt) is required with ed25519.enabled" -}}
{{- end -}}
{{- if not $v.helper.configMap -}}
{{- fail "helper.configMap should be set" -}}
{{- end -}}
{{- if and $v.temporal.apiKey.secret (not (or $v.temporal.tls.enabled $v.temporal.tls.clientSecret $v.temporal.tls.caSecret)) -}}
{{- fail "temporal.apiKey is only sent over TLS: set temporal.tls.enabled: true" -}}
{{- end -}}
{{- $tconf := get $v.provisioner.config "temporal" | default dict -}}
{{- if and (not $v.temporal.codecKey.secret) (not (get $tconf "plaintext")) -}}
{{- fail "temporal.codecKey.secret is required: payloads carry secrets" -}}
{{- end -}}
{{- if and $v.codecServer.enabled (not $v.codecServer.tokenSecret) -}}
{{- fail "codecServer.tokenSecret (key: token) is required with codecServer.enabled" -}}
{{- end -}}
{{- if and $v.codecServer.enabled $v.codecServer.oidc.issuer (not $v.codecServer.oidc.anyUser) (or (not $v.codecServer.oidc.claim) (not $v.codecServer.oidc.claimValues)) -}}
{{- fail "codecServer.oidc needs claim and claimValues (the claim that grants decoding), or anyUser: true to let every user of the issuer decrypt every payload" -}}
{{- end -}}
{{- if and $v.codecServer.enabled (not $v.temporal.codecKey.secret) -}}
{{- fail "codecServer.enabled needs temporal.codecKey.secret" -}}
{{- end -}}
{{- if and $v.prometheus.enabled (eq (int $v.prometheus.port) (int $v.health.port)) -}}
{{- fail "health.port and prometheus.port must differ: health has a listener of its own" -}}
{{- end -}}
{{- if and (or $v.prometheus.serviceMonitor.enabled $v.dashboard.enabled) (not $v.prometheus.enabled) -}}
{{- fail "prometheus.serviceMonitor and dashboard need prometheus.enabled: they read its /metrics" -}}
{{- end -}}
{{- if and $v.codecServer.ingress.enabled (not $v.codecServer.ingress.host) -}}
{{- fail "codecServer.ingress.host is required with codecServer.ingress.enabled" -}}
{{- end -}}
{{- $owned := dict
  "token" "provisioner.token or provisioner.tokenSecret (kept in a Secret)"
  "broker_provisioning_password" "broker.provisionerPassword or broker.provisionerPasswordSecret (kept in a Secret)"
  "jwt_verify_cert" "jwt.signerSecret or jwt.issuerPublicKey"
  "jwt_signing_key" "ed25519.signerSecret"
  "jwt_signing_token" "ed25519.signerSecret"
  "choria_config" "broker.*"
  "monitor_port" "prometheus.port"
  "health_port" "health.port"
  "health_address" "nothing: the chart listens on every interface of the pod, where the kubelet's probes reach it"
  "features" "jwt.enabled, ed25519.enabled, pki.enabled, upgrades.enabled"
  "logfile" "nothing: a pod logs to stderr"
  "workers" "provisioner.workers"
  "interval" "provisioner.interval"
  "loglevel" "provisioner.loglevel"
  "site" "provisioner.site"
  "helper" "helper.configMap and helper.command"
-}}
{{- range $key, $instead := $owned -}}
{{- if hasKey $v.provisioner.config $key -}}
{{- fail (printf "provisioner.config.%s: set %s instead" $key $instead) -}}
{{- end -}}
{{- end -}}
{{- range $key := list "address" "namespace" "task_queue" "codec_key_file" "tls" "api_key" "api_key_file" -}}
{{- if hasKey $tconf $key -}}
{{- fail (printf "provisioner.config.temporal.%s: set it in the temporal section of the values instead" $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- /* choria-provisioner.yaml: the keys of docs/configuration.md, paths to the mounted files */ -}}
{{- define "choria-provisioner.config" -}}
{{- $v := .Values -}}
{{- $dir := include "choria-provisioner.dir" . -}}
{{- $cfg := dict
  "workers" (int $v.provisioner.workers)
  "interval" $v.provisioner.interval
  "loglevel" $v.provisioner.loglevel
  "site" (default .Release.Name $v.provisioner.site)
  "helper" (default (printf "%s/helper/provision-helper" $dir) $v.helper.command)
  "choria_config" (printf "%s/config/client.cfg" $dir)
  "monitor_port" (ternary (int $v.prometheus.port) 0 $v.prometheus.enabled)
  "health_port" (int $v.health.port)
  "health_address" "0.0.0.0"
  "features" (dict "jwt" (or $v.jwt.enabled $v.ed25519.enabled) "ed25519" $v.ed25519.enabled "pki" $v.pki.enabled "upgrades" $v.upgrades.enabled)
-}}
{{- if $v.jwt.signerSecret -}}
{{- $_ := set $cfg "jwt_verify_cert" (printf "%s/signer/signer.pem" $dir) -}}
{{- else if $v.jwt.issuerPublicKey -}}
{{- $_ := set $cfg "jwt_verify_cert" $v.jwt.issuerPublicKey -}}
{{- end -}}
{{- if $v.ed25519.enabled -}}
{{- $_ := set $cfg "jwt_signing_key" (printf "%s/signing/signer.seed" $dir) -}}
{{- if $v.ed25519.signerToken -}}
{{- $_ := set $cfg "jwt_signing_token" (printf "%s/signing/signer.jwt" $dir) -}}
{{- end -}}
{{- $_ := set $cfg "server_jwt_validity" $v.ed25519.serverJWTValidity -}}
{{- end -}}
{{- if $v.upgrades.enabled -}}
{{- $_ := set $cfg "upgrades_repository" $v.upgrades.repository -}}
{{- $_ := set $cfg "upgrades_optional" $v.upgrades.optional -}}
{{- end -}}
{{- $t := dict "address" $v.temporal.address "namespace" $v.temporal.namespace "task_queue" $v.temporal.taskQueue -}}
{{- if $v.temporal.codecKey.secret -}}
{{- $_ := set $t "codec_key_file" (printf "%s/codec/codec.key" $dir) -}}
{{- end -}}
{{- $tls := dict -}}
{{- if $v.temporal.tls.enabled -}}{{- $_ := set $tls "enabled" true -}}{{- end -}}
{{- if $v.temporal.tls.caSecret -}}{{- $_ := set $tls "ca_file" (printf "%s/temporal-ca/ca.crt" $dir) -}}{{- end -}}
{{- if $v.temporal.tls.clientSecret -}}
{{- $_ := set $tls "cert_file" (printf "%s/temporal-tls/tls.crt" $dir) -}}
{{- $_ := set $tls "key_file" (printf "%s/temporal-tls/tls.key" $dir) -}}
{{- end -}}
{{- if $v.temporal.tls.serverName -}}{{- $_ := set $tls "server_name" $v.temporal.tls.serverName -}}{{- end -}}
{{- if $v.temporal.tls.insecureSkipVerify -}}{{- $_ := set $tls "insecure_skip_verify" true -}}{{- end -}}
{{- if $tls -}}{{- $_ := set $t "tls" $tls -}}{{- end -}}
{{- if $v.temporal.apiKey.secret -}}
{{- $_ := set $t "api_key_file" (printf "%s/temporal-api-key/api-key" $dir) -}}
{{- end -}}
{{- $_ := set $cfg "temporal" $t -}}
{{- toYaml (mustMergeOverwrite (deepCopy $v.provisioner.config) $cfg) -}}
{{- end -}}

{{- /* client.cfg: the Choria client configuration the provisioner connects to the broker with */ -}}
{{- define "choria-provisioner.clientConfig" -}}
{{- $v := .Values -}}
{{- $dir := include "choria-provisioner.dir" . -}}
plugin.choria.middleware_hosts = {{ required "broker.url is required" $v.broker.url }}
{{- with $v.broker.identity }}
identity = {{ . }}
{{- end }}
plugin.choria.use_srv = false
logger_type = console
loglevel = {{ $v.provisioner.loglevel }}
{{- if $v.broker.connectionSecret }}
plugin.security.provider = file
plugin.security.file.certificate = {{ $dir }}/ssl/cert.pem
plugin.security.file.key = {{ $dir }}/ssl/key.pem
plugin.security.file.ca = {{ $dir }}/ssl/ca.pem
{{- else }}
plugin.security.provider = choria
plugin.security.choria.token_file = {{ $dir }}/choria/provisioner.jwt
plugin.security.choria.seed_file = {{ $dir }}/choria/provisioner.seed
{{- if $v.broker.credentials.ca }}
plugin.security.choria.ca = {{ $dir }}/choria/ca.pem
{{- end }}
plugin.security.issuer.names = choria
plugin.security.issuer.choria.public = {{ $v.broker.credentials.issuerPublicKey }}
{{- end }}
{{- range $key, $value := $v.broker.clientConfig }}
{{ $key }} = {{ $value }}
{{- end }}
{{- end -}}

{{- /* a read-only Secret volume projecting only the listed keys (key: path) */ -}}
{{- define "choria-provisioner.secretVolume" -}}
- name: {{ .name }}
  secret:
    secretName: {{ .secret }}
    defaultMode: 0440
    items:
    {{- range $key, $path := .items }}
      - key: {{ $key }}
        path: {{ $path }}
    {{- end }}
{{- end -}}

{{- define "choria-provisioner.volumes" -}}
{{- $v := .Values -}}
- name: config
  configMap:
    name: {{ include "choria-provisioner.fullname" . }}
- name: helper
  configMap:
    name: {{ $v.helper.configMap }}
    defaultMode: 0555
{{- if $v.broker.connectionSecret }}
{{ include "choria-provisioner.secretVolume" (dict "name" "broker-tls" "secret" $v.broker.connectionSecret "items" (dict "cert.pem" "cert.pem" "key.pem" "key.pem" "ca.pem" "ca.pem")) }}
{{- end }}
{{- if $v.broker.credentials.secret }}
{{- $items := dict "provisioner.jwt" "provisioner.jwt" "provisioner.seed" "provisioner.seed" }}
{{- if $v.broker.credentials.ca }}{{ $_ := set $items "ca.pem" "ca.pem" }}{{ end }}
{{ include "choria-provisioner.secretVolume" (dict "name" "broker-credentials" "secret" $v.broker.credentials.secret "items" $items) }}
{{- end }}
{{- if $v.jwt.signerSecret }}
{{ include "choria-provisioner.secretVolume" (dict "name" "jwt-signer" "secret" $v.jwt.signerSecret "items" (dict "signer.pem" "signer.pem")) }}
{{- end }}
{{- if $v.ed25519.enabled }}
{{- $items := dict "signer.seed" "signer.seed" }}
{{- if $v.ed25519.signerToken }}{{ $_ := set $items "signer.jwt" "signer.jwt" }}{{ end }}
{{ include "choria-provisioner.secretVolume" (dict "name" "jwt-signing" "secret" $v.ed25519.signerSecret "items" $items) }}
{{- end }}
{{- if $v.temporal.codecKey.secret }}
{{ include "choria-provisioner.secretVolume" (dict "name" "codec-key" "secret" $v.temporal.codecKey.secret "items" (dict $v.temporal.codecKey.key "codec.key")) }}
{{- end }}
{{- if $v.temporal.tls.clientSecret }}
{{ include "choria-provisioner.secretVolume" (dict "name" "temporal-tls" "secret" $v.temporal.tls.clientSecret "items" (dict "tls.crt" "tls.crt" "tls.key" "tls.key")) }}
{{- end }}
{{- if $v.temporal.tls.caSecret }}
{{ include "choria-provisioner.secretVolume" (dict "name" "temporal-ca" "secret" $v.temporal.tls.caSecret "items" (dict $v.temporal.tls.caKey "ca.crt")) }}
{{- end }}
{{- if $v.temporal.apiKey.secret }}
{{ include "choria-provisioner.secretVolume" (dict "name" "temporal-api-key" "secret" $v.temporal.apiKey.secret "items" (dict $v.temporal.apiKey.key "api-key")) }}
{{- end }}
{{- /* the only writable places, as the systemd unit's PrivateTmp and StateDirectory */}}
- name: tmp
  emptyDir:
    sizeLimit: 256Mi
- name: state
  emptyDir:
    sizeLimit: 64Mi
{{- with $v.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "choria-provisioner.volumeMounts" -}}
{{- $v := .Values -}}
{{- $dir := include "choria-provisioner.dir" . -}}
- name: config
  mountPath: {{ $dir }}/config
  readOnly: true
- name: helper
  mountPath: {{ $dir }}/helper
  readOnly: true
{{- $mounts := list
  (list "broker-tls" "ssl" $v.broker.connectionSecret)
  (list "broker-credentials" "choria" $v.broker.credentials.secret)
  (list "jwt-signer" "signer" $v.jwt.signerSecret)
  (list "jwt-signing" "signing" $v.ed25519.enabled)
  (list "codec-key" "codec" $v.temporal.codecKey.secret)
  (list "temporal-tls" "temporal-tls" $v.temporal.tls.clientSecret)
  (list "temporal-ca" "temporal-ca" $v.temporal.tls.caSecret)
  (list "temporal-api-key" "temporal-api-key" $v.temporal.apiKey.secret)
}}
{{- range $mounts }}
{{- if index . 2 }}
- name: {{ index . 0 }}
  mountPath: {{ $dir }}/{{ index . 1 }}
  readOnly: true
{{- end }}
{{- end }}
- name: tmp
  mountPath: /tmp
- name: state
  mountPath: /var/lib/choria-provisioner
{{- with $v.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "choria-provisioner.env" -}}
{{- $v := .Values -}}
- name: HOME
  value: /var/lib/choria-provisioner
{{- if or $v.provisioner.token $v.provisioner.tokenSecret }}
- name: PROVISIONER_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ default (include "choria-provisioner.credentialsName" .) $v.provisioner.tokenSecret }}
      key: token
{{- end }}
{{- if or $v.broker.provisionerPassword $v.broker.provisionerPasswordSecret }}
- name: PROVISIONER_BROKER_PROVISIONING_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ default (include "choria-provisioner.credentialsName" .) $v.broker.provisionerPasswordSecret }}
      key: password
{{- end }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- /* the pod's and every container's security context: what the systemd unit's sandbox is, in a pod */ -}}
{{- define "choria-provisioner.podSecurityContext" -}}
runAsNonRoot: true
{{- if .Values.securityContext.enabled }}
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.fsGroup }}
{{- end }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "choria-provisioner.containerSecurityContext" -}}
runAsNonRoot: true
{{- if .Values.securityContext.enabled }}
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
{{- end }}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
