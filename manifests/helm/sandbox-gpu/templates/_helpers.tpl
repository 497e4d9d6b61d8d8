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
{{- include "sandbox-gpu.secretNames" (dict "list" .Values.operator.imagePullSecrets "what" "operator.imagePullSecrets") -}}
{{- end -}}

{{/*
sandbox-gpu.secretNames: a list of pull secrets (dict "list" LIST "what" VALUE-NAME) as names, one per line;
entries are names (GPU Operator style) or {name: ...} (Kubernetes style).
*/}}
{{- define "sandbox-gpu.secretNames" -}}
{{- $what := .what -}}
{{- range .list }}
{{- if kindIs "string" . }}
{{ . }}
{{- else if .name }}
{{ .name }}
{{- else }}
{{- fail (printf "%s: each entry is a Secret name or {name: <Secret name>}" $what) }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
sandbox-gpu.operandServiceAccounts: every operand's service account, one per line (operands.ServiceAccounts:
sandbox-gpu-<operand>, sandbox-gpu-discovery for the GPU discovery agent). The chart creates them all, the
admission policy matches them all; only their own RBAC is bound to each.
*/}}
{{- define "sandbox-gpu.operandServiceAccounts" -}}
sandbox-gpu-discovery
sandbox-gpu-kata-device-plugin
sandbox-gpu-kubevirt-device-plugin
sandbox-gpu-nri-plugin
sandbox-gpu-nvidia-device-plugin
sandbox-gpu-validator
sandbox-gpu-vfio-manager
sandbox-gpu-vfio-manager-release
sandbox-gpu-vgpu-device-manager
sandbox-gpu-vgpu-device-manager-release
sandbox-gpu-vgpu-manager
{{- end -}}
