#!/usr/bin/env python3
"""Every PromQL expression in deploy/grafana's dashboards parses (promtool, Debian's prometheus
package, checks them as recording rules) and names only series kvtierd exports: the families
agent/ declares (a histogram's _bucket, _sum, _count), the recording rules of
deploy/prometheus, and Prometheus' own `up`.

Grafana's variables are replaced before parsing: $__rate_interval and $__interval by 5m,
label_values(SELECTOR, LABEL) by its selector; "$instance" sits inside a label matcher's string.

Usage: grafana_dashboard_test.py SOURCE_DIR
"""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "inf", "nan"}


def exprs_of(node, out):
    """Every `expr` of a target and every variable query, anywhere in the dashboard."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "expr" and isinstance(v, str):
                out.append(v)
            elif k == "query" and isinstance(v, dict) and isinstance(v.get("query"), str):
                out.append(v["query"])
            else:
                exprs_of(v, out)
    elif isinstance(node, list):
        for v in node:
            exprs_of(v, out)
    return out


def to_promql(expr):
    expr = expr.replace("$__rate_interval", "5m").replace("$__interval", "5m")
    m = re.fullmatch(r"\s*label_values\((.*),\s*[a-zA-Z_]\w*\s*\)\s*", expr, re.S)
    return m.group(1) if m else expr


def names_in(expr):
    """Series names: identifiers outside strings, label matchers, ranges and label lists that
    are not functions, keywords or numbers."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    out = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue
        if re.fullmatch(r"[0-9]", s[m.start() - 1:m.start()] or " "):
            continue  # the exponent or unit of a number (1e3)
        out.add(word)
    return out


def exported_names(src):
    names = {"up"}
    for path in glob.glob(os.path.join(src, "agent/*/*.cpp")):
        text = open(path).read()
        for m in re.finditer(r'describe\(\s*"(kvtier_\w+)",\s*MetricKind::k(\w+)', text):
            name, kind = m.groups()
            if kind == "Histogram":
                names |= {name + "_bucket", name + "_sum", name + "_count"}
            else:
                names.add(name)
    rules = open(os.path.join(src, "deploy/prometheus/kvtier-rules.yml")).read()
    names |= set(re.findall(r"^\s*- record:\s*(\S+)", rules, re.M))
    return names


def promtool_parses(exprs, tmp):
    path = os.path.join(tmp, "dashboard-rules.yml")
    with open(path, "w") as f:
        f.write("groups:\n  - name: dashboard\n    rules:\n")
        for i, e in enumerate(exprs):
            f.write(f"      - record: dashboard:expr_{i}\n        expr: {json.dumps(e)}\n")
    return subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)


def main():
    src = sys.argv[1]
    known = exported_names(src)
    assert len(known) > 20, f"found only {sorted(known)} in agent/: the pattern is stale"
    failures = []
    dashboards = sorted(glob.glob(os.path.join(src, "deploy/grafana/*.json")))
    if not dashboards:
        failures.append("no dashboard in deploy/grafana")
    with tempfile.TemporaryDirectory() as tmp:
        # The parser must reject what is not PromQL, or its passes mean nothing.
        bad = promtool_parses(['sum(rate(kvtier_moved_bytes_total[5m])'], tmp)
        if bad.returncode == 0:
            failures.append("promtool accepted an unbalanced expression")
        for path in dashboards:
            dash = json.load(open(path))
            exprs = [to_promql(e) for e in exprs_of(dash, [])]
            rows = {p["title"].split(" (")[0] for p in dash["panels"] if p.get("type") == "row"}
            if not {"Fleet", "Host detail", "Mover health"} <= rows:
                failures.append(f"{path}: rows {sorted(rows)} lack Fleet, Host detail, Mover health")
            r = promtool_parses(exprs, tmp)
            if r.returncode != 0:
                failures.append(f"{path}: promtool check rules:\n{r.stdout}{r.stderr}")
            used = set()
            for e in exprs:
                unknown = names_in(e) - known
                used |= names_in(e)
                if unknown:
                    failures.append(f"{path}: {e!r} names {sorted(unknown)}, which kvtierd does "
                                    "not export")
            print(f"{os.path.basename(path)}: {len(exprs)} expressions, "
                  f"{len(used)} series names: {' '.join(sorted(used))}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
