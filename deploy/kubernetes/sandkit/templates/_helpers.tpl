{{- define "sandkit.labels" -}}
app.kubernetes.io/name: sandkit
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "sandkit.sandboxSelector" -}}
app.kubernetes.io/component: sandkit-sandbox
sandkit.owner: {{ .Values.sandboxes.owner | quote }}
{{- end -}}

{{- define "sandkit.serviceAccountName" -}}
{{- .Values.backend.serviceAccount.name -}}
{{- end -}}
