{{/*
sandbox-gpu.version: the image tag of the operator and of the default operand images.
*/}}
{{- define "sandbox-gpu.version" -}}
{{- .Values.operator.version | default .Chart.AppVersion -}}
{{- end -}}

{{/*
sandbox-gpu.operandImage: an operand's image override from its values, "" for the default. Called with
(dict "o" VALUES "what" NAME "default" IMAGE): image alone is a whole reference; with repository (GPU Operator
style) it is <repository>/<image>, and version adds :<version>. digest (sha256:<64 hex>) pins the image by
content and wins over version: <repository>/<image>@<digest>; with digest but no image it pins the default
image (IMAGE, a reference without tag: NVIDIA's for the device plugin, <operator.repository>/<binary> for ours).
*/}}
{{- define "sandbox-gpu.operandImage" -}}
{{- $o := .o -}}
{{- $digest := $o.digest | default "" | toString -}}
{{- if and $digest (not (regexMatch "^sha256:[0-9a-f]{64}$" $digest)) -}}
{{- fail (printf "%s.digest %q: want sha256: and 64 lower-case hex digits" .what $digest) -}}
{{- end -}}
{{- if $o.image -}}
{{- if $o.repository }}{{ $o.repository }}/{{ end }}{{ $o.image }}{{ if $digest }}@{{ $digest }}{{ else if $o.version }}:{{ $o.version }}{{ end -}}
{{- else if $digest -}}
{{- .default }}@{{ $digest -}}
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
