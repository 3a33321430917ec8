"""The real-ruleset numbers docs/import.md cites: ``python -m tests.importers.real_numbers``.

Each real ruleset of the corpus (tests/importers/corpus.py: iptables dumps with their
ip6tables twins, nft configurations with their includes) goes through the ``pfc import``
command as a user would run it (``--format json --partial -o OUT.pf``), and OUT.pf
through ``pfc check`` and ``pfc fmt --check``. Whole: exit 0. Partial: exit 1 (rules
refused by name, the rest written). Failed: anything else (exit 2 or 70, or an OUT.pf
that pfc's own checker or formatter refuses). Then the reasons, each ruleset counted
once per reason, with the number of rules."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

from tests.importers.corpus import real_iptables, real_nft

PFC = [sys.executable, "-m", "pfc"]


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(PFC + args, capture_output=True, text=True, check=False)


def rulesets() -> list[tuple[str, list[str]]]:
    """(name, the arguments after ``pfc import``) of each real ruleset."""
    out = []
    for files in real_iptables():
        name = f"{files[0].parent.name}/{files[0].name}"
        out.append((name, [str(f) for f in files]))
    for name, main, root in real_nft():
        out.append((name, [str(main), "--root", str(root)]))
    return out


def _reason(text: str) -> str:
    """A refusal's reason without what varies from rule to rule (quoted words, numbers)."""
    text = text.removeprefix("cannot import: ")
    return re.sub(r"\d+", "N", text)[:90]


def _refused_by_pfc(path: str) -> str:
    """What ``pfc check`` or ``pfc fmt --check`` says against the written policy."""
    for args in (["check", path], ["fmt", "--check", path]):
        done = _run(args)
        if done.returncode != 0:
            return f"pfc {args[0]}: exit {done.returncode}: {done.stderr.strip()}{done.stdout}"
    return ""


def measure() -> tuple[Counter, dict, dict]:
    outcome: Counter = Counter()
    rulesets_by: dict[str, set[str]] = defaultdict(set)
    rules_by: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "out.pf")
        for name, args in rulesets():
            done = _run(["import", *args, "--format", "json", "--partial", "-o", out])
            if done.returncode not in (0, 1):
                outcome[f"failed (exit {done.returncode})"] += 1
                print(f"{name}: exit {done.returncode}: {done.stderr.strip()[:200]}")
                continue
            bad = _refused_by_pfc(out)
            if bad:
                outcome["failed (pfc check or fmt --check refuses the output)"] += 1
                print(f"{name}: {bad[:300]}")
                continue
            report = json.loads(done.stdout)
            outcome["whole" if done.returncode == 0 else "partial"] += 1
            for r in report["reasons"]:
                rulesets_by[_reason(r["reason"])].add(name)
                rules_by[_reason(r["reason"])] += r["count"]
            print(f"{name}: exit {done.returncode} {report['rules']}: "
                  + "; ".join(f"{r['count']}x {r['reason'][:70]}" for r in report["reasons"]))
    return outcome, rulesets_by, rules_by


def main() -> None:
    outcome, rulesets_by, rules_by = measure()
    total = sum(outcome.values())
    print(f"\n{total} real rulesets: " + ", ".join(f"{k} {v}" for k, v in outcome.items()))
    print("\nreason | rulesets | rules")
    for reason, names in sorted(rulesets_by.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{reason} | {len(names)} | {rules_by[reason]}")


if __name__ == "__main__":
    main()
