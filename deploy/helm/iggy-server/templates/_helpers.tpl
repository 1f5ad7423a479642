{{- define "iggy-server.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "iggy-server.headless" -}}
{{- printf "%s-headless" (include "iggy-server.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "iggy-server.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
