{{/* Chart name, overridable. */}}
{{- define "sealrelay.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full resource name: the release name, suffixed with the chart name unless it contains it. */}}
{{- define "sealrelay.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Name of the admin Service; leaves room for the suffix within 63 characters. */}}
{{- define "sealrelay.adminName" -}}
{{- printf "%s-admin" (include "sealrelay.fullname" . | trunc 57 | trimSuffix "-") -}}
{{- end -}}

{{- define "sealrelay.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Pod selector labels; never change them on an existing release. */}}
{{- define "sealrelay.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sealrelay.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sealrelay.labels" -}}
helm.sh/chart: {{ include "sealrelay.chart" . }}
{{ include "sealrelay.selectorLabels" . }}
app.kubernetes.io/version: {{ include "sealrelay.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sealrelay
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "sealrelay.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion | toString -}}
{{- end -}}

{{- define "sealrelay.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (include "sealrelay.imageTag" .) -}}
{{- end -}}
{{- end -}}

{{- define "sealrelay.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sealrelay.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
A value as an environment variable string: whole numbers without an exponent (YAML numbers
arrive as float64, which would print 1000000 as 1e+06), lists joined with commas.
*/}}
{{- define "sealrelay.envString" -}}
{{- $v := . -}}
{{- if kindIs "float64" $v -}}
{{- if eq $v (floor $v) -}}{{- int64 $v -}}{{- else -}}{{- $v -}}{{- end -}}
{{- else if kindIs "slice" $v -}}
{{- $parts := list -}}
{{- range $v }}{{ $parts = append $parts (toString .) }}{{ end -}}
{{- join "," $parts -}}
{{- else -}}
{{- toString $v -}}
{{- end -}}
{{- end -}}

{{/* True (non-empty output) when a value is set: not null, not "", not an empty list. */}}
{{- define "sealrelay.isSet" -}}
{{- $v := . -}}
{{- if kindIs "invalid" $v -}}
{{- else if kindIs "slice" $v -}}{{- if gt (len $v) 0 }}true{{ end -}}
{{- else if ne (toString $v) "" -}}true
{{- end -}}
{{- end -}}

{{/* host:port for a listener; IPv6 addresses get brackets. */}}
{{- define "sealrelay.listenAddr" -}}
{{- $host := index . 0 | toString -}}
{{- $port := index . 1 | int -}}
{{- if and (contains ":" $host) (not (hasPrefix "[" $host)) -}}
{{- printf "[%s]:%d" $host $port -}}
{{- else -}}
{{- printf "%s:%d" $host $port -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret that holds the APNs key, or "" when there is none. */}}
{{- define "sealrelay.apnsKeySecret" -}}
{{- if .Values.apns.authKey.existingSecret -}}
{{- .Values.apns.authKey.existingSecret -}}
{{- else if .Values.apns.authKey.value -}}
{{- include "sealrelay.fullname" . -}}
{{- end -}}
{{- end -}}

{{/* Secret name and key of the Redis URL, as "name/key", or "" when Redis is not configured. */}}
{{- define "sealrelay.redisSecretRef" -}}
{{- if .Values.redis.existingSecret -}}
{{- printf "%s/%s" .Values.redis.existingSecret .Values.redis.existingSecretKey -}}
{{- else if .Values.redis.url -}}
{{- printf "%s/%s" (include "sealrelay.fullname" .) "REDIS_URL" -}}
{{- end -}}
{{- end -}}

{{/* Secret name and key of RELAY_QUEUE_KEY, as "name/key", or "" when it is not set. */}}
{{- define "sealrelay.queueKeySecretRef" -}}
{{- if .Values.redis.queueKey.existingSecret -}}
{{- printf "%s/%s" .Values.redis.queueKey.existingSecret .Values.redis.queueKey.existingSecretKey -}}
{{- else if .Values.redis.queueKey.value -}}
{{- printf "%s/%s" (include "sealrelay.fullname" .) "RELAY_QUEUE_KEY" -}}
{{- end -}}
{{- end -}}

{{/* Whether the chart creates its own Secret (APNs key, Redis URL and/or queue key from values). */}}
{{- define "sealrelay.createSecret" -}}
{{- if or (and .Values.apns.authKey.value (not .Values.apns.authKey.existingSecret)) (and .Values.redis.url (not .Values.redis.existingSecret)) (and .Values.redis.queueKey.value (not .Values.redis.queueKey.existingSecret)) }}true{{ end -}}
{{- end -}}

{{/*
The literal configuration, as a YAML map of variable -> string. It becomes the ConfigMap the
container reads with envFrom. Values from .Values.env are applied last and win.
*/}}
{{- define "sealrelay.configData" -}}
{{- $v := .Values -}}
{{- $c := dict -}}
{{- $_ := set $c "RELAY_LISTEN" (include "sealrelay.listenAddr" (list $v.listenAddress $v.containerPorts.http)) -}}
{{- $_ := set $c "RELAY_ADMIN_LISTEN" (include "sealrelay.listenAddr" (list $v.listenAddress $v.containerPorts.admin)) -}}
{{- $map := dict
  "APNS_TEAM_ID" $v.apns.teamId
  "APNS_KEY_ID" $v.apns.keyId
  "APNS_TOPIC" $v.apns.topic
  "APNS_ENVIRONMENT" $v.apns.environment
  "APNS_PRODUCTION_URL" $v.apns.productionUrl
  "APNS_SANDBOX_URL" $v.apns.sandboxUrl
  "APNS_REQUEST_TIMEOUT_MS" $v.apns.requestTimeoutMs
  "RELAY_DRY_RUN" $v.apns.dryRun
  "RELAY_REDIS_PREFIX" $v.redis.keyPrefix
  "RELAY_REDIS_TIMEOUT_MS" $v.redis.timeoutMs
  "RELAY_REDIS_POOL_SIZE" $v.redis.poolSize
  "RELAY_REDIS_FAILURE" $v.redis.onFailure
  "RELAY_DEDUP_WINDOW_S" $v.policy.dedupWindowSeconds
  "RELAY_FLAP_MAX_FORWARDS" $v.policy.flapMaxForwards
  "RELAY_FLAP_WINDOW_S" $v.policy.flapWindowSeconds
  "RELAY_COOLDOWN_INTERVAL_S" $v.policy.cooldownIntervalSeconds
  "RELAY_FLAP_RESET_S" $v.policy.flapResetSeconds
  "RELAY_RATE_CAPACITY" $v.policy.rateCapacity
  "RELAY_RATE_REFILL_PER_S" $v.policy.rateRefillPerSecond
  "RELAY_TOMBSTONE_TTL_S" $v.policy.tombstoneTtlSeconds
  "RELAY_MAX_CIPHERTEXT_CHARS" $v.intake.maxCiphertextChars
  "RELAY_ALERT_TITLE" $v.intake.alertTitle
  "RELAY_ALERT_BODY" $v.intake.alertBody
  "RELAY_MAX_INFLIGHT" $v.intake.maxInflight
  "RELAY_HEADER_TIMEOUT_MS" $v.intake.headerTimeoutMs
  "RELAY_BODY_TIMEOUT_MS" $v.intake.bodyTimeoutMs
  "RELAY_RETRY_LEASE_MS" $v.apns.retryLeaseMs
  "RELAY_IP_RATE_CAPACITY" $v.intake.ipRateCapacity
  "RELAY_IP_RATE_REFILL_PER_S" $v.intake.ipRateRefillPerSecond
  "RELAY_TRUSTED_PROXIES" $v.intake.trustedProxies
  "RELAY_SHUTDOWN_DELAY_S" $v.shutdown.delaySeconds
  "RELAY_SHUTDOWN_GRACE_S" $v.shutdown.graceSeconds
  "RELAY_REPLICA_NAME" $v.replicaName
  "RELAY_LOG_FORMAT" $v.logging.format
  "RUST_LOG" $v.logging.level
  "OTEL_EXPORTER_OTLP_ENDPOINT" $v.tracing.otlpEndpoint
  "OTEL_SERVICE_NAME" $v.tracing.serviceName
-}}
{{- range $name, $value := $map -}}
{{- if include "sealrelay.isSet" $value -}}
{{- $_ := set $c $name (include "sealrelay.envString" $value) -}}
{{- end -}}
{{- end -}}
{{- if and (include "sealrelay.apnsKeySecret" .) $v.apns.authKey.mountAsFile -}}
{{- $_ := set $c "APNS_AUTH_KEY_FILE" (printf "%s/%s" (trimSuffix "/" $v.apns.authKey.mountPath) $v.apns.authKey.fileName) -}}
{{- end -}}
{{- if $v.apns.caBundle.configMap -}}
{{- $_ := set $c "APNS_CA_FILE" (printf "%s/%s" (trimSuffix "/" $v.apns.caBundle.mountPath) $v.apns.caBundle.key) -}}
{{- end -}}
{{- range $name, $value := $v.env -}}
{{- $_ := set $c $name (include "sealrelay.envString" $value) -}}
{{- end -}}
{{- /* extraEnv entries are container env entries, which win over envFrom: leave them out. */ -}}
{{- range $v.extraEnv -}}
{{- $_ := unset $c (toString .name) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* Names set by .Values.extraEnv, as a dict name -> entry. */}}
{{- define "sealrelay.extraEnvNames" -}}
{{- $out := dict -}}
{{- range .Values.extraEnv -}}
{{- $_ := set $out (toString .name) . -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/*
The effective value of a variable as the container will see it, for the chart's own
arithmetic: an extraEnv entry (a literal value; "<valueFrom>" when it is read from elsewhere),
then .Values.env, then the given fallback. Call with (list $ "NAME" fallback).
*/}}
{{- define "sealrelay.effectiveVar" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $out := index . 2 | toString -}}
{{- if hasKey $root.Values.env $name -}}
{{- $out = include "sealrelay.envString" (index $root.Values.env $name) -}}
{{- end -}}
{{- range $root.Values.extraEnv -}}
{{- if eq (toString .name) $name -}}
{{- if hasKey . "value" }}{{ $out = toString .value }}{{ else }}{{ $out = "<valueFrom>" }}{{ end -}}
{{- end -}}
{{- end -}}
{{- $out -}}
{{- end -}}

{{/* True when a variable is set through env or extraEnv (by the user, not the chart). */}}
{{- define "sealrelay.userSetsVar" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- if hasKey $root.Values.env $name }}true{{ end -}}
{{- range $root.Values.extraEnv }}{{ if eq (toString .name) $name }}true{{ end }}{{ end -}}
{{- end -}}

{{/*
Variables that come from a Secret or the downward API, as container env entries. A variable
also present in .Values.env is left to the ConfigMap, so each name is set exactly once.
*/}}
{{- define "sealrelay.secretEnv" -}}
{{- $v := .Values -}}
{{- $redis := include "sealrelay.redisSecretRef" . -}}
{{- if and $redis (not (include "sealrelay.userSetsVar" (list . "REDIS_URL"))) }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ dir $redis | quote }}
      key: {{ base $redis | quote }}
{{- end }}
{{- $queueKey := include "sealrelay.queueKeySecretRef" . -}}
{{- if and $queueKey (not (include "sealrelay.userSetsVar" (list . "RELAY_QUEUE_KEY"))) }}
- name: RELAY_QUEUE_KEY
  valueFrom:
    secretKeyRef:
      name: {{ dir $queueKey | quote }}
      key: {{ base $queueKey | quote }}
{{- end }}
{{- $apns := include "sealrelay.apnsKeySecret" . -}}
{{- if and $apns (not $v.apns.authKey.mountAsFile) (not (include "sealrelay.userSetsVar" (list . "APNS_AUTH_KEY"))) }}
- name: APNS_AUTH_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $apns | quote }}
      key: {{ $v.apns.authKey.secretKey | quote }}
{{- end }}
{{- if and (not $v.replicaName) (not (include "sealrelay.userSetsVar" (list . "RELAY_REPLICA_NAME"))) }}
- name: RELAY_REPLICA_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- end -}}

{{/*
delay + grace seconds the relay takes to stop after SIGTERM: the effective
RELAY_SHUTDOWN_DELAY_S and RELAY_SHUTDOWN_GRACE_S (extraEnv, then env, then shutdown.*, then
the binary's defaults 5 and 25). A value the chart cannot read (valueFrom) or that is not a
whole number fails unless terminationGracePeriodSeconds is explicit.
*/}}
{{- define "sealrelay.shutdownBudget" -}}
{{- $delay := include "sealrelay.effectiveVar" (list . "RELAY_SHUTDOWN_DELAY_S" (ternary (include "sealrelay.envString" .Values.shutdown.delaySeconds) "5" (not (empty (include "sealrelay.isSet" .Values.shutdown.delaySeconds))))) -}}
{{- $grace := include "sealrelay.effectiveVar" (list . "RELAY_SHUTDOWN_GRACE_S" (ternary (include "sealrelay.envString" .Values.shutdown.graceSeconds) "25" (not (empty (include "sealrelay.isSet" .Values.shutdown.graceSeconds))))) -}}
{{- if not (and (regexMatch "^[0-9]+$" $delay) (regexMatch "^[0-9]+$" $grace)) -}}
{{- if not (include "sealrelay.isSet" .Values.terminationGracePeriodSeconds) -}}
{{- fail (printf "RELAY_SHUTDOWN_DELAY_S=%s / RELAY_SHUTDOWN_GRACE_S=%s cannot be read by the chart (valueFrom, or not a whole number): set terminationGracePeriodSeconds explicitly, above their sum" $delay $grace) -}}
{{- end -}}
0
{{- else -}}
{{- add (int $delay) (int $grace) -}}
{{- end -}}
{{- end -}}

{{- define "sealrelay.terminationGracePeriod" -}}
{{- if include "sealrelay.isSet" .Values.terminationGracePeriodSeconds -}}
{{- .Values.terminationGracePeriodSeconds | int -}}
{{- else -}}
{{- add (include "sealrelay.shutdownBudget" . | int) 10 -}}
{{- end -}}
{{- end -}}

{{/* Refuses value combinations the relay would reject or run wrongly with. */}}
{{- define "sealrelay.validate" -}}
{{- $v := .Values -}}
{{- if and $v.apns.authKey.value $v.apns.authKey.existingSecret -}}
{{- fail "apns.authKey: set either value or existingSecret, not both" -}}
{{- end -}}
{{- if and $v.redis.url $v.redis.existingSecret -}}
{{- fail "redis: set either url or existingSecret, not both" -}}
{{- end -}}
{{- if and $v.redis.queueKey.value $v.redis.queueKey.existingSecret -}}
{{- fail "redis.queueKey: set either value or existingSecret, not both" -}}
{{- end -}}
{{- if and $v.redis.url (not (regexMatch "^(redis|rediss|redis-cluster|rediss-cluster|redis-sentinel)://" $v.redis.url)) -}}
{{- fail "redis.url must start with redis://, rediss://, redis-cluster://, rediss-cluster:// or redis-sentinel://" -}}
{{- end -}}
{{- $hasRedis := include "sealrelay.hasRedis" . -}}
{{- if and (not $hasRedis) (or $v.autoscaling.enabled (gt (int $v.replicaCount) 1)) -}}
{{- fail "more than one replica (replicaCount > 1 or autoscaling.enabled) needs Redis: set redis.url or redis.existingSecret; without it every replica keeps its own policy state and duplicates are not coalesced" -}}
{{- end -}}
{{- $hasKey := include "sealrelay.hasApnsKey" . -}}
{{- $creds := dict "apns.teamId" (or $v.apns.teamId (include "sealrelay.userSetsVar" (list . "APNS_TEAM_ID"))) "apns.keyId" (or $v.apns.keyId (include "sealrelay.userSetsVar" (list . "APNS_KEY_ID"))) "apns.topic" (or $v.apns.topic (include "sealrelay.userSetsVar" (list . "APNS_TOPIC"))) "apns.authKey" $hasKey -}}
{{- $missing := list -}}
{{- range $k, $set := $creds -}}{{- if not $set }}{{ $missing = append $missing $k }}{{ end -}}{{- end -}}
{{- if and (gt (len $missing) 0) (lt (len $missing) 4) -}}
{{- fail (printf "APNs credentials are all or nothing; missing: %s" (join ", " $missing)) -}}
{{- end -}}
{{- if and (eq (len $missing) 0) (eq (toString $v.apns.dryRun) "true") -}}
{{- fail "apns.dryRun is only valid without APNs credentials" -}}
{{- end -}}
{{- $tgp := include "sealrelay.terminationGracePeriod" . | int -}}
{{- $budget := include "sealrelay.shutdownBudget" . | int -}}
{{- if le $tgp $budget -}}
{{- fail (printf "terminationGracePeriodSeconds (%d) must exceed shutdown.delaySeconds + shutdown.graceSeconds (%d), or the relay is killed mid-drain" $tgp $budget) -}}
{{- end -}}
{{- end -}}

{{/* True when Redis is configured (values, env or extraEnv). */}}
{{- define "sealrelay.hasRedis" -}}
{{- if or .Values.redis.url .Values.redis.existingSecret (include "sealrelay.userSetsVar" (list . "REDIS_URL")) }}true{{ end -}}
{{- end -}}

{{/* True when an APNs key is configured (a Secret, or APNS_AUTH_KEY[_FILE] through env/extraEnv). */}}
{{- define "sealrelay.hasApnsKey" -}}
{{- if or (include "sealrelay.apnsKeySecret" .) (include "sealrelay.userSetsVar" (list . "APNS_AUTH_KEY")) (include "sealrelay.userSetsVar" (list . "APNS_AUTH_KEY_FILE")) }}true{{ end -}}
{{- end -}}

{{/*
TCP ports the relay must reach Redis on, for the NetworkPolicy, as a comma-separated list:
networkPolicy.egress.redisPorts, plus what a readable URL (redis.url, env.REDIS_URL, or an
extraEnv literal) names: its host's port (6379 when absent), every node= port of a
redis-cluster:// URL, and for redis-sentinel:// the sentinel ports (node=) plus 26379 and
6379 (the master's usual port). A URL in an existing Secret cannot be read: redisPorts must
then list every port (empty: 6379).
*/}}
{{- define "sealrelay.redisPorts" -}}
{{- $ports := dict -}}
{{- range .Values.networkPolicy.egress.redisPorts -}}
{{- $_ := set $ports (toString (int .)) true -}}
{{- end -}}
{{- $url := .Values.redis.url | default "" -}}
{{- $eff := include "sealrelay.effectiveVar" (list . "REDIS_URL" $url) -}}
{{- if ne $eff "<valueFrom>" }}{{ $url = $eff }}{{ end -}}
{{- if $url -}}
{{- $u := urlParse $url -}}
{{- $scheme := $u.scheme | lower -}}
{{- $hostPort := regexReplaceAll "^.*@" (toString $u.host) "" -}}
{{- if regexMatch ":[0-9]+$" $hostPort -}}
{{- $_ := set $ports (regexFind "[0-9]+$" $hostPort) true -}}
{{- else -}}
{{- $_ := set $ports (ternary "26379" "6379" (eq $scheme "redis-sentinel")) true -}}
{{- end -}}
{{- range splitList "&" (toString $u.query) -}}
{{- if hasPrefix "node=" . -}}
{{- $node := trimPrefix "node=" . | replace "%3A" ":" | replace "%3a" ":" -}}
{{- if regexMatch ":[0-9]+$" $node -}}
{{- $_ := set $ports (regexFind "[0-9]+$" $node) true -}}
{{- else -}}
{{- $_ := set $ports (ternary "26379" "6379" (eq $scheme "redis-sentinel")) true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if eq $scheme "redis-sentinel" -}}
{{- /* The sentinels' default port, and the master's usual one (list others in redisPorts). */ -}}
{{- $_ := set $ports "26379" true -}}
{{- $_ := set $ports "6379" true -}}
{{- end -}}
{{- end -}}
{{- if not $ports -}}
{{- $_ := set $ports "6379" true -}}
{{- end -}}
{{- $sorted := list -}}
{{- range $p, $_ := $ports }}{{ $sorted = append $sorted (int $p) }}{{ end -}}
{{- $sorted = sortAlpha (toStrings $sorted) -}}
{{- join "," $sorted -}}
{{- end -}}

{{/* Labels of the helm test Pod: the chart's labels minus the pod selector, so no Service,
PodDisruptionBudget or NetworkPolicy of the relay selects it. */}}
{{- define "sealrelay.testLabels" -}}
helm.sh/chart: {{ include "sealrelay.chart" . }}
app.kubernetes.io/name: {{ printf "%s-smoke" (include "sealrelay.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: smoke-test
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sealrelay
{{- end -}}

{{/* Whether the cluster serves prometheus-operator's API (ServiceMonitor, PrometheusRule). */}}
{{- define "sealrelay.hasMonitoringAPI" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end -}}
{{- end -}}

{{/* Whether the cluster serves the Gateway API (HTTPRoute). */}}
{{- define "sealrelay.hasGatewayAPI" -}}
{{- if .Capabilities.APIVersions.Has "gateway.networking.k8s.io/v1" }}true{{ end -}}
{{- end -}}
