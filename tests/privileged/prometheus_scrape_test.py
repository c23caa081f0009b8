#!/usr/bin/env python3
"""Debian's prometheus scrapes a real kvtierd on loopback, with deploy/prometheus's rules loaded.

Asserts: the scrape succeeds (up == 1), kvtier's series exist with values that agree with the
host (/sys node memory, the target's pid, kvtierctl status), the recording rules evaluate on
them, a rejected reload shows in the metrics and makes KvtierReloadRejected pending, `promtool
check metrics` passes on the scraped text, and up turns 0 once kvtierd stops.

Usage: prometheus_scrape_test.py BUILD_DIR SOURCE_DIR (needs root: kvtierd loads BPF).
Exit 77 (skip) when not root.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

MIB = 1 << 20
TARGET_BYTES = 64 * MIB


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Failure(Exception):
    pass


def wait_for(what, cond, timeout=60):
    """Polls cond() until it returns something true; its last value is returned."""
    end = time.monotonic() + timeout
    err = None
    while time.monotonic() < end:
        try:
            last = cond()
        except (OSError, ValueError, KeyError, TypeError) as e:  # not up yet, no sample yet
            last, err = None, e
        if last:
            return last
        time.sleep(0.2)
    raise Failure(f"timed out after {timeout}s waiting for {what} (last error: {err})")


class Prometheus:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, q):
        url = self.base + "/api/v1/query?" + urllib.parse.urlencode({"query": q})
        body = json.loads(http_get(url))
        if body.get("status") != "success":
            raise Failure(f"query {q}: {body}")
        return body["data"]["result"]

    def scalar(self, q):
        """The value of a query that must return exactly one sample, or None."""
        r = self.query(q)
        if len(r) != 1:
            return None
        return float(r[0]["value"][1])


def check(cond, msg):
    if not cond:
        raise Failure(msg)
    print(f"ok: {msg}")


def node_meminfo_total(node):
    with open(f"/sys/devices/system/node/node{node}/meminfo") as f:
        for line in f:
            if "MemTotal:" in line:
                return int(line.split()[3]) * 1024
    raise Failure(f"no MemTotal in node{node}/meminfo")


def node_has_cpus(node):
    with open(f"/sys/devices/system/node/node{node}/cpulist") as f:
        return f.read().strip() != ""


def main():
    build, src = sys.argv[1], sys.argv[2]
    if os.geteuid() != 0:
        print("SKIP: kvtierd needs root (CAP_BPF, CAP_PERFMON) to run")
        return 77
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            raise Failure(f"{tool} not found: install Debian's prometheus package (scripts/setup.sh)")

    tmp = tempfile.mkdtemp(prefix="kvtier-prom-")
    procs = []
    try:
        return run(build, src, tmp, procs)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if os.environ.get("KVTIER_KEEP_TMP"):
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def run(build, src, tmp, procs):
    # The target: 64 MiB written, then idle.
    target = subprocess.Popen(
        [sys.executable, "-c",
         f"import time\nb = b'k' * {TARGET_BYTES}\nprint('ready', flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    procs.append(target)
    check(target.stdout.readline().strip() == "ready", f"target pid {target.pid} holds 64 MiB")

    kv_port = free_port()
    conf = os.path.join(tmp, "kvtier.toml")
    good = (
        '[daemon]\ninterval = "1s"\n'
        '[telemetry]\nsocket_group = "root"\nprometheus = true\n'
        f'prometheus_listen = "127.0.0.1:{kv_port}"\n'
        '[[group]]\nname = "scrape"\n'
        f'[group.select]\npid = [{target.pid}]\n')
    with open(conf, "w") as f:
        f.write(good)
    sock = os.path.join(tmp, "kvtierd.sock")
    kv_log = open(os.path.join(tmp, "kvtierd.log"), "w")
    kvtierd = subprocess.Popen(
        [os.path.join(build, "agent/kvtierd"), "--foreground", "--config", conf, "--socket", sock],
        stdout=kv_log, stderr=subprocess.STDOUT)
    procs.append(kvtierd)

    def kv_log_text():
        with open(kv_log.name) as f:
            return f.read()

    try:
        wait_for("kvtierd's control socket", lambda: os.path.exists(sock), 60)
    except Failure:
        print(kv_log_text())
        raise

    pr_port = free_port()
    with open(os.path.join(tmp, "prometheus.yml"), "w") as f:
        f.write(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {src}/deploy/prometheus/kvtier-rules.yml\n"
            "scrape_configs:\n  - job_name: kvtier\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{kv_port}']\n")
    pr_log = open(os.path.join(tmp, "prometheus.log"), "w")
    prom = subprocess.Popen(
        ["prometheus", f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
         f"--web.listen-address=127.0.0.1:{pr_port}", "--log.level=warn"],
        stdout=pr_log, stderr=subprocess.STDOUT)
    procs.append(prom)
    p = Prometheus(pr_port)
    try:
        wait_for("prometheus ready", lambda: "Ready" in http_get(p.base + "/-/ready"), 60)
        body = scrape_checks(p, build, src, tmp, kv_port, sock, target, kvtierd, conf, good)
    except Failure:
        print("--- kvtierd log\n" + kv_log_text())
        with open(pr_log.name) as f:
            print("--- prometheus log\n" + f.read())
        raise

    # promtool on what kvtierd served.
    path = os.path.join(tmp, "metrics.txt")
    with open(path, "w") as f:
        f.write(body)
    lint = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True,
                          text=True)
    check(lint.returncode == 0 and lint.stdout.strip() == "" and lint.stderr.strip() == "",
          f"promtool check metrics passes on the scrape ({len(body.splitlines())} lines): "
          f"{lint.stdout}{lint.stderr}")

    kvtierd.send_signal(signal.SIGTERM)
    check(kvtierd.wait(30) == 0, "kvtierd stops on SIGTERM with status 0")
    wait_for("up == 0 after kvtierd stopped", lambda: p.scalar('up{job="kvtier"}') == 0, 30)
    check(True, "up{job=\"kvtier\"} is 0 once kvtierd is gone (KvtierDown's condition)")
    return 0


def scrape_checks(p, build, src, tmp, kv_port, sock, target, kvtierd, conf, good):
    wait_for("up == 1", lambda: p.scalar('up{job="kvtier"}') == 1, 60)
    check(True, 'up{job="kvtier"} == 1: the scrape succeeds')
    # Steps run each second; wait for the target's residency to be read.
    pid = str(target.pid)
    resident = wait_for(
        "the target's resident bytes",
        lambda: p.scalar(f'sum(kvtier_target_resident_bytes{{pid="{pid}"}})'), 60)

    names = {r["metric"]["__name__"] for r in p.query('{job="kvtier", __name__=~"kvtier_.+"}')}
    print("series names:", " ".join(sorted(names)))
    required = {
        "kvtier_paused", "kvtier_reloads_total", "kvtier_config_last_reload_successful",
        "kvtier_loop_steps_total", "kvtier_loop_duration_seconds_bucket",
        "kvtier_loop_duration_seconds_sum", "kvtier_loop_duration_seconds_count",
        "kvtier_node_memory_free_bytes", "kvtier_node_memory_total_bytes", "kvtier_node_info",
        "kvtier_observe_only", "kvtier_target_resident_bytes", "kvtier_plan_moves",
        "kvtier_plan_bytes", "kvtier_demoted_bytes_total", "kvtier_misdemotion_ratio",
        "kvtier_effective_cold_age_seconds",
    }
    check(required <= names, f"the expected series exist (missing: {sorted(required - names)})")

    # Node memory and roles agree with /sys.
    totals = {r["metric"]["node"]: float(r["value"][1])
              for r in p.query('kvtier_node_memory_total_bytes{job="kvtier"}')}
    for node, v in totals.items():
        check(v == node_meminfo_total(node),
              f"kvtier_node_memory_total_bytes{{node=\"{node}\"}} = {v:.0f} = node{node}/meminfo")
    free = {r["metric"]["node"]: float(r["value"][1])
            for r in p.query('kvtier_node_memory_free_bytes{job="kvtier"}')}
    check(free.keys() == totals.keys() and all(0 < free[n] <= totals[n] for n in free),
          "0 < free <= total on every node")
    infos = p.query('kvtier_node_info{job="kvtier"}')
    check({r["metric"]["node"] for r in infos} == totals.keys(), "one kvtier_node_info per node")
    for r in infos:
        n = r["metric"]["node"]
        want = "true" if node_has_cpus(n) else "false"
        check(r["metric"]["has_cpus"] == want and r["value"][1] == "1",
              f"node {n}: has_cpus=\"{want}\" as in node{n}/cpulist")

    # The target: at least what it wrote, at most the host's memory.
    check(TARGET_BYTES <= resident <= sum(totals.values()),
          f"target {pid}: {resident / MIB:.1f} MiB resident, at least the 64 MiB it wrote")

    ctl = [os.path.join(build, "agent/kvtierctl"), "--socket", sock]
    status = json.loads(subprocess.run(ctl + ["status", "--json"], capture_output=True, text=True,
                                       check=True).stdout)
    observe = p.scalar('kvtier_observe_only{job="kvtier"}')
    check(observe == (1.0 if status["loop"]["observe_only"] else 0.0),
          f"kvtier_observe_only = {observe:.0f}, as kvtierctl status says")

    steps1 = p.scalar('kvtier_loop_steps_total{job="kvtier",result="ok"}')
    wait_for("more loop steps", lambda: p.scalar(
        'kvtier_loop_steps_total{job="kvtier",result="ok"}') > steps1, 30)
    check(True, f"kvtier_loop_steps_total{{result=\"ok\"}} grows (was {steps1:.0f})")
    mean = p.scalar('kvtier_loop_duration_seconds_sum / kvtier_loop_duration_seconds_count')
    check(mean is not None and 0 < mean < 5, f"mean step {mean:.4f} s, between 0 and 5 s")
    check(p.scalar('kvtier_paused{job="kvtier"}') == 0, "kvtier_paused = 0")
    check(p.scalar('kvtier_config_last_reload_successful{job="kvtier"}') == 1,
          "kvtier_config_last_reload_successful = 1")
    check(p.scalar('kvtier_reloads_total{job="kvtier",result="rejected"}') == 0,
          "kvtier_reloads_total{result=\"rejected\"} = 0 before any reload")

    # deploy/prometheus's recording rules on the real series.
    rec = wait_for("instance:kvtier_resident_bytes:sum",
                   lambda: p.scalar("instance:kvtier_resident_bytes:sum"), 30)
    check(rec >= resident, f"instance:kvtier_resident_bytes:sum = {rec / MIB:.1f} MiB")

    # A rejected reload: the metric, then the alert pending (its `for` is 1m).
    with open(conf, "w") as f:
        f.write("[daemon\n")
    kvtierd.send_signal(signal.SIGHUP)
    wait_for("kvtier_config_last_reload_successful == 0",
             lambda: p.scalar('kvtier_config_last_reload_successful{job="kvtier"}') == 0, 30)
    check(p.scalar('kvtier_reloads_total{job="kvtier",result="rejected"}') == 1,
          "a bad config: kvtier_config_last_reload_successful = 0, 1 rejected reload")

    def reload_alert():
        alerts = json.loads(http_get(p.base + "/api/v1/alerts"))["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "KvtierReloadRejected"]

    alert = wait_for("KvtierReloadRejected pending", reload_alert, 30)
    check(alert[0]["state"] in ("pending", "firing"),
          f"KvtierReloadRejected is {alert[0]['state']} for {alert[0]['labels']['instance']}")
    with open(conf, "w") as f:
        f.write(good)
    kvtierd.send_signal(signal.SIGHUP)
    wait_for("kvtier_config_last_reload_successful == 1 again",
             lambda: p.scalar('kvtier_config_last_reload_successful{job="kvtier"}') == 1, 30)
    check(True, "the good config back: kvtier_config_last_reload_successful = 1")

    return http_get(f"http://127.0.0.1:{kv_port}/metrics")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print(f"FAIL: {e}")
        sys.exit(1)
