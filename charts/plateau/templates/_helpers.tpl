{{- define "plateau.name" -}}plateau-operator{{- end -}}
{{- define "plateau.labels" -}}
app.kubernetes.io/name: plateau-operator
app.kubernetes.io/part-of: plateau
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "plateau.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag }}{{- end -}}
