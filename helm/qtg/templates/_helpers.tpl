{{/*
qtg chart helpers. Naming: <fullname>-<worker> for every per-worker object.
*/}}

{{- define "qtg.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "qtg.fullname" -}}
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

{{- define "qtg.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels every object carries. */}}
{{- define "qtg.labels" -}}
helm.sh/chart: {{ include "qtg.chart" . }}
{{ include "qtg.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: qtg
{{- end }}

{{- define "qtg.selectorLabels" -}}
app.kubernetes.io/name: {{ include "qtg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of one component. Call with (dict "root" $ "component" "dispatcher"). */}}
{{- define "qtg.componentSelectorLabels" -}}
{{ include "qtg.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "qtg.componentLabels" -}}
{{ include "qtg.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels that mark a pod as a qtg worker (admin port, metrics, NetworkPolicy peer). */}}
{{- define "qtg.workerRoleLabel" -}}
qtg-role: worker
{{- end }}

{{- define "qtg.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "qtg.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "qtg.image" -}}
{{- $img := .Values.image -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default .Chart.AppVersion $img.tag | toString) -}}
{{- end -}}
{{- end }}

{{/* The Secret's name; rendering fails without it. */}}
{{- define "qtg.secretName" -}}
{{- required "secrets.existingSecret is required: the name of an existing Secret with MG_DATABASE_URL and the other secret keys (the chart never creates secrets)" .Values.secrets.existingSecret -}}
{{- end }}

{{/* Variables that must never be plain env values. */}}
{{- define "qtg.secretOnlyVars" -}}
MG_DATABASE_URL DATABASE_URL MG_CALLBACK_SECRET MG_CALLBACK_WEBHOOK_SECRETS MG_API_BOOTSTRAP_ADMIN_KEY
{{- end }}

{{/*
Plain env entries from a map, sorted, refusing secret-only variables.
Call with (dict "env" $map "where" "workers.api.env").
*/}}
{{- define "qtg.plainEnv" -}}
{{- $forbidden := splitList " " (include "qtg.secretOnlyVars" .) -}}
{{- $reserved := list "MG_ADMIN_ADDR" "MG_API_ADDR" "MG_EXECUTOR_REGISTRY" "MG_DB_REQUIRE_SYNC_REPLICATION" "MG_DB_SESSION_CHECK" -}}
{{- range $k := keys .env | sortAlpha }}
{{- if has $k $forbidden }}
{{- fail (printf "%s.%s: %s is a secret; map it from secrets.existingSecret (secretEnv), never as a value" $.where $k $k) }}
{{- end }}
{{- if has $k $reserved }}
{{- fail (printf "%s.%s: %s is set by the chart (adminPort, http.port, executorRegistry, database)" $.where $k $k) }}
{{- end }}
- name: {{ $k }}
  value: {{ index $.env $k | toString | quote }}
{{- end }}
{{- end }}

{{/*
The database checks of every qtg container (workers and the migration Job), from `database`:
MG_DB_REQUIRE_SYNC_REPLICATION and MG_DB_SESSION_CHECK (docs/architecture.md §16).
*/}}
{{- define "qtg.databaseEnv" -}}
{{- $db := default (dict) .Values.database -}}
- name: MG_DB_REQUIRE_SYNC_REPLICATION
  value: {{ ternary "true" "false" (eq (toString $db.requireSyncReplication) "true") | quote }}
- name: MG_DB_SESSION_CHECK
  value: {{ default "refuse" $db.sessionCheck | quote }}
{{- end }}

{{/* A secretKeyRef env entry. Call with (dict "root" $ "name" "ENV" "key" "key" "optional" false). */}}
{{- define "qtg.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "qtg.secretName" .root }}
      key: {{ .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end }}

{{/* A worker's settings with the defaults for keys a values file left out. Returns YAML. */}}
{{- define "qtg.worker" -}}
{{- $w := .worker -}}
enabled: {{ ternary $w.enabled true (hasKey $w "enabled") }}
binary: {{ required (printf "workers.%s.binary is required" .name) $w.binary }}
replicas: {{ ternary $w.replicas 1 (hasKey $w "replicas") }}
args: {{ default (list) $w.args | toJson }}
env: {{ default (dict) $w.env | toJson }}
secretEnv: {{ default (dict) $w.secretEnv | toJson }}
http: {{ mergeOverwrite (dict "enabled" false "port" 8080) (default (dict) $w.http) | toJson }}
egress: {{ mergeOverwrite (dict "executors" false "callbacks" false "smtp" false) (default (dict) $w.egress) | toJson }}
resources: {{ default (dict) $w.resources | toJson }}
autoscaling: {{ mergeOverwrite (dict "enabled" false "minReplicas" 2 "maxReplicas" 6 "targetCPUUtilizationPercentage" 70) (default (dict) $w.autoscaling) | toJson }}
pdb: {{ default (dict) $w.pdb | toJson }}
podAnnotations: {{ default (dict) $w.podAnnotations | toJson }}
podLabels: {{ default (dict) $w.podLabels | toJson }}
nodeSelector: {{ default (dict) $w.nodeSelector | toJson }}
tolerations: {{ default (list) $w.tolerations | toJson }}
affinity: {{ default (dict) $w.affinity | toJson }}
{{- end }}

{{/* The enabled workers' names, sorted, as a JSON list; fails on an all-in-one clash. */}}
{{- define "qtg.enabledWorkers" -}}
{{- $names := list -}}
{{- range $name := keys .Values.workers | sortAlpha }}
{{- $w := fromYaml (include "qtg.worker" (dict "name" $name "worker" (index $.Values.workers $name))) }}
{{- if $w.enabled }}
{{- $names = append $names $name }}
{{- end }}
{{- end }}
{{- if and (has "all-in-one" $names) (gt (len $names) 1) }}
{{- fail (printf "workers.all-in-one runs every worker itself: disable the others (enabled now: %s)" (join ", " $names)) }}
{{- end }}
{{- $names | toJson -}}
{{- end }}

{{/* Whether a worker gets a PodDisruptionBudget. Call with (dict "w" $w). Returns "true" or "". */}}
{{- define "qtg.wantsPdb" -}}
{{- $w := .w -}}
{{- if hasKey $w.pdb "enabled" -}}
{{- if not (kindIs "invalid" $w.pdb.enabled) -}}
{{- if $w.pdb.enabled }}true{{ end -}}
{{- else if or (gt (int $w.replicas) 1) (and $w.autoscaling.enabled (gt (int $w.autoscaling.minReplicas) 1)) -}}
true
{{- end -}}
{{- else if or (gt (int $w.replicas) 1) (and $w.autoscaling.enabled (gt (int $w.autoscaling.minReplicas) 1)) -}}
true
{{- end -}}
{{- end }}

{{/* A one-item list of NetworkPolicyPeer (YAML) from optional namespaceSelector / podSelector; "" when both are empty. */}}
{{- define "qtg.peer" -}}
{{- $peer := dict -}}
{{- with .namespaceSelector }}{{ $_ := set $peer "namespaceSelector" . }}{{ end -}}
{{- with .podSelector }}{{ $_ := set $peer "podSelector" . }}{{ end -}}
{{- if $peer }}{{ toYaml (list $peer) }}{{ end -}}
{{- end }}

{{- define "qtg.apiWorker" -}}
{{- $api := "" -}}
{{- range $name := include "qtg.enabledWorkers" . | fromJsonArray }}
{{- $w := fromYaml (include "qtg.worker" (dict "name" $name "worker" (index $.Values.workers $name))) }}
{{- if and $w.http.enabled (not $api) }}
{{- $api = $name }}
{{- end }}
{{- end }}
{{- $api -}}
{{- end }}
