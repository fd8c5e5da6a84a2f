{{/*
Expand the name of the chart.
*/}}
{{- define "thinkgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Create a default fully qualified app name (63 characters at most: DNS names).
If the release name contains the chart name it is used as the full name.
*/}}
{{- define "thinkgate.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version as used by the chart label.
*/}}
{{- define "thinkgate.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "thinkgate.labels" -}}
helm.sh/chart: {{ include "thinkgate.chart" . }}
{{ include "thinkgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: thinkgate
{{- end }}

{{/*
Selector labels (immutable once a Deployment exists).
*/}}
{{- define "thinkgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "thinkgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the service account to use.
*/}}
{{- define "thinkgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "thinkgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The container image reference.
*/}}
{{- define "thinkgate.image" -}}
{{- $tag := .Values.image.tag | default .Chart.AppVersion }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/*
Name of the Secret holding GATEWAY_SECRET (and the Redis password).
*/}}
{{- define "thinkgate.secretName" -}}
{{- default (include "thinkgate.fullname" .) .Values.auth.existingSecret }}
{{- end }}

{{/*
Full name of the bundled Redis (bitnami's common.names.fullname with bundledRedis.nameOverride).
*/}}
{{- define "thinkgate.bundledRedis.fullname" -}}
{{- $name := default "redis" .Values.bundledRedis.nameOverride }}
{{- if .Values.bundledRedis.fullnameOverride }}
{{- .Values.bundledRedis.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/*
Whether the gateway authenticates to Redis with a password from a Secret.
*/}}
{{- define "thinkgate.redisPassword.enabled" -}}
{{- if .Values.bundledRedis.enabled }}
{{- if ((.Values.bundledRedis.auth).enabled) }}true{{ end }}
{{- else if and .Values.redis.url (or .Values.redis.password .Values.redis.existingSecretPassword) }}true
{{- end }}
{{- end }}

{{/*
secretKeyRef of the Redis password.
*/}}
{{- define "thinkgate.redisPassword.secretKeyRef" -}}
{{- if .Values.bundledRedis.enabled }}
name: {{ ((.Values.bundledRedis.auth).existingSecret) | default (include "thinkgate.bundledRedis.fullname" .) }}
key: {{ ((.Values.bundledRedis.auth).existingSecretPasswordKey) | default "redis-password" }}
{{- else }}
name: {{ include "thinkgate.secretName" . }}
key: {{ .Values.auth.existingSecretKeys.redisPassword }}
{{- end }}
{{- end }}

{{/*
GATEWAY_REDIS_URL. The password comes from $(THINKGATE_REDIS_PASSWORD), which Kubernetes expands
from the env var defined just before it (never written into the ConfigMap or the pod spec).
*/}}
{{- define "thinkgate.redisUrl" -}}
{{- $url := .Values.redis.url }}
{{- if .Values.bundledRedis.enabled }}
{{- $url = printf "redis://%s-master.%s.svc:6379/0" (include "thinkgate.bundledRedis.fullname" .) .Release.Namespace }}
{{- end }}
{{- if and $url (include "thinkgate.redisPassword.enabled" .) }}
{{- $user := ternary "" .Values.redis.username .Values.bundledRedis.enabled }}
{{- $url = regexReplaceAll "^([a-z+]+)://" $url (printf "${1}://%s:$(THINKGATE_REDIS_PASSWORD)@" $user) }}
{{- end }}
{{- with .Values.redis.tls.existingSecret }}
{{- $tls := $.Values.redis.tls }}
{{- $files := list (printf "ssl_ca_certs=%s/%s" $tls.mountPath $tls.caKey) }}
{{- if $tls.certKey }}
{{- $files = append $files (printf "ssl_certfile=%s/%s" $tls.mountPath $tls.certKey) }}
{{- $files = append $files (printf "ssl_keyfile=%s/%s" $tls.mountPath $tls.keyKey) }}
{{- end }}
{{- $url = printf "%s%s%s" $url (ternary "&" "?" (contains "?" $url)) (join "&" $files) }}
{{- end }}
{{- $url }}
{{- end }}

{{/*
Checks that fail the render with a clear message.
*/}}
{{- define "thinkgate.validate" -}}
{{- $drain := add .Values.gateway.drainDelaySeconds .Values.gateway.drainTimeoutSeconds }}
{{- if le (int .Values.terminationGracePeriodSeconds) (int $drain) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must be longer than gateway.drainDelaySeconds + gateway.drainTimeoutSeconds (%v): Kubernetes would kill streams still draining" .Values.terminationGracePeriodSeconds $drain) }}
{{- end }}
{{- if and .Values.redis.url (regexMatch "^[a-z+]+://[^/]*@" .Values.redis.url) }}
{{- fail "redis.url must not carry credentials: set redis.password (or auth.existingSecret with redis.existingSecretPassword)" }}
{{- end }}
{{- if .Values.redis.tls.existingSecret }}
{{- if or .Values.bundledRedis.enabled (not (regexMatch "^rediss(\\+cluster)?://" .Values.redis.url)) }}
{{- fail "redis.tls.existingSecret needs a rediss:// or rediss+cluster:// redis.url (TLS to the Redis it names)" }}
{{- end }}
{{- if ne (empty .Values.redis.tls.certKey) (empty .Values.redis.tls.keyKey) }}
{{- fail "redis.tls.certKey and redis.tls.keyKey: both (a client certificate and its key) or neither" }}
{{- end }}
{{- end }}
{{- if and .Values.tracing.enabled (not .Values.tracing.endpoint) }}
{{- fail "tracing.enabled needs tracing.endpoint (the collector's OTLP URL, e.g. http://otel-collector:4318)" }}
{{- end }}
{{- if and .Values.tracing.headersSecret.name (not .Values.tracing.headersSecret.key) }}
{{- fail "tracing.headersSecret.name needs tracing.headersSecret.key" }}
{{- end }}
{{- if and .Values.redis.existingSecretPassword (not .Values.auth.existingSecret) }}
{{- fail "redis.existingSecretPassword needs auth.existingSecret" }}
{{- end }}
{{- if and (not (or .Values.redis.url .Values.bundledRedis.enabled)) (gt (int .Values.gateway.workers) 1) }}
{{- fail (printf "gateway.workers %v without a shared store (redis.url empty, bundledRedis disabled): every worker would keep its own embedded store, and thinkgate serve refuses it. Set redis.url or bundledRedis.enabled, or gateway.workers: 1" .Values.gateway.workers) }}
{{- end }}
{{- if and (not (or .Values.redis.url .Values.bundledRedis.enabled)) (not .Values.allowEmbeddedStoreWithReplicas) }}
{{- if .Values.autoscaling.enabled }}
{{- fail "autoscaling.enabled without a shared store (redis.url empty, bundledRedis disabled): every pod would keep its own embedded store and a conversation whose requests land on different pods loses its thinking. Set redis.url or bundledRedis.enabled, or allowEmbeddedStoreWithReplicas: true to accept it" }}
{{- else if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "replicaCount %v without a shared store (redis.url empty, bundledRedis disabled): every pod would keep its own embedded store and a conversation whose requests land on different pods loses its thinking. Set redis.url or bundledRedis.enabled, or allowEmbeddedStoreWithReplicas: true to accept it" .Values.replicaCount) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Replicas the chart asks for at least (autoscaling: its minimum).
*/}}
{{- define "thinkgate.replicas" -}}
{{- if .Values.autoscaling.enabled }}{{ .Values.autoscaling.minReplicas }}{{ else }}{{ .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
Redis ports the NetworkPolicy lets the gateway reach, as a JSON list: the port of every host in
redis.url (6379 when a single node names none; for redis+sentinel these are the sentinels'),
6379 for bundledRedis, then networkPolicy.egress.redisPorts. A Sentinel-managed master listens
where Sentinel says, which no URL tells: its ports must be listed in redisPorts.
*/}}
{{- define "thinkgate.redisPorts" -}}
{{- $ports := list }}
{{- $url := .Values.redis.url }}
{{- if .Values.bundledRedis.enabled }}
{{- $ports = append $ports 6379 }}
{{- else if $url }}
{{- range splitList "," (regexReplaceAll "^[a-z+]+://([^/]*).*$" $url "${1}") }}
{{- $ports = append $ports (regexFind ":[0-9]+$" . | trimPrefix ":" | default "6379" | atoi) }}
{{- end }}
{{- if and (hasPrefix "redis+sentinel://" $url) (not .Values.networkPolicy.egress.redisPorts) }}
{{- fail "networkPolicy.egress: with redis+sentinel:// list the ports of the Redis nodes Sentinel may name as master in networkPolicy.egress.redisPorts (usually 6379): the URL only names the sentinels" }}
{{- end }}
{{- end }}
{{- range .Values.networkPolicy.egress.redisPorts }}
{{- $ports = append $ports (int .) }}
{{- end }}
{{- $ports | uniq | toJson }}
{{- end }}

{{/*
GATEWAY_SECRET for the chart's Secret, base64-encoded: auth.secret, else the value already in the
release's Secret, else a new random one, but only when the cluster can be read. An offline render
(helm template, Argo CD and other GitOps renderers, --dry-run=client) sees no Secret: a random
value would change on every render and orphan every stored conversation, so it fails instead.
*/}}
{{- define "thinkgate.gatewaySecret" -}}
{{- $name := include "thinkgate.fullname" . }}
{{- $key := .Values.auth.existingSecretKeys.secret }}
{{- $current := lookup "v1" "Secret" .Release.Namespace $name }}
{{- if .Values.auth.secret }}
{{- .Values.auth.secret | b64enc }}
{{- else if $current }}
{{- $data := $current.data | default dict }}
{{- if not (hasKey $data $key) }}
{{- fail (printf "Secret %s/%s has no key %q (was auth.existingSecretKeys.secret changed?): set auth.secret to the GATEWAY_SECRET in use, a new one orphans every stored conversation" .Release.Namespace $name $key) }}
{{- end }}
{{- index $data $key }}
{{- else if lookup "v1" "Secret" .Release.Namespace "" }}
{{- randAlphaNum 48 | b64enc }}
{{- else }}
{{- fail "auth.secret is empty and the cluster cannot be read (helm template, Argo CD or another GitOps renderer, --dry-run=client): a generated GATEWAY_SECRET would change on every render and orphan every stored conversation. Set auth.existingSecret (a Secret you manage; key auth.existingSecretKeys.secret) or auth.secret, or install with helm install/upgrade against the cluster (--dry-run=server to preview)" }}
{{- end }}
{{- end }}

{{/*
The port of tracing.endpoint (the NetworkPolicy's egress to the collector): the URL's own, else its scheme's.
*/}}
{{- define "thinkgate.tracingPort" -}}
{{- $u := urlParse .Values.tracing.endpoint -}}
{{- $hostport := regexReplaceAll "^\\[[^]]*\\]" $u.host "" -}}
{{- if contains ":" $hostport }}{{ last (splitList ":" $hostport) }}{{ else if eq $u.scheme "https" }}443{{ else }}80{{ end -}}
{{- end }}
