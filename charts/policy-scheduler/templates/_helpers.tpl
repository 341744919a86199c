{{/* The chart's name (app.kubernetes.io/name). */}}
{{- define "policy-scheduler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The objects' name: the release's name when it contains the chart's name (the documented
`helm install policy-scheduler ...` gives the names of manifests/), else "<release>-<chart>". */}}
{{- define "policy-scheduler.fullname" -}}
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

{{- define "policy-scheduler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "policy-scheduler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "policy-scheduler.labels" -}}
{{ include "policy-scheduler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "policy-scheduler.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) }}
{{- end }}
{{- end }}

{{/* Names the operator is told (flags) and RBAC grants (resourceNames). */}}
{{- define "policy-scheduler.webhookService" -}}
{{- printf "%s-webhook" (include "policy-scheduler.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "policy-scheduler.webhookSecret" -}}
{{- printf "%s-webhook-tls" (include "policy-scheduler.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "policy-scheduler.webhookCertificate" -}}
{{- printf "%s-webhook" (include "policy-scheduler.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- define "policy-scheduler.certManager" -}}
{{- if and .Values.webhooks.enabled (eq .Values.webhooks.certificates.mode "certManager") }}true{{ end }}
{{- end }}
{{/* The operator writes the caBundle of its webhook configurations (webhooks on, its own
certificates): only then does the ClusterRole grant it get/update on them, and only then is the
ValidatingAdmissionPolicy that narrows that update to caBundle rendered. */}}
{{- define "policy-scheduler.writesCABundle" -}}
{{- if and .Values.webhooks.enabled (eq .Values.webhooks.certificates.mode "selfSigned") }}true{{ end }}
{{- end }}

{{/* The values that cannot work together fail the render with the reason. */}}
{{- define "policy-scheduler.validate" -}}
{{- if not (has .Values.webhooks.certificates.mode (list "selfSigned" "certManager")) }}
{{- fail (printf "webhooks.certificates.mode must be selfSigned or certManager, not %q" .Values.webhooks.certificates.mode) }}
{{- end }}
{{- if and (gt (int .Values.replicas) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicas > 1 needs leaderElection.enabled: without a Lease every replica would schedule the same pods" }}
{{- end }}
{{- end }}
