{{/* The release's objects' name: the release name, with the chart's unless it holds it. */}}
{{- define "railmq.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "railmq.headless" -}}
{{- printf "%s-headless" (include "railmq.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "railmq.secretName" -}}
{{- default (include "railmq.fullname" .) .Values.auth.existingSecret -}}
{{- end -}}

{{- define "railmq.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "railmq.labels" -}}
{{ include "railmq.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Node i's DNS name: the pod's name under the headless service. */}}
{{- define "railmq.nodeHost" -}}
{{- printf "%s-%d.%s.%s.svc.cluster.local" (include "railmq.fullname" .root) .i (include "railmq.headless" .root) .root.Release.Namespace -}}
{{- end -}}

{{/* --cluster-peers: every node as rabbit@HOST=HOST:25672. */}}
{{- define "railmq.peers" -}}
{{- $peers := list -}}
{{- range $i := until (int .Values.replicas) -}}
{{- $host := include "railmq.nodeHost" (dict "root" $ "i" $i) -}}
{{- $peers = append $peers (printf "rabbit@%s=%s:25672" $host $host) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}
