"""Filters of the pfc role: pfc's JSON read into what a play needs, and the fleet report
(every host's ``pfc status --format json`` merged into one table)."""

from __future__ import annotations

import json
from collections import defaultdict


def _json(text: str) -> dict | None:
    try:
        out = json.loads(text)
    except (TypeError, ValueError):
        return None
    return out if isinstance(out, dict) else None


def pfc_changed(stdout: str) -> bool:
    """``changed`` of ``pfc apply --format json``; output that is not pfc's JSON counts
    as a change (the next task fails on it anyway)."""
    out = _json(stdout)
    return True if out is None else bool(out.get("changed"))


def pfc_refusal(result: dict) -> str:
    """Why ``pfc apply [--dry-run] --format json`` failed, one line: each failed place
    with pfc's messages, or the config's error, or the end of stderr."""
    out = _json(result.get("stdout", ""))
    if out is not None and out.get("error"):
        return str(out["error"])
    failed = [f"{o['place']}: {'; '.join(o.get('messages') or []) or o['action']}"
              for o in (out or {}).get("outcomes", [])
              if str(o.get("action", "")).lower().startswith("fail")]
    if failed:
        return " | ".join(failed)
    err = (result.get("stderr") or "").strip().splitlines()
    return err[-1] if err else f"pfc exited {result.get('rc')}"


def _total(rows: list[dict], key: str) -> int | None:
    values = [r.get(key) for r in rows]
    return None if any(v is None for v in values) else sum(values)


def pfc_fleet_rows(hosts: list[str], hostvars) -> list[dict]:
    """One row per host and loaded policy (a host with none: one row saying so)."""
    rows = []
    for host in hosts:
        status = hostvars[host].get("pfc_status")
        if not isinstance(status, dict):
            rows.append({"host": host, "health": "no status (unreachable, or never reached)"})
            continue
        if not status.get("loaded"):
            rows.append({"host": host, "health": "nothing loaded"})
        for e in status.get("loaded", []):
            drift = e["health"] != "ok" or bool(e.get("policy_file_changed"))
            rows.append({
                "host": host, "netns": e["netns"], "target": e["target"], "dev": e["dev"],
                "policy": e["policy"], "sha256": e["sha256"], "loaded_at": e["loaded_at"],
                "health": e["health"], "detail": e.get("detail"), "drift": drift,
                "policy_file_changed": e.get("policy_file_changed"),
                "rule_packets": _total(e["rules"], "packets"),
                "rule_bytes": _total(e["rules"], "bytes"),
                "default_packets": e["default_counter"]["packets"]})
    return rows


def pfc_fleet_table(rows: list[dict]) -> str:
    """The rows as a text table, then which hosts run which policy."""
    head = ("HOST", "PLACE", "POLICY", "SHA256", "HEALTH", "DRIFT", "RULE PKTS",
            "RULE BYTES", "DEFAULT PKTS")

    def cell(v) -> str:
        return "?" if v is None else str(v)
    lines = [tuple(cell(x) for x in (
        r["host"], f"{r['target']} {r['dev']}" if "target" in r else "-",
        r.get("policy", "-").rsplit("/", 1)[-1], r.get("sha256", "-")[:12], r["health"],
        ("yes" if r["drift"] else "no") if "drift" in r else "-",
        r.get("rule_packets", "-"), r.get("rule_bytes", "-"), r.get("default_packets", "-")))
        for r in rows]
    widths = [max(len(x[i]) for x in [head, *lines]) for i in range(len(head))]
    text = ["  ".join(x.ljust(w) for x, w in zip(line, widths, strict=True)).rstrip()
            for line in [head, *lines]]
    runs = defaultdict(list)
    for r in rows:
        if "sha256" in r:
            runs[(r["target"], r["dev"], r["sha256"][:12])].append(r["host"])
    text.append("")
    text += [f"{target} {dev}: sha256 {digest} on {', '.join(hosts)}"
             for (target, dev, digest), hosts in sorted(runs.items())]
    drifted = sorted({r["host"] for r in rows if r.get("drift")})
    text.append("drift: " + (", ".join(drifted) if drifted else "none"))
    return "\n".join(text)


class FilterModule:
    def filters(self):
        return {"pfc_changed": pfc_changed, "pfc_refusal": pfc_refusal,
                "pfc_fleet_rows": pfc_fleet_rows, "pfc_fleet_table": pfc_fleet_table}
