// Validates every object in deploy/kubernetes/*.yaml against the Kubernetes API schema
// (kubernetes-models: the OpenAPI schemas of Kubernetes and of the Prometheus Operator's CRDs,
// compiled to validators), then checks what kvtier's DaemonSet must say. Offline: Debian's
// kubectl (kubernetes-client 1.20) needs an API server even for --dry-run=client.
// The schema catches wrong types, missing required fields and bad enum values; like the
// OpenAPI schema it does not reject unknown fields (the API server drops those, or refuses
// them with fieldValidation=Strict).
// Usage: node validate.mjs DEPLOY_KUBERNETES_DIR [--expect-invalid]
import fs from "node:fs";
import path from "node:path";
import yaml from "js-yaml";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Namespace } from "kubernetes-models/v1/Namespace";
import { DaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import { PodMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor";

const models = { Namespace, ConfigMap, DaemonSet, PodMonitor };
const dir = process.argv[2];
const expectInvalid = process.argv.includes("--expect-invalid");
const failures = [];
const objects = [];

for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".yaml")).sort()) {
  for (const doc of yaml.loadAll(fs.readFileSync(path.join(dir, file), "utf8"))) {
    if (doc == null) continue;
    const Model = models[doc.kind];
    if (!Model) {
      failures.push(`${file}: kind ${doc.kind} has no schema here`);
      continue;
    }
    if (doc.apiVersion !== Model.apiVersion) {
      failures.push(`${file}: ${doc.kind} is ${Model.apiVersion}, not ${doc.apiVersion}`);
      continue;
    }
    try {
      new Model(doc).validate();
      console.log(`${file}: ${doc.kind} ${doc.metadata.name}: valid against the API schema`);
      objects.push(doc);
    } catch (e) {
      failures.push(`${file}: ${doc.kind} ${doc.metadata?.name}: ${e.message}`);
    }
  }
}

// What the DaemonSet promises (docs/fleet.md): checked on the parsed object.
const ds = objects.find((o) => o.kind === "DaemonSet");
const cm = objects.find((o) => o.kind === "ConfigMap");
const check = (cond, what) => (cond ? console.log(`ok: ${what}`) : failures.push(what));
if (ds) {
  const pod = ds.spec.template.spec;
  const byName = Object.fromEntries(pod.containers.map((c) => [c.name, c]));
  const kvtierd = byName.kvtierd;
  check(pod.nodeSelector?.["kvtier.io/cxl-memory"] === "true",
    'nodeSelector kvtier.io/cxl-memory: "true" (what `kvtierctl nodes --label` prints)');
  check(pod.hostPID === true && pod.hostNetwork !== true, "hostPID, the pod's own network");
  for (const c of pod.containers) {
    const sc = c.securityContext ?? {};
    check(sc.privileged !== true && sc.allowPrivilegeEscalation === false,
      `${c.name}: not privileged, no privilege escalation`);
    check(JSON.stringify(sc.capabilities?.drop) === '["ALL"]', `${c.name}: drops ALL capabilities`);
    check(sc.readOnlyRootFilesystem === true, `${c.name}: read-only root filesystem`);
  }
  const added = [...(kvtierd?.securityContext?.capabilities?.add ?? [])].sort().join(",");
  check(added === "BPF,PERFMON,SYS_NICE,SYS_PTRACE", `kvtierd adds exactly BPF, PERFMON, SYS_NICE, SYS_PTRACE (${added})`);
  check((byName["config-reloader"]?.securityContext?.capabilities?.add ?? []).length === 0,
    "config-reloader adds no capability");
  check(kvtierd?.securityContext?.seccompProfile?.type === "Localhost" &&
    kvtierd.securityContext.seccompProfile.localhostProfile === "kvtierd.json" &&
    byName["config-reloader"]?.securityContext?.seccompProfile?.type === "RuntimeDefault",
    "seccomp: kvtierd.json (scripts/seccomp-profile.sh) for kvtierd, the runtime's default for the reloader");
  for (const probe of ["startupProbe", "livenessProbe", "readinessProbe"]) {
    check(kvtierd?.[probe]?.exec?.command?.join(" ") === "kvtierctl --socket /run/kvtier/kvtierd.sock status",
      `kvtierd ${probe}: kvtierctl status on the control socket`);
  }
  const hostPaths = pod.volumes.filter((v) => v.hostPath).map((v) => v.hostPath.path).sort().join(",");
  check(hostPaths === "/sys/kernel/mm/damon,/sys/kernel/tracing", `host mounts: ${hostPaths}`);
  check(kvtierd?.resources?.requests?.cpu && kvtierd?.resources?.limits?.memory,
    "kvtierd has a CPU request and a memory limit");
  check(kvtierd?.ports?.some((p) => p.name === "metrics" && p.containerPort === 9464),
    "kvtierd's metrics port 9464 is named metrics (the PodMonitor's port)");
}
if (cm) {
  const toml = cm.data["kvtier.toml"];
  check(/prometheus_listen = "0\.0\.0\.0:9464"/.test(toml) && /prometheus_allow_non_loopback = true/.test(toml),
    "the ConfigMap serves metrics on the pod's address");
}

for (const f of failures) console.log(`FAIL: ${f}`);
if (expectInvalid) {
  // A negative control: the caller broke the manifests on purpose.
  console.log(failures.length ? "rejected, as expected" : "FAIL: broken manifests were accepted");
  process.exit(failures.length ? 0 : 1);
}
process.exit(failures.length ? 1 : 0);
