{{/*
sandbox-gpu.version: the image tag of the operator and of the default operand images.
*/}}
{{- define "sandbox-gpu.version" -}}
{{- .Values.operator.version | default .Chart.AppVersion -}}
{{- end -}}

{{/*
sandbox-gpu.operandImage: an operand's image override from its values, "" for the default. image alone is a
whole reference; with repository (GPU Operator style) it is <repository>/<image>, and version adds :<version>.
*/}}
{{- define "sandbox-gpu.operandImage" -}}
{{- if .image -}}
{{- if .repository }}{{ .repository }}/{{ end }}{{ .image }}{{ if .version }}:{{ .version }}{{ end -}}
{{- end -}}
{{- end -}}

{{/*
sandbox-gpu.pullSecretNames: operator.imagePullSecrets as names, one per line; entries are names or {name: ...}.
*/}}
{{- define "sandbox-gpu.pullSecretNames" -}}
{{- range .Values.operator.imagePullSecrets }}
{{- if kindIs "string" . }}
{{ . }}
{{- else if .name }}
{{ .name }}
{{- else }}
{{- fail "operator.imagePullSecrets: each entry is a Secret name or {name: <Secret name>}" }}
{{- end }}
{{- end }}
{{- end -}}
