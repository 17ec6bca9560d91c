{{/*
Names, labels and the derived values every role shares. The voters string and the
node-id arithmetic live here once, so the controller, broker and admin configs and
the init containers cannot disagree.
*/}}

{{- define "kraftlog.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kraftlog.fullname" -}}
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

{{- define "kraftlog.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selector labels; call with (dict "ctx" $ "component" "controller"). */}}
{{- define "kraftlog.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kraftlog.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels; call with (dict "ctx" $ "component" "controller"). */}}
{{- define "kraftlog.labels" -}}
helm.sh/chart: {{ include "kraftlog.chart" .ctx }}
{{ include "kraftlog.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: kraftlog
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "kraftlog.annotations" -}}
{{- with .Values.commonAnnotations -}}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "kraftlog.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{- define "kraftlog.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kraftlog.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kraftlog.controller.fullname" -}}{{ include "kraftlog.fullname" . }}-controller{{- end -}}
{{- define "kraftlog.controller.headless" -}}{{ include "kraftlog.fullname" . }}-controller-headless{{- end -}}
{{- define "kraftlog.broker.fullname" -}}{{ include "kraftlog.fullname" . }}-broker{{- end -}}
{{- define "kraftlog.broker.headless" -}}{{ include "kraftlog.fullname" . }}-broker-headless{{- end -}}
{{- define "kraftlog.admin.fullname" -}}{{ include "kraftlog.fullname" . }}-admin{{- end -}}
{{- define "kraftlog.jaeger.fullname" -}}{{ include "kraftlog.fullname" . }}-jaeger{{- end -}}
{{- define "kraftlog.nodeReader" -}}{{ printf "%s-%s-node-reader" .Release.Namespace (include "kraftlog.fullname" .) | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- define "kraftlog.configmap" -}}{{ include "kraftlog.fullname" . }}-config{{- end -}}

{{- define "kraftlog.clusterIdSecret" -}}
{{- default (printf "%s-cluster-id" (include "kraftlog.fullname" .)) .Values.existingClusterIdSecret -}}
{{- end -}}

{{/* DNS name of controller pod <i>: <sts>-<i>.<headless>.<ns>.svc.<domain> */}}
{{- define "kraftlog.controller.podHost" -}}
{{- printf "%s-%d.%s.%s.svc.%s" (include "kraftlog.controller.fullname" .ctx) (int .ordinal) (include "kraftlog.controller.headless" .ctx) .ctx.Release.Namespace .ctx.Values.clusterDomain -}}
{{- end -}}

{{/*
controller.quorum.voters: "<id>@<host>:<port>,..." for every controller ordinal. A
controller's node.id is its StatefulSet ordinal (0..replicaCount-1).
*/}}
{{- define "kraftlog.quorumVoters" -}}
{{- $voters := list -}}
{{- range $i := until (int .Values.controller.replicaCount) -}}
{{- $host := include "kraftlog.controller.podHost" (dict "ctx" $ "ordinal" $i) -}}
{{- $voters = append $voters (printf "%d@%s:%d" $i $host (int $.Values.controller.port)) -}}
{{- end -}}
{{- join "," $voters -}}
{{- end -}}

{{/* controller.quorum.bootstrap.servers: "<host>:<port>,..." (KIP-853 form, for brokers and admin). */}}
{{- define "kraftlog.quorumBootstrapServers" -}}
{{- $servers := list -}}
{{- range $i := until (int .Values.controller.replicaCount) -}}
{{- $servers = append $servers (printf "%s:%d" (include "kraftlog.controller.podHost" (dict "ctx" $ "ordinal" $i)) (int $.Values.controller.port)) -}}
{{- end -}}
{{- join "," $servers -}}
{{- end -}}

{{- define "kraftlog.broker.bootstrapServers" -}}
{{- printf "%s.%s.svc.%s:%d" (include "kraftlog.broker.fullname" .) .Release.Namespace .Values.clusterDomain (int .Values.broker.service.port) -}}
{{- end -}}

{{- define "kraftlog.otelEndpoint" -}}
{{- if .Values.otel.endpoint -}}
{{- .Values.otel.endpoint -}}
{{- else if .Values.jaeger.enabled -}}
{{- if eq .Values.otel.protocol "grpc" -}}
{{- printf "http://%s:%d" (include "kraftlog.jaeger.fullname" .) (int .Values.jaeger.service.otlpGrpcPort) -}}
{{- else -}}
{{- printf "http://%s:%d" (include "kraftlog.jaeger.fullname" .) (int .Values.jaeger.service.otlpHttpPort) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Environment shared by every kraftlog container; call with (dict "ctx" $ "component" "controller").
POD_NAME/POD_NAMESPACE feed OTEL_RESOURCE_ATTRIBUTES so every span names its pod.
*/}}
{{- define "kraftlog.commonEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: OTEL_SERVICE_NAME
  value: {{ printf "%s-%s" .ctx.Values.otel.serviceNamePrefix .component | quote }}
- name: OTEL_RESOURCE_ATTRIBUTES
  value: "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE),service.namespace={{ .ctx.Release.Namespace }}"
{{- $endpoint := include "kraftlog.otelEndpoint" .ctx }}
{{- if $endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $endpoint | quote }}
- name: OTEL_EXPORTER_OTLP_PROTOCOL
  value: {{ .ctx.Values.otel.protocol | quote }}
{{- else }}
- name: OTEL_TRACES_EXPORTER
  value: "none"
{{- end }}
- name: PYTHONUNBUFFERED
  value: "1"
{{- end -}}

{{/* Pod anti-affinity from a preset; call with (dict "ctx" $ "component" "controller" "preset" "soft"). */}}
{{- define "kraftlog.podAntiAffinity" -}}
{{- if eq .preset "hard" -}}
podAntiAffinity:
  requiredDuringSchedulingIgnoredDuringExecution:
    - topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels:
          {{- include "kraftlog.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 10 }}
{{- else if eq .preset "soft" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "kraftlog.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 12 }}
{{- end }}
{{- end -}}

{{/* A soft or hard spread over zones; call with (dict "ctx" $ "component" "broker" "when" "ScheduleAnyway"). */}}
{{- define "kraftlog.zoneSpread" -}}
{{- if .when -}}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: {{ .when }}
    labelSelector:
      matchLabels:
        {{- include "kraftlog.selectorLabels" (dict "ctx" .ctx "component" .component) | nindent 8 }}
{{- end -}}
{{- end -}}

{{/* gRPC probe; call with (dict "probe" .Values.controller.readinessProbe "port" 9093). */}}
{{- define "kraftlog.grpcProbe" -}}
grpc:
  port: {{ int .port }}
  {{- if .probe.service }}
  service: {{ .probe.service | quote }}
  {{- end }}
initialDelaySeconds: {{ .probe.initialDelaySeconds }}
periodSeconds: {{ .probe.periodSeconds }}
timeoutSeconds: {{ .probe.timeoutSeconds }}
failureThreshold: {{ .probe.failureThreshold }}
{{- end -}}

{{/* host:port outside clients use for broker ordinal .ordinal (broker.externalAccess). */}}
{{- define "kraftlog.broker.externalAddress" -}}
{{- $ext := .ctx.Values.broker.externalAccess -}}
{{- $host := index $ext.advertisedHosts (int .ordinal) -}}
{{- if eq $ext.type "NodePort" -}}
{{- printf "%s:%d" $host (int (index $ext.nodePorts (int .ordinal))) -}}
{{- else -}}
{{- printf "%s:%d" $host (int $ext.port) -}}
{{- end -}}
{{- end -}}

{{/* Cross-field checks the JSON schema cannot express; fail with a clear message. */}}
{{- define "kraftlog.validate" -}}
{{- if lt (int .Values.broker.nodeIdOffset) (int .Values.controller.replicaCount) -}}
{{- fail (printf "broker.nodeIdOffset (%d) must be >= controller.replicaCount (%d): controller node ids are 0..%d" (int .Values.broker.nodeIdOffset) (int .Values.controller.replicaCount) (sub (int .Values.controller.replicaCount) 1)) -}}
{{- end -}}
{{- if gt (int .Values.broker.minInsyncReplicas) (int .Values.broker.defaultReplicationFactor) -}}
{{- fail (printf "broker.minInsyncReplicas (%d) must be <= broker.defaultReplicationFactor (%d)" (int .Values.broker.minInsyncReplicas) (int .Values.broker.defaultReplicationFactor)) -}}
{{- end -}}
{{- if gt (int .Values.broker.defaultReplicationFactor) (int .Values.broker.replicaCount) -}}
{{- fail (printf "broker.defaultReplicationFactor (%d) must be <= broker.replicaCount (%d)" (int .Values.broker.defaultReplicationFactor) (int .Values.broker.replicaCount)) -}}
{{- end -}}
{{- $ext := .Values.broker.externalAccess -}}
{{- if $ext.enabled -}}
{{- if lt (len $ext.advertisedHosts) (int .Values.broker.replicaCount) -}}
{{- fail (printf "broker.externalAccess.advertisedHosts has %d entries for %d brokers: give the host outside clients reach each broker ordinal at" (len $ext.advertisedHosts) (int .Values.broker.replicaCount)) -}}
{{- end -}}
{{- if and (eq $ext.type "NodePort") (lt (len $ext.nodePorts) (int .Values.broker.replicaCount)) -}}
{{- fail (printf "broker.externalAccess.nodePorts has %d entries for %d brokers: NodePort needs one fixed port per broker ordinal (it is advertised)" (len $ext.nodePorts) (int .Values.broker.replicaCount)) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) -}}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled" -}}
{{- end -}}
{{- end -}}
