{{- define "plateau.name" -}}plateau-operator{{- end -}}
{{- /* Cluster-scoped objects carry the release's namespace: two releases in two
       namespaces (each watching its own namespaces) do not share them. */ -}}
{{- define "plateau.clusterName" -}}{{ include "plateau.name" . }}-{{ .Release.Namespace }}{{- end -}}
{{- define "plateau.commonLabels" -}}
app.kubernetes.io/part-of: plateau
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end -}}
{{- define "plateau.labels" -}}
app.kubernetes.io/name: plateau-operator
{{ include "plateau.commonLabels" . }}
{{- end -}}
{{- define "plateau.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag }}{{- end -}}
{{- define "plateau.subject" -}}
- kind: ServiceAccount
  name: {{ include "plateau.name" . }}
  namespace: {{ .Release.Namespace }}
{{- end -}}
