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

{{/* Whether the chart creates its own Secret (APNs key and/or Redis URL from values). */}}
{{- define "sealrelay.createSecret" -}}
{{- if or (and .Values.apns.authKey.value (not .Values.apns.authKey.existingSecret)) (and .Values.redis.url (not .Values.redis.existingSecret)) }}true{{ end -}}
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
{{- toYaml $c -}}
{{- end -}}

{{/*
Variables that come from a Secret or the downward API, as container env entries. A variable
also present in .Values.env is left to the ConfigMap, so each name is set exactly once.
*/}}
{{- define "sealrelay.secretEnv" -}}
{{- $v := .Values -}}
{{- $redis := include "sealrelay.redisSecretRef" . -}}
{{- if and $redis (not (hasKey $v.env "REDIS_URL")) }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ dir $redis | quote }}
      key: {{ base $redis | quote }}
{{- end }}
{{- $apns := include "sealrelay.apnsKeySecret" . -}}
{{- if and $apns (not $v.apns.authKey.mountAsFile) (not (hasKey $v.env "APNS_AUTH_KEY")) }}
- name: APNS_AUTH_KEY
  valueFrom:
    secretKeyRef:
      name: {{ $apns | quote }}
      key: {{ $v.apns.authKey.secretKey | quote }}
{{- end }}
{{- if and (not $v.replicaName) (not (hasKey $v.env "RELAY_REPLICA_NAME")) }}
- name: RELAY_REPLICA_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
{{- end }}
{{- end -}}

{{/* The shutdown budget Kubernetes grants: explicit, or delay + grace + 10 seconds. */}}
{{/* delay + grace seconds (the binary's defaults, 5 and 25, where unset). */}}
{{- define "sealrelay.shutdownBudget" -}}
{{- $delay := 5 -}}
{{- $grace := 25 -}}
{{- if include "sealrelay.isSet" .Values.shutdown.delaySeconds }}{{ $delay = int .Values.shutdown.delaySeconds }}{{ end -}}
{{- if include "sealrelay.isSet" .Values.shutdown.graceSeconds }}{{ $grace = int .Values.shutdown.graceSeconds }}{{ end -}}
{{- add $delay $grace -}}
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
{{- if and $v.redis.url (not (regexMatch "^(redis|rediss|redis-cluster|redis-sentinel)://" $v.redis.url)) -}}
{{- fail "redis.url must start with redis://, rediss://, redis-cluster:// or redis-sentinel://" -}}
{{- end -}}
{{- $hasRedis := or $v.redis.url $v.redis.existingSecret (hasKey $v.env "REDIS_URL") -}}
{{- if and (not $hasRedis) (or $v.autoscaling.enabled (gt (int $v.replicaCount) 1)) -}}
{{- fail "more than one replica (replicaCount > 1 or autoscaling.enabled) needs Redis: set redis.url or redis.existingSecret; without it every replica keeps its own policy state and duplicates are not coalesced" -}}
{{- end -}}
{{- $hasKey := or (include "sealrelay.apnsKeySecret" .) (hasKey $v.env "APNS_AUTH_KEY") (hasKey $v.env "APNS_AUTH_KEY_FILE") -}}
{{- $creds := dict "apns.teamId" (or $v.apns.teamId (hasKey $v.env "APNS_TEAM_ID")) "apns.keyId" (or $v.apns.keyId (hasKey $v.env "APNS_KEY_ID")) "apns.topic" (or $v.apns.topic (hasKey $v.env "APNS_TOPIC")) "apns.authKey" $hasKey -}}
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
