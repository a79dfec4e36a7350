{{/* Names. */}}
{{- define "mcpcancel.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "mcpcancel.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Labels: call with (dict "ctx" $ "component" "gateway"). */}}
{{- define "mcpcancel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcpcancel.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- with .fleet }}
mcpcancel.io/fleet: {{ . }}
{{- end }}
{{- end -}}

{{- define "mcpcancel.labels" -}}
{{ include "mcpcancel.selectorLabels" . }}
helm.sh/chart: {{ printf "%s-%s" .ctx.Chart.Name .ctx.Chart.Version | replace "+" "_" }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The mcpcancel image: call with (dict "ctx" $ "image" OVERRIDES). */}}
{{- define "mcpcancel.image" -}}
{{- $img := mergeOverwrite (deepCopy .ctx.Values.image) (default dict .image) -}}
{{- printf "%s:%s" $img.repository (default .ctx.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{- define "mcpcancel.pullPolicy" -}}
{{- $img := mergeOverwrite (deepCopy .ctx.Values.image) (default dict .image) -}}
{{- $img.pullPolicy -}}
{{- end -}}

{{/* Service names. */}}
{{- define "mcpcancel.coordinatorHeadless" -}}
{{- printf "%s-coordinator-headless" (include "mcpcancel.fullname" .) -}}
{{- end -}}

{{/* The coordinator target every gateway and worker dials: every replica behind the headless Service, balanced round-robin. */}}
{{- define "mcpcancel.coordinatorTarget" -}}
{{- printf "dns:///%s.%s.svc:%d" (include "mcpcancel.coordinatorHeadless" .) .Release.Namespace (int .Values.coordinator.port) -}}
{{- end -}}

{{- define "mcpcancel.etcdName" -}}
{{- printf "%s-etcd" (include "mcpcancel.fullname" .) -}}
{{- end -}}

{{/* The etcd client URLs the coordinator uses. */}}
{{- define "mcpcancel.etcdEndpoints" -}}
{{- if .Values.etcd.embedded.enabled -}}
{{- $name := include "mcpcancel.etcdName" . -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.etcd.embedded.replicas) -}}
{{- $urls = append $urls (printf "http://%s-%d.%s.%s.svc:2379" $name $i $name $.Release.Namespace) -}}
{{- end -}}
{{- join "," $urls -}}
{{- else -}}
{{- if not .Values.etcd.endpoints -}}
{{- fail "etcd.endpoints is empty: name your etcd cluster's client URLs, or set etcd.embedded.enabled=true to try it out" -}}
{{- end -}}
{{- join "," .Values.etcd.endpoints -}}
{{- end -}}
{{- end -}}

{{/* The Secret of a role's mTLS certificate: call with (dict "ctx" $ "role" "gateway"). */}}
{{- define "mcpcancel.tlsSecret" -}}
{{- $v := .ctx.Values.tls -}}
{{- $given := get $v (printf "%sSecret" .role) -}}
{{- if $given -}}
{{- $given -}}
{{- else if $v.certManager.enabled -}}
{{- printf "%s-%s-tls" (include "mcpcancel.fullname" .ctx) .role -}}
{{- else -}}
{{- fail (printf "tls.enabled needs tls.%sSecret, or tls.certManager.enabled=true" .role) -}}
{{- end -}}
{{- end -}}

{{/* mTLS flags, volume mount and volume. */}}
{{- define "mcpcancel.tlsArgs" -}}
{{- if .Values.tls.enabled -}}
- --tls-cert=/etc/mcpcancel/tls/tls.crt
- --tls-key=/etc/mcpcancel/tls/tls.key
- --tls-ca=/etc/mcpcancel/tls/ca.crt
{{- end }}
{{- end -}}

{{- define "mcpcancel.tlsMount" -}}
{{- if .Values.tls.enabled -}}
- name: tls
  mountPath: /etc/mcpcancel/tls
  readOnly: true
{{- end }}
{{- end -}}

{{- define "mcpcancel.tlsVolume" -}}
{{- if .ctx.Values.tls.enabled -}}
- name: tls
  secret:
    secretName: {{ include "mcpcancel.tlsSecret" . }}
{{- end }}
{{- end -}}

{{/* Pod fields every mcpcancel pod shares. */}}
{{- define "mcpcancel.podCommon" -}}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{/* Scheduling fields of a pod: call with the component's values. */}}
{{- define "mcpcancel.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Environment every mcpcancel container gets: its pod's name and IP. */}}
{{- define "mcpcancel.podEnv" -}}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end -}}

{{/* Whether the gateway is given flag (e.g. "jwt-issuer") through extraArgs or its MCPCANCEL_ variable in env: "true" or "". */}}
{{- define "mcpcancel.gatewayExtraSets" -}}
{{- $flag := .flag -}}
{{- $env := printf "MCPCANCEL_%s" (.flag | upper | replace "-" "_") -}}
{{- range .ctx.Values.gateway.extraArgs -}}
{{- if or (eq . (printf "--%s" $flag)) (hasPrefix (printf "--%s=" $flag) .) }}true{{ end -}}
{{- end -}}
{{- range .ctx.Values.gateway.env -}}
{{- if eq .name $env }}true{{ end -}}
{{- end -}}
{{- end -}}

{{/* Whether the gateway authenticates clients, by values or by flags of its own: "true" or "". */}}
{{- define "mcpcancel.gatewayAuthn" -}}
{{- $a := .Values.gateway.auth -}}
{{- if or $a.tokensSecret $a.jwksSecret $a.jwtIssuer -}}
true
{{- else -}}
{{- range list "tokens-file" "jwks-file" "jwt-issuer" -}}
{{- if include "mcpcancel.gatewayExtraSets" (dict "ctx" $ "flag" .) }}true{{ end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret holding the gateways' shared state key (key state-key). */}}
{{- define "mcpcancel.stateKeySecret" -}}
{{- default (printf "%s-gateway-state-key" (include "mcpcancel.fullname" .)) .Values.gateway.stateKey.existingSecret -}}
{{- end -}}

{{/* The ConfigMap holding the gateways' authorization policy (key policy.json), or "". */}}
{{- define "mcpcancel.authPolicyConfigMap" -}}
{{- $a := .Values.gateway.auth -}}
{{- if and $a.policy $a.policyConfigMap -}}
{{- fail "set one of gateway.auth.policy and gateway.auth.policyConfigMap, not both" -}}
{{- else if $a.policy -}}
{{- printf "%s-gateway-auth-policy" (include "mcpcancel.fullname" .) -}}
{{- else -}}
{{- $a.policyConfigMap -}}
{{- end -}}
{{- end -}}

{{/* Refuse gateway auth values the gateway would refuse at start. */}}
{{- define "mcpcancel.checkGatewayAuth" -}}
{{- $a := .Values.gateway.auth -}}
{{- $issuer := or $a.jwtIssuer (include "mcpcancel.gatewayExtraSets" (dict "ctx" . "flag" "jwt-issuer")) -}}
{{- if and $a.jwksSecret (not $issuer) -}}
{{- fail "gateway.auth.jwksSecret needs gateway.auth.jwtIssuer (the issuer whose keys it holds)" -}}
{{- end -}}
{{- $aud := or $a.jwtAudience $a.publicURL (include "mcpcancel.gatewayExtraSets" (dict "ctx" . "flag" "jwt-audience")) (include "mcpcancel.gatewayExtraSets" (dict "ctx" . "flag" "public-url")) -}}
{{- if and $a.jwtIssuer (not $aud) -}}
{{- fail "gateway.auth.jwtIssuer needs gateway.auth.publicURL (the MCP URL clients use, the tokens' audience) or gateway.auth.jwtAudience" -}}
{{- end -}}
{{- end -}}
