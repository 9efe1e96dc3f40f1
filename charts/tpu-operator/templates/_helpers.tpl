{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "tpu-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: <release>-tpu-operator, or the release name when it already contains the chart name. */}}
{{- define "tpu-operator.fullname" -}}
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

{{- define "tpu-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object but the gcp-emulator's. */}}
{{- define "tpu-operator.labels" -}}
{{ include "tpu-operator.commonLabels" . }}
{{ include "tpu-operator.selectorLabels" . }}
{{- end }}

{{/* Labels of the gcp-emulator's objects (another component, so the operator's selectors skip them). */}}
{{- define "tpu-operator.emulatorLabels" -}}
{{ include "tpu-operator.commonLabels" . }}
{{ include "tpu-operator.emulatorSelectorLabels" . }}
{{- end }}

{{- define "tpu-operator.commonLabels" -}}
helm.sh/chart: {{ include "tpu-operator.chart" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tpu-operator
{{- end }}

{{/* Selector labels of the operator pods. */}}
{{- define "tpu-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tpu-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Selector labels of the gcp-emulator pod. */}}
{{- define "tpu-operator.emulatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "tpu-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gcp-emulator
{{- end }}

{{- define "tpu-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tpu-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The namespace the controllers watch in Namespace scope. */}}
{{- define "tpu-operator.watchNamespace" -}}
{{- default .Release.Namespace .Values.watchNamespace }}
{{- end }}

{{- define "tpu-operator.emulatorName" -}}
{{- printf "%s-gcp-emulator" (include "tpu-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The operator's config file: the values under `config` without empty strings, plus the keys the
chart owns (namespace, metricsAddr, gcpEmulator). Every key is one `tpu-operator run --config` knows.
*/}}
{{- define "tpu-operator.config" -}}
{{- $config := dict }}
{{- range $key, $value := .Values.config }}
{{- if not (and (kindIs "string" $value) (eq $value "")) }}
{{- $_ := set $config $key $value }}
{{- end }}
{{- end }}
{{- $_ := set $config "metricsAddr" (printf "[::]:%d" (int .Values.metrics.port)) }}
{{- if eq .Values.scope "Namespace" }}
{{- $_ := set $config "namespace" (include "tpu-operator.watchNamespace" .) }}
{{- end }}
{{- if .Values.kueue.enabled }}
{{- $_ := set $config "kueue" true }}
{{- with .Values.kueue.defaultQueue }}
{{- $_ := set $config "kueueDefaultQueue" . }}
{{- end }}
{{- end }}
{{- if .Values.gcpEmulator.enabled }}
{{- $_ := set $config "gcpEmulator" (printf "http://%s.%s.svc:%d" (include "tpu-operator.emulatorName" .) .Release.Namespace (int .Values.gcpEmulator.port)) }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{- define "tpu-operator.image" -}}
{{- printf "%s:%s" .repository (.tag | default .appVersion) }}
{{- end }}

{{/*
Refuses combinations that would break the operator's one promise (nothing billable duplicated or
leaked). Included at the top of deployment.yaml, so `helm install`, `helm upgrade` and
`helm template` all stop with this message before anything is applied.
- Several replicas without leader election would all run the controllers at once. TPU nodes and
  Dataproc batches have deterministic ids, but Vertex AI custom jobs get server-assigned names, so
  two active replicas can each create (and pay for) one; they also fight over status, finalizers
  and the orphan sweep. Only the Lease makes extra replicas safe standbys.
- `orphans: delete` with `clusterId: default` (the old shared default): every cluster in the project
  with that id would delete the others' live TPUs as orphans. The binary refuses it too; failing
  here stops it before a crash-looping rollout.
- `kueue.defaultQueue` without `kueue.enabled`: the platform team believes unlabelled objects are
  gated by Kueue while nothing is. The binary refuses it too.
- No `image.repository` (or `gcpEmulator.image.repository` with the emulator on): no image is
  published, so there is no default that could be pulled; the message says how to build and set it.
*/}}
{{- define "tpu-operator.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (eq (toString .Values.config.leaderElect) "false") }}
{{- fail (printf "replicaCount=%d with config.leaderElect=false would run %d copies of the controllers at once, racing on every object (two active replicas can each create a billable Vertex AI custom job for one pipeline). Keep config.leaderElect=true (the default) with replicaCount > 1, or set replicaCount=1 to run without leader election." (int .Values.replicaCount) (int .Values.replicaCount)) }}
{{- end }}
{{- if and (eq (toString .Values.config.orphans) "delete") (has (toString .Values.config.clusterId) (list "default" "local")) }}
{{- fail (printf "config.orphans=delete with config.clusterId=%s: other clusters using the same projects may share that id, and each would delete the others' live TPUs as orphans. Leave config.clusterId empty (the cluster's kube-system Namespace UID is used) or set a value unique to this cluster." (toString .Values.config.clusterId)) }}
{{- end }}
{{- if not .Values.image.repository }}
{{- fail "image.repository is required: no tpu-operator image is published. Build and push one from the repository root (docker build -t REGISTRY/tpu-operator:TAG . && docker push REGISTRY/tpu-operator:TAG), then set image.repository=REGISTRY/tpu-operator and image.tag=TAG (helm: --set image.repository=REGISTRY/tpu-operator --set image.tag=TAG; docs/install.md, \"3. Install\")." }}
{{- end }}
{{- if and .Values.gcpEmulator.enabled (not .Values.gcpEmulator.image.repository) }}
{{- fail "gcpEmulator.image.repository is required with gcpEmulator.enabled: no gcp-emulator image is published. Build and push one from the repository root (docker build --target gcp-emulator -t REGISTRY/gcp-emulator:TAG . && docker push REGISTRY/gcp-emulator:TAG), then set gcpEmulator.image.repository=REGISTRY/gcp-emulator and gcpEmulator.image.tag=TAG (docs/install.md, \"3. Install\")." }}
{{- end }}
{{- if and .Values.kueue.defaultQueue (not .Values.kueue.enabled) }}
{{- fail (printf "kueue.defaultQueue=%s gates objects without the queue label through Kueue, which is off: set kueue.enabled=true, or leave kueue.defaultQueue empty." (toString .Values.kueue.defaultQueue)) }}
{{- end }}
{{- end }}
