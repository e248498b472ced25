{{/* The name of every object: the release name when it says gangscope, else <release>-gangscope. */}}
{{- define "gangscope.fullname" -}}
{{- if contains "gangscope" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-gangscope" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gangscope.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "gangscope.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: the same as the kustomize manifests' plus the release. */}}
{{- define "gangscope.selectorLabels" -}}
app.kubernetes.io/name: gangscope
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gangscope.labels" -}}
{{ include "gangscope.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The collectors, with remote_write when remoteWrite.enabled. */}}
{{- define "gangscope.collectors" -}}
{{- $collectors := .Values.collectors -}}
{{- if and .Values.remoteWrite.enabled (not (has "remote_write" $collectors)) -}}
{{- $collectors = append $collectors "remote_write" -}}
{{- end -}}
{{- toJson $collectors -}}
{{- end -}}

{{/* gangscope.yaml (docs/configuration.md). Kafka credentials and TLS files come in as GANGSCOPE_KAFKA_* variables
     (deployment.yaml), never here. */}}
{{- define "gangscope.config" -}}
{{- $c := dict "cluster" .Values.cluster "data" "/data" "collectors" (include "gangscope.collectors" . | fromJsonArray) -}}
{{- $_ := set $c "kafka" (dict "bootstrap_servers" .Values.kafka.bootstrapServers "topic_prefix" .Values.kafka.topicPrefix) -}}
{{- $_ = set $c "k8s" (dict "namespaces" .Values.k8s.namespaces "kinds" .Values.k8s.kinds "discovery_interval_s" .Values.k8s.discoveryIntervalS "page_limit" .Values.k8s.pageLimit "buffer_max_records" .Values.k8s.bufferMaxRecords) -}}
{{- if or .Values.metrics.discovery .Values.metrics.targets -}}
{{- $_ = set $c "metrics" (dict "discovery" .Values.metrics.discovery "targets" .Values.metrics.targets) -}}
{{- end -}}
{{- if .Values.catalog -}}{{- $_ = set $c "catalog" .Values.catalog -}}{{- end -}}
{{- if .Values.objectStorage.dataPath -}}{{- $_ = set $c "lake_data_path" .Values.objectStorage.dataPath -}}{{- end -}}
{{- if ne (toString .Values.memoryLimit) "512MB" -}}{{- $_ = set $c "memory_limit" (toString .Values.memoryLimit) -}}{{- end -}}
{{- if .Values.alertmanager.url -}}{{- $_ = set $c "findings" (dict "alertmanager_url" .Values.alertmanager.url) -}}{{- end -}}
{{- $_ = set $c "server" (dict "listen" (printf "0.0.0.0:%v" .Values.service.port)) -}}
{{- if not .Values.page.enabled -}}{{- $_ = set $c.server "page" false -}}{{- end -}}
{{- toYaml (mustMergeOverwrite $c (deepCopy .Values.config)) -}}
{{- end -}}
