"""The Grafana dashboard in docs/grafana: promtool parses every query, each
names only series watch serves, and it has the panels the README promises
(a latency heatmap per stage, p99 per stage, calls per row, overhead). The
integration tier (test_watch) runs the same queries against a real
Prometheus scraping watch."""

from __future__ import annotations

import json
import re
import subprocess

from conftest import DASHBOARD, dashboard_queries
from mysqlprobe.analysis.model import Profile
from mysqlprobe.capture import read_profile
from mysqlprobe.commands.watch import Metrics
from test_exports import FIXTURES, tool


def served_series() -> set[str]:
    """Every series name watch can serve: both fixture captures added, and a P_S stage."""
    metrics = Metrics()
    for name in ("profile_v1_exact.json", "profile_v1_sampled.json"):
        metrics.add(Profile(read_profile(str(FIXTURES / name))))
    metrics.totals.ps_stage_s["stage/sql/update"] = 1.0
    names = set()
    for line in metrics.text().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names |= {name + s for s in ("_bucket", "_sum", "_count")} if kind == "histogram" else {name}
    return names


def test_promtool_parses_every_query(tmp_path):
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query{i}", "expr": expr} for i, expr in enumerate(dashboard_queries().values())]}]}
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    check = subprocess.run([tool("promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"{len(dashboard_queries())} rules found" in check.stdout


def test_every_query_names_only_series_watch_serves():
    served = served_series()
    for title, expr in dashboard_queries().items():
        named = set(re.findall(r"\bmysqlprobe_\w+", expr))
        assert named and named <= served, (title, named - served)


def test_the_panels_the_readme_promises():
    doc = json.loads(DASHBOARD.read_text())
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    heatmaps = [p for p in panels if p["type"] == "heatmap"]
    assert heatmaps and all(p.get("repeat") == "stage" for p in heatmaps)
    assert all(t.get("format") == "heatmap" and "_bucket" in t["expr"] for p in heatmaps for t in p["targets"])
    exprs = " ".join(dashboard_queries().values())
    assert "histogram_quantile(0.99, sum by (instance, stage, le)" in exprs
    assert "mysqlprobe_stage_calls_total" in exprs and "mysqlprobe_rows_changed_total" in exprs
    assert "mysqlprobe_overhead_slowdown_ratio" in exprs and "mysqlprobe_overhead_budget_ratio" in exprs
    variables = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "instance", "stage"} <= variables
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
