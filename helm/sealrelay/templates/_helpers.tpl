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

{{/*
Secret name and key of a Secret-backed value with existingSecret / existingSecretKey / value
(tracing.headers, fcm.serviceAccount, ice.turnSecret, adminApi.tcp.token, ...), as
"name/key": the existing Secret, or the chart's own Secret under chartKey when only the value
is given; "" when neither. Call with (list $ .Values.<obj> "<chartKey>").
*/}}
{{- define "sealrelay.secretRef" -}}
{{- $root := index . 0 -}}
{{- $s := index . 1 -}}
{{- $key := index . 2 -}}
{{- if $s.existingSecret -}}
{{- printf "%s/%s" $s.existingSecret $s.existingSecretKey -}}
{{- else if $s.value -}}
{{- printf "%s/%s" (include "sealrelay.fullname" $root) $key -}}
{{- end -}}
{{- end -}}

{{/*
The Secret-backed values the chart stores in its own Secret when given inline, as a YAML
list of [object, key in the chart's Secret]. One list, so secret.yaml, createSecret and the
validation agree.
*/}}
{{- define "sealrelay.inlineSecrets" -}}
{{- $v := .Values -}}
- [tracing.headers, OTEL_EXPORTER_OTLP_HEADERS]
- [tracing.tracesHeaders, OTEL_EXPORTER_OTLP_TRACES_HEADERS]
- [adminApi.tcp.token, admin-token]
- [fcm.serviceAccount, FCM_SERVICE_ACCOUNT]
- [ice.turnSecret, RELAY_ICE_TURN_SECRET]
- [ice.cloudflare.apiToken, RELAY_ICE_CLOUDFLARE_API_TOKEN]
{{- end -}}

{{/* The values object at a dotted path ("fcm.serviceAccount"). Call with (list $ "path"). */}}
{{- define "sealrelay.valuesAt" -}}
{{- $node := (index . 0).Values -}}
{{- range splitList "." (index . 1) }}{{ $node = index $node . }}{{ end -}}
{{- toYaml $node -}}
{{- end -}}

{{/* Whether the chart creates its own Secret (any secret value given inline instead of an existingSecret). */}}
{{- define "sealrelay.createSecret" -}}
{{- $any := or (and .Values.apns.authKey.value (not .Values.apns.authKey.existingSecret)) (and .Values.redis.url (not .Values.redis.existingSecret)) (and .Values.redis.queueKey.value (not .Values.redis.queueKey.existingSecret)) -}}
{{- range (include "sealrelay.inlineSecrets" . | fromYamlArray) -}}
{{- $s := include "sealrelay.valuesAt" (list $ (index . 0)) | fromYaml -}}
{{- if and $s.value (not $s.existingSecret) }}{{ $any = true }}{{ end -}}
{{- end -}}
{{- if $any }}true{{ end -}}
{{- end -}}

{{/* True when FCM is configured: a service account Secret, or FCM_SERVICE_ACCOUNT[_FILE] through env/extraEnv. */}}
{{- define "sealrelay.hasFcm" -}}
{{- if or (include "sealrelay.secretRef" (list . .Values.fcm.serviceAccount "FCM_SERVICE_ACCOUNT")) (include "sealrelay.userSetsVar" (list . "FCM_SERVICE_ACCOUNT")) (include "sealrelay.userSetsVar" (list . "FCM_SERVICE_ACCOUNT_FILE")) }}true{{ end -}}
{{- end -}}

{{/* True when the Cloudflare ICE provider is configured (key id in values, env or extraEnv). */}}
{{- define "sealrelay.hasCloudflare" -}}
{{- if or .Values.ice.cloudflare.keyId (include "sealrelay.userSetsVar" (list . "RELAY_ICE_CLOUDFLARE_KEY_ID")) }}true{{ end -}}
{{- end -}}

{{/* True when trace export is on (either endpoint, in values, env or extraEnv). */}}
{{- define "sealrelay.hasTracing" -}}
{{- if or .Values.tracing.otlpEndpoint .Values.tracing.tracesEndpoint (include "sealrelay.userSetsVar" (list . "OTEL_EXPORTER_OTLP_ENDPOINT")) (include "sealrelay.userSetsVar" (list . "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) }}true{{ end -}}
{{- end -}}

{{/* The TCP port a URL connects to: its explicit port, else 80 for http and 443 otherwise. */}}
{{- define "sealrelay.urlPort" -}}
{{- $u := urlParse (toString .) -}}
{{- $host := regexReplaceAll "^.*@" (toString $u.host) "" -}}
{{- if regexMatch ":[0-9]+$" $host -}}
{{- regexFind "[0-9]+$" $host -}}
{{- else if eq (lower (toString $u.scheme)) "http" -}}
80
{{- else -}}
443
{{- end -}}
{{- end -}}

{{/*
Sorted, de-duplicated comma-separated TCP ports the relay calls for one upstream: the given
fixed ports, plus the port of each URL (variable name -> value/default: env and extraEnv
literals win; a valueFrom URL adds nothing). Call with (list $ (list fixed...) (dict NAME url)).
*/}}
{{- define "sealrelay.upstreamPorts" -}}
{{- $root := index . 0 -}}
{{- $ports := dict -}}
{{- range index . 1 }}{{ $_ := set $ports (toString (int .)) true }}{{ end -}}
{{- range $name, $url := index . 2 -}}
{{- $eff := include "sealrelay.effectiveVar" (list $root $name (toString $url)) -}}
{{- if and $eff (ne $eff "<valueFrom>") -}}
{{- $_ := set $ports (include "sealrelay.urlPort" $eff) true -}}
{{- end -}}
{{- end -}}
{{- $sorted := list -}}
{{- range $p, $_ := $ports }}{{ $sorted = append $sorted (printf "%05d" (int $p)) }}{{ end -}}
{{- $out := list -}}
{{- range sortAlpha $sorted }}{{ $out = append $out (toString (atoi .)) }}{{ end -}}
{{- join "," $out -}}
{{- end -}}

{{/* The v1 intake mode the relay will run with: public, local, off, or <valueFrom>. */}}
{{- define "sealrelay.v1Intake" -}}
{{- include "sealrelay.effectiveVar" (list . "RELAY_V1_INTAKE" (.Values.v1.intake | default "public")) -}}
{{- end -}}

{{/*
The admin socket's path as the relay will see it ("" when disabled): extraEnv, then env, then
adminApi.socket (enabled: path or the default /run/sealrelay/admin.sock; disabled: "").
*/}}
{{- define "sealrelay.adminSocketPath" -}}
{{- $fallback := "" -}}
{{- if .Values.adminApi.socket.enabled -}}
{{- $fallback = .Values.adminApi.socket.path | default "/run/sealrelay/admin.sock" | toString -}}
{{- end -}}
{{- include "sealrelay.effectiveVar" (list . "RELAY_ADMIN_SOCKET" $fallback) -}}
{{- end -}}

{{/* The directory the chart mounts an emptyDir at for the admin socket, or "" for none (disabled, or /tmp which is mounted already). */}}
{{- define "sealrelay.adminSocketDir" -}}
{{- $path := include "sealrelay.adminSocketPath" . -}}
{{- if and $path (ne $path "<valueFrom>") -}}
{{- $d := dir $path -}}
{{- if ne $d "/tmp" }}{{ $d }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* Secret name/key of the admin API's TCP bearer token, or "". */}}
{{- define "sealrelay.adminTokenRef" -}}
{{- include "sealrelay.secretRef" (list . .Values.adminApi.tcp.token "admin-token") -}}
{{- end -}}

{{/*
OTEL_RESOURCE_ATTRIBUTES: the pod's Kubernetes identity from the downward API (POD_NAMESPACE,
POD_NAME and NODE_NAME are defined before it in the container env, so $(VAR) expands), the
Deployment's name, then the user's attributes: env.OTEL_RESOURCE_ATTRIBUTES, else
tracing.resourceAttributes.
*/}}
{{- define "sealrelay.resourceAttributes" -}}
{{- $attrs := list "k8s.namespace.name=$(POD_NAMESPACE)" "k8s.pod.name=$(POD_NAME)" "k8s.node.name=$(NODE_NAME)" (printf "k8s.deployment.name=%s" (include "sealrelay.fullname" .)) -}}
{{- $user := .Values.tracing.resourceAttributes | default "" | toString -}}
{{- if hasKey .Values.env "OTEL_RESOURCE_ATTRIBUTES" -}}
{{- $user = include "sealrelay.envString" (index .Values.env "OTEL_RESOURCE_ATTRIBUTES") -}}
{{- end -}}
{{- if $user }}{{ $attrs = append $attrs (trimPrefix "," $user) }}{{ end -}}
{{- join "," $attrs -}}
{{- end -}}

{{/* True when extraEnv sets a name (it then replaces the chart's own entry). */}}
{{- define "sealrelay.extraEnvSets" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- range $root.Values.extraEnv }}{{ if eq (toString .name) $name }}true{{ end }}{{ end -}}
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
  "RELAY_WORKER_THREADS" $v.workerThreads
  "RELAY_RUNTIME" $v.runtime
  "RELAY_LOG_FORMAT" $v.logging.format
  "RUST_LOG" $v.logging.level
  "OTEL_EXPORTER_OTLP_ENDPOINT" $v.tracing.otlpEndpoint
  "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" $v.tracing.tracesEndpoint
  "OTEL_SERVICE_NAME" $v.tracing.serviceName
  "OTEL_EXPORTER_OTLP_PROTOCOL" $v.tracing.protocol
  "OTEL_EXPORTER_OTLP_TIMEOUT" $v.tracing.timeoutMs
  "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT" $v.tracing.tracesTimeoutMs
  "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" $v.tracing.tracesProtocol
  "OTEL_EXPORTER_OTLP_COMPRESSION" $v.tracing.compression
  "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION" $v.tracing.tracesCompression
  "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT" $v.tracing.spanLimits.attributeCount
  "OTEL_SPAN_EVENT_COUNT_LIMIT" $v.tracing.spanLimits.eventCount
  "OTEL_SPAN_LINK_COUNT_LIMIT" $v.tracing.spanLimits.linkCount
  "OTEL_TRACES_SAMPLER" $v.tracing.sampler.name
  "OTEL_TRACES_SAMPLER_ARG" $v.tracing.sampler.ratio
  "OTEL_BSP_SCHEDULE_DELAY" $v.tracing.batch.scheduleDelayMs
  "OTEL_BSP_MAX_QUEUE_SIZE" $v.tracing.batch.maxQueueSize
  "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" $v.tracing.batch.maxExportBatchSize
  "RELAY_AASA_APP_IDS" $v.pages.aasaAppIds
  "RELAY_V1_INTAKE" $v.v1.intake
  "RELAY_V1_SUNSET" $v.v1.sunset
  "RELAY_RECEIPT_TTL_S" $v.signed.receiptTtlSeconds
  "RELAY_SIGNED_MAX_SETTLEMENTS" $v.signed.maxSettlements
  "RELAY_ADMIN_SOCKET" $v.adminApi.socket.path
  "RELAY_ADMIN_API_LISTEN" $v.adminApi.tcp.listen
  "RELAY_APPS" $v.mailbox.apps
  "RELAY_MAILBOX_IDLE_S" $v.mailbox.idleSeconds
  "RELAY_MAILBOX_MAX_ENVELOPE_BYTES" $v.mailbox.maxEnvelopeBytes
  "RELAY_MAILBOX_MAX_ENVELOPES" $v.mailbox.maxEnvelopes
  "RELAY_MAILBOX_MAX_SOCKETS" $v.mailbox.maxSocketsPerMailbox
  "RELAY_MAX_SOCKETS" $v.mailbox.maxSockets
  "RELAY_SOCKET_PING_S" $v.mailbox.socketPingSeconds
  "RELAY_SIGNAL_BUFFER_BYTES" $v.mailbox.signalBufferBytes
  "FCM_URL" $v.fcm.url
  "RELAY_ICE_TTL_S" $v.ice.ttlSeconds
  "RELAY_ICE_STUN_URLS" $v.ice.stunUrls
  "RELAY_ICE_TURN_URLS" $v.ice.turnUrls
  "RELAY_ICE_CLOUDFLARE_KEY_ID" $v.ice.cloudflare.keyId
  "RELAY_ICE_CLOUDFLARE_URL" $v.ice.cloudflare.url
  "RELAY_REGION" $v.region.name
  "RELAY_REGION_PEERS" $v.region.peers
  "RELAY_REGION_TIMEOUT_MS" $v.region.timeoutMs
  "RELAY_REGION_PROBE_MS" $v.region.probeMs
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
{{- if $v.tracing.caBundle.configMap -}}
{{- $_ := set $c "OTEL_EXPORTER_OTLP_CERTIFICATE" (printf "%s/%s" (trimSuffix "/" $v.tracing.caBundle.mountPath) $v.tracing.caBundle.key) -}}
{{- end -}}
{{- if $v.fcm.caBundle.configMap -}}
{{- $_ := set $c "FCM_CA_FILE" (printf "%s/%s" (trimSuffix "/" $v.fcm.caBundle.mountPath) $v.fcm.caBundle.key) -}}
{{- end -}}
{{- if $v.ice.cloudflare.caBundle.configMap -}}
{{- $_ := set $c "RELAY_ICE_CLOUDFLARE_CA_FILE" (printf "%s/%s" (trimSuffix "/" $v.ice.cloudflare.caBundle.mountPath) $v.ice.cloudflare.caBundle.key) -}}
{{- end -}}
{{- if and (include "sealrelay.secretRef" (list . $v.fcm.serviceAccount "FCM_SERVICE_ACCOUNT")) $v.fcm.serviceAccount.mountAsFile -}}
{{- $_ := set $c "FCM_SERVICE_ACCOUNT_FILE" (printf "%s/%s" (trimSuffix "/" $v.fcm.serviceAccount.mountPath) $v.fcm.serviceAccount.fileName) -}}
{{- end -}}
{{- if and (include "sealrelay.secretRef" (list . $v.ice.turnSecret "RELAY_ICE_TURN_SECRET")) $v.ice.turnSecret.mountAsFile -}}
{{- $_ := set $c "RELAY_ICE_TURN_SECRET_FILE" (printf "%s/%s" (trimSuffix "/" $v.ice.turnSecret.mountPath) $v.ice.turnSecret.fileName) -}}
{{- end -}}
{{- if and (include "sealrelay.secretRef" (list . $v.ice.cloudflare.apiToken "RELAY_ICE_CLOUDFLARE_API_TOKEN")) $v.ice.cloudflare.apiToken.mountAsFile -}}
{{- $_ := set $c "RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE" (printf "%s/%s" (trimSuffix "/" $v.ice.cloudflare.apiToken.mountPath) $v.ice.cloudflare.apiToken.fileName) -}}
{{- end -}}
{{- if include "sealrelay.adminTokenRef" . -}}
{{- $_ := set $c "RELAY_ADMIN_TOKEN_FILE" (printf "%s/token" (trimSuffix "/" $v.adminApi.tcp.token.mountPath)) -}}
{{- end -}}
{{- if $v.region.name -}}
{{- $_ := set $c "RELAY_REGION_LISTEN" (include "sealrelay.listenAddr" (list $v.listenAddress $v.region.port)) -}}
{{- if $v.region.key.existingSecret -}}
{{- $_ := set $c "RELAY_REGION_KEY_FILE" (printf "%s/key" (trimSuffix "/" $v.region.key.mountPath)) -}}
{{- end -}}
{{- if $v.region.key.previousSecret -}}
{{- $_ := set $c "RELAY_REGION_KEY_PREVIOUS_FILE" (printf "%s/previous" (trimSuffix "/" $v.region.key.mountPath)) -}}
{{- end -}}
{{- if $v.region.tls.existingSecret -}}
{{- $_ := set $c "RELAY_REGION_TLS_CERT_FILE" (printf "%s/tls.crt" (trimSuffix "/" $v.region.tls.mountPath)) -}}
{{- $_ := set $c "RELAY_REGION_TLS_KEY_FILE" (printf "%s/tls.key" (trimSuffix "/" $v.region.tls.mountPath)) -}}
{{- end -}}
{{- if $v.region.caBundle.configMap -}}
{{- $_ := set $c "RELAY_REGION_CA_FILE" (printf "%s/%s" (trimSuffix "/" $v.region.caBundle.mountPath) $v.region.caBundle.key) -}}
{{- end -}}
{{- end -}}
{{- /* The one variable passed empty on purpose: "" is the relay's "socket disabled". */ -}}
{{- if not $v.adminApi.socket.enabled -}}
{{- $_ := set $c "RELAY_ADMIN_SOCKET" "" -}}
{{- end -}}
{{- range $name, $value := $v.env -}}
{{- $_ := set $c $name (include "sealrelay.envString" $value) -}}
{{- end -}}
{{- /* A container env entry (secretEnv), for $(VAR) interpolation: never in the ConfigMap. */ -}}
{{- $_ := unset $c "OTEL_RESOURCE_ATTRIBUTES" -}}
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
{{- /* The downward API first: OTEL_RESOURCE_ATTRIBUTES below refers to these. */ -}}
{{- if not (include "sealrelay.extraEnvSets" (list . "OTEL_RESOURCE_ATTRIBUTES")) }}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: NODE_NAME
  valueFrom:
    fieldRef:
      fieldPath: spec.nodeName
- name: OTEL_RESOURCE_ATTRIBUTES
  value: {{ include "sealrelay.resourceAttributes" . | quote }}
{{- end }}
{{- range $e := list (list "OTEL_EXPORTER_OTLP_HEADERS" $v.tracing.headers true) (list "OTEL_EXPORTER_OTLP_TRACES_HEADERS" $v.tracing.tracesHeaders true) (list "FCM_SERVICE_ACCOUNT" $v.fcm.serviceAccount (not $v.fcm.serviceAccount.mountAsFile)) (list "RELAY_ICE_TURN_SECRET" $v.ice.turnSecret (not $v.ice.turnSecret.mountAsFile)) (list "RELAY_ICE_CLOUDFLARE_API_TOKEN" $v.ice.cloudflare.apiToken (not $v.ice.cloudflare.apiToken.mountAsFile)) }}
{{- $name := index $e 0 -}}
{{- $ref := include "sealrelay.secretRef" (list $ (index $e 1) $name) -}}
{{- if and $ref (index $e 2) (not (include "sealrelay.userSetsVar" (list $ $name))) }}
- name: {{ $name }}
  valueFrom:
    secretKeyRef:
      name: {{ dir $ref | quote }}
      key: {{ base $ref | quote }}
{{- end }}
{{- end }}
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
{{- if $v.region.name -}}
{{- if not $v.region.peers -}}
{{- fail "region.name is set but region.peers is not: name every other region as name=url (RELAY_REGION_PEERS)" -}}
{{- end -}}
{{- if not $v.region.key.existingSecret -}}
{{- fail "region.name is set but region.key.existingSecret is not: every hop is authenticated with a shared key from a Secret (RELAY_REGION_KEY_FILE)" -}}
{{- end -}}
{{- if and $v.networkPolicy.enabled (not $v.region.networkPolicy.from) -}}
{{- fail "networkPolicy.enabled with region.name: set region.networkPolicy.from to the peer regions' sources (the region listener is never open to everyone)" -}}
{{- end -}}
{{- if and $v.networkPolicy.enabled $v.networkPolicy.egress.enabled (not $v.region.networkPolicy.to) -}}
{{- fail "networkPolicy.egress.enabled with region.name: set region.networkPolicy.to to the peer regions' region Services" -}}
{{- end -}}
{{- end -}}
{{- $hasRedis := include "sealrelay.hasRedis" . -}}
{{- if and (not $hasRedis) (or $v.autoscaling.enabled (gt (int $v.replicaCount) 1)) -}}
{{- fail "more than one replica (replicaCount > 1 or autoscaling.enabled) needs Redis: set redis.url or redis.existingSecret; without it every replica keeps its own policy state and duplicates are not coalesced" -}}
{{- end -}}
{{- if and (not $hasRedis) (eq (toString $v.runtime) "per-core") -}}
{{- fail "runtime: per-core runs a whole relay on each core, and they share state only through Redis: set redis.url or redis.existingSecret, or runtime: shared" -}}
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
{{- range (include "sealrelay.inlineSecrets" .) | fromYamlArray -}}
{{- $s := include "sealrelay.valuesAt" (list $ (index . 0)) | fromYaml -}}
{{- if and $s.value $s.existingSecret -}}
{{- fail (printf "%s: set either value or existingSecret, not both" (index . 0)) -}}
{{- end -}}
{{- end -}}
{{- /* Tracing */ -}}
{{- $sampler := include "sealrelay.effectiveVar" (list . "OTEL_TRACES_SAMPLER" ($v.tracing.sampler.name | default "parentbased_always_on")) -}}
{{- if and (include "sealrelay.isSet" $v.tracing.sampler.ratio) (not (has $sampler (list "traceidratio" "parentbased_traceidratio"))) -}}
{{- fail (printf "tracing.sampler.ratio only applies to the traceidratio and parentbased_traceidratio samplers, not %s" $sampler) -}}
{{- end -}}
{{- /* Admin API */ -}}
{{- $sock := include "sealrelay.adminSocketPath" . -}}
{{- if eq $sock "<valueFrom>" -}}
{{- fail "RELAY_ADMIN_SOCKET comes from valueFrom, so the chart cannot mount the socket's directory: set adminApi.socket.path instead" -}}
{{- end -}}
{{- if $sock -}}
{{- if not (hasPrefix "/" $sock) -}}
{{- fail (printf "adminApi.socket.path (RELAY_ADMIN_SOCKET) must be absolute, got %q" $sock) -}}
{{- end -}}
{{- if eq (dir $sock) "/" -}}
{{- fail (printf "RELAY_ADMIN_SOCKET %q: the socket needs a directory of its own (the chart mounts an emptyDir there), e.g. /run/sealrelay/admin.sock" $sock) -}}
{{- end -}}
{{- if gt (len $sock) 107 -}}
{{- fail (printf "RELAY_ADMIN_SOCKET %q is longer than a Unix socket path may be (107 bytes)" $sock) -}}
{{- end -}}
{{- end -}}
{{- $listen := include "sealrelay.effectiveVar" (list . "RELAY_ADMIN_API_LISTEN" ($v.adminApi.tcp.listen | default "" | toString)) -}}
{{- if and $listen (ne $listen "<valueFrom>") -}}
{{- if not (regexMatch `^(127\.[0-9]+\.[0-9]+\.[0-9]+|\[::1\]|localhost):[0-9]+$` $listen) -}}
{{- fail (printf "adminApi.tcp.listen (RELAY_ADMIN_API_LISTEN) must be a loopback address (127.0.0.1:PORT or [::1]:PORT), got %q: the admin API is never exposed beyond the pod" $listen) -}}
{{- end -}}
{{- if not (or (include "sealrelay.adminTokenRef" .) (include "sealrelay.userSetsVar" (list . "RELAY_ADMIN_TOKEN_FILE"))) -}}
{{- fail "adminApi.tcp.listen needs a bearer token: set adminApi.tcp.token.existingSecret (or value)" -}}
{{- end -}}
{{- end -}}
{{- if and (include "sealrelay.adminTokenRef" .) (not $v.podSecurityContext.fsGroup) -}}
{{- fail "adminApi.tcp.token: the token copy reads the Secret through the pod's fsGroup (the Secret's files are root's, mode 0440): set podSecurityContext.fsGroup" -}}
{{- end -}}
{{- /* ICE */ -}}
{{- $hasTurnSecret := or (include "sealrelay.secretRef" (list . $v.ice.turnSecret "RELAY_ICE_TURN_SECRET")) (include "sealrelay.userSetsVar" (list . "RELAY_ICE_TURN_SECRET")) (include "sealrelay.userSetsVar" (list . "RELAY_ICE_TURN_SECRET_FILE")) -}}
{{- $turnUrls := or $v.ice.turnUrls (include "sealrelay.userSetsVar" (list . "RELAY_ICE_TURN_URLS")) -}}
{{- if and $turnUrls (not $hasTurnSecret) -}}
{{- fail "ice.turnUrls needs coturn's shared secret: set ice.turnSecret.existingSecret (or value)" -}}
{{- end -}}
{{- $cfToken := or (include "sealrelay.secretRef" (list . $v.ice.cloudflare.apiToken "RELAY_ICE_CLOUDFLARE_API_TOKEN")) (include "sealrelay.userSetsVar" (list . "RELAY_ICE_CLOUDFLARE_API_TOKEN")) (include "sealrelay.userSetsVar" (list . "RELAY_ICE_CLOUDFLARE_API_TOKEN_FILE")) -}}
{{- $cfKey := include "sealrelay.hasCloudflare" . -}}
{{- if and $cfKey (not $cfToken) -}}
{{- fail "ice.cloudflare.keyId needs ice.cloudflare.apiToken (existingSecret or value)" -}}
{{- end -}}
{{- if and $cfToken (not $cfKey) -}}
{{- fail "ice.cloudflare.apiToken needs ice.cloudflare.keyId" -}}
{{- end -}}
{{- $apps := include "sealrelay.effectiveVar" (list . "RELAY_APPS" ($v.mailbox.apps | default "" | toString)) -}}
{{- if regexMatch `(^|;)\s*[a-z][a-z0-9-]*\s*:([^;]*,)?\s*ice\s*(,|;|$)` $apps -}}
{{- if not (or $v.ice.stunUrls $turnUrls $cfKey (include "sealrelay.userSetsVar" (list . "RELAY_ICE_STUN_URLS"))) -}}
{{- fail "mailbox.apps (RELAY_APPS) enables ice for an app, but no ICE provider is configured (ice.stunUrls, ice.turnUrls or ice.cloudflare): the relay would stop at start-up" -}}
{{- end -}}
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

{{/*
Extra labels of the ServiceMonitor / PrometheusRule: release: <metrics.prometheusRelease> (what
a stock kube-prometheus-stack selects them by), then the object's own labels, which win. YAML,
or "" for none. Call with (list $ .Values.metrics.<object>.labels).
*/}}
{{- define "sealrelay.monitoringLabels" -}}
{{- $root := index . 0 -}}
{{- $out := dict -}}
{{- with $root.Values.metrics.prometheusRelease }}{{ $_ := set $out "release" (toString .) }}{{ end -}}
{{- $out = mergeOverwrite $out (deepCopy (index . 1 | default dict)) -}}
{{- if $out }}{{ toYaml $out }}{{ end -}}
{{- end -}}

{{/* The label matchers the alert rules select the relay's series with (replacing job="sealrelay"). */}}
{{- define "sealrelay.alertSelector" -}}
{{- $jobSel := .Values.metrics.prometheusRule.jobSelector | default "" | toString | trim -}}
{{- if $jobSel }}{{ $jobSel }}{{ else -}}
{{- printf "job=%q, namespace=%q, service=%q" (include "sealrelay.name" .) .Release.Namespace (include "sealrelay.adminName" .) -}}
{{- with .Values.metrics.cluster }}{{ printf ", cluster=%q" . }}{{ end -}}
{{- with .Values.region.name }}{{ printf ", region=%q" . }}{{ end -}}
{{- end -}}
{{- end -}}

{{/* Whether the cluster serves the Gateway API (HTTPRoute). */}}
{{- define "sealrelay.hasGatewayAPI" -}}
{{- if .Capabilities.APIVersions.Has "gateway.networking.k8s.io/v1" }}true{{ end -}}
{{- end -}}
