"""nftables at scale: what loading and running a large heterogeneous policy costs, for
three shapes of ruleset (issue 16, the nft half of the research):

- ``linear``: pfc's own nft output today (one rule per policy rule, netdev ingress);
- ``jumptree``: the decision tree of dtree.py (one tree, not grouped: nft has no
  "smallest rule index of several trees") lowered to chains: an internal node is a
  chain with one ``vmap`` of its cut field's intervals to ``jump`` child chains, a
  leaf a chain of its rules in order (count rules are ``counter`` rules, terminal ones
  ``counter accept|drop``); a frame no leaf rule takes returns to the base chain and
  meets the policy's default;
- ``vmap``: one rule, ``ip saddr . ip daddr . meta l4proto . th dport vmap @m``, over a
  set of N concatenated-interval elements (pipapo) taken from the policy's rules but
  made disjoint (each element's destination a distinct /32): what a first-match
  policy split into disjoint regions would load and cost per packet.

Measured in a throw-away namespace (pfc.bench's lab): ``nft -f`` wall time, and the
CPU ns per packet of 1 s of veth traffic (the policy's trace frames, the injector's
CPU, softirq included: the ``none`` row is the floor every row pays). Leaf rules of
the jump tree match IPv4 well-formed traffic as pfc means it; the guards pfc's nft
backend adds for fragments and bad headers (semantics.md) are left out of this
measurement of cost.

Run as root: ``.venv/bin/python benchmarks/classify_research/nft_measure.py
--flavour acl --rules 8000``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from ipaddress import IPv4Address
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import classbench  # noqa: E402
from benchmarks.classify_research import dtree, model  # noqa: E402
from pfc.bench import measure as bench  # noqa: E402
from pfc.bench import traffic  # noqa: E402
from pfc.build import build_artifact  # noqa: E402
from pfc.frontend.pipeline import compile_text  # noqa: E402

FIELD_EXPR = ("ip protocol", "ip saddr", "ip daddr", "th sport", "th dport")
TABLE = "pfcres"


def _netns_ino() -> int:
    return os.stat("/proc/thread-self/ns/net").st_ino


HOST_NETNS = _netns_ino()  # the namespace this script started in: never flushed


def _ip(v: int) -> str:
    return str(IPv4Address(v))


def _iv(f: int, lo: int, hi: int) -> str | None:
    """nft text of field f's interval in the tree's extended domain, clipped to what
    an IPv4 packet's field can be; None when it is the whole field, "" when no IPv4
    packet has a value in it."""
    top = (257, 2**32 - 1, 2**32 - 1, 65535, 65535)[f]
    if f == 0:  # fp 1 + protocol
        lo, hi = max(lo, 1) - 1, min(hi, 256) - 1
    hi = min(hi, top)
    if lo > hi:
        return ""
    if lo <= 0 and hi >= (255 if f == 0 else top):
        return None
    text = _ip if f in (1, 2) else str
    return text(lo) if lo == hi else f"{text(lo)}-{text(hi)}"


def _leaf_rule(tree: dtree.Tree, e: int, actions: list[str]) -> str:
    parts = []
    for f in range(5):
        iv = _iv(f, int(tree.lo[e][f]), int(tree.hi[e][f]))
        if iv:
            if f >= 3 and not any("ip protocol" in p for p in parts):
                parts.append("meta l4proto { tcp, udp }")
            parts.append(f"{FIELD_EXPR[f]} {iv}")
    action = actions[int(tree.rule[e])]
    verdict = {"count": "", "drop": " drop", "pass": " accept"}[action]
    return " ".join(parts) + " counter" + verdict


def jumptree_text(tree: dtree.Tree, actions: list[str], default: str, dev: str) -> str:
    """The tree as nft chains (module doc)."""
    chains = []
    for k, node in enumerate(tree.nodes):
        field, shift, kbits, a, b, _low, base = node
        lines = []
        if field == dtree.LEAF:
            lines = [_leaf_rule(tree, e, actions) for e in tree.leaf_entries[a:a + b]]
        else:
            elements = []
            for j in range(1 << kbits):
                lo = base + (j << shift)
                iv = _iv(field, lo, lo + (1 << shift) - 1)
                child = tree.nodes[a + j]
                if iv and not (child[0] == dtree.LEAF and child[4] == 0):
                    elements.append(f"{iv} : jump n{a + j}")
            if elements:
                lines = [f"{FIELD_EXPR[field]} vmap {{ " + ", ".join(elements) + " }"]
        body = "".join(f"    {line}\n" for line in lines)
        chains.append(f"  chain n{k} {{\n{body}  }}\n")
    roots = "".join(f"    jump n{r}\n" for r in tree.roots)
    policy = "accept" if default == "pass" else "drop"
    return (f"table netdev {TABLE} {{\n" + "".join(chains)
            + f"  chain ingress {{\n    type filter hook ingress device \"{dev}\" "
            f"priority 0; policy {policy};\n{roots}  }}\n}}\n")


def vmap_text(rules: classbench.RuleSet, dev: str) -> str:
    """N disjoint concatenated-interval elements from the rules (module doc)."""
    elements = []
    for i, r in enumerate(rules.rules):
        src = str(r.src) if r.src else "0.0.0.0/0"
        dst = _ip((198 << 24) | (18 << 16) | i)
        proto = r.proto if r.proto in ("tcp", "udp") else "tcp"
        lo, hi = r.dport or (0, 65535)
        port = str(lo) if lo == hi else f"{lo}-{hi}"
        verdict = "drop" if r.action == "drop" else "accept"
        elements.append(f"{src} . {dst} . {proto} . {port} : {verdict}")
    policy = "accept" if rules.default == "pass" else "drop"
    return (f"table netdev {TABLE} {{\n  map m {{\n    type ipv4_addr . ipv4_addr . "
            "inet_proto . inet_service : verdict\n    flags interval\n    elements = { "
            + ",\n      ".join(elements) + " }\n  }\n  chain ingress {\n"
            f"    type filter hook ingress device \"{dev}\" priority 0; policy {policy};\n"
            "    meta protocol ip ip saddr . ip daddr . meta l4proto . th dport vmap @m\n"
            "  }\n}\n")


def linear_text(compiled, dev: str) -> str:
    artifact, diags = build_artifact(compiled, "nft", dev=dev)
    if artifact is None:
        raise RuntimeError("; ".join(d.message for d in diags))
    return artifact.text


def _nft(text: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(["nft", "-f", "-"], input=text, text=True, check=True,
                   capture_output=True)
    return time.perf_counter() - t0


def _flush() -> None:
    """Empty the lab namespace's ruleset; refuses in the host's own namespace."""
    if _netns_ino() == HOST_NETNS:
        raise RuntimeError("not inside the lab namespace: refusing to flush the ruleset")
    subprocess.run(["nft", "flush", "ruleset"], check=True)


def measure(texts: dict[str, str], frames: list[bytes], seconds: float) -> dict:
    out = {}
    with bench.bench_lab() as lab:
        frames = [bench.DUT_MAC + bench.SEND_MAC + f[12:] for f in frames]
        for name, text in texts.items():
            _flush()
            row: dict = {"bytes": len(text)}
            try:
                row["load_s"] = round(_nft(text.replace("__DEV__", lab.dut)), 2) \
                    if text else 0.0
            except subprocess.CalledProcessError as exc:
                out[name] = {"status": f"nft refused: {exc.stderr.strip()[:300]}"}
                continue
            runs = [traffic.blast(lab.inj, bench.DUT_MAC, frames, seconds, None,
                                  traffic.delivered, probes=False) for _ in range(2)]
            cpu = min(t.cpu_ns / max(1, t.sent) for t in runs)
            row |= {"cpu_ns_per_packet": round(cpu), "pps": round(runs[0].sent
                                                                  / runs[0].seconds)}
            out[name] = row
            print(name, row, file=sys.stderr)
        _flush()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flavour", default="acl", choices=classbench.FLAVOURS)
    ap.add_argument("--rules", type=int, default=8000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--variants", default="none,one,linear,jumptree,vmap")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    rules = classbench.generate(args.flavour, args.rules, args.seed)
    compiled = compile_text(rules.text(), f"{args.flavour}-{args.rules}.pf")
    cs = model.conds(compiled.require())
    frames = classbench.trace(rules, 64, args.seed)
    texts: dict[str, str] = {}
    wanted = args.variants.split(",")
    build_s = {}
    for name in wanted:
        t0 = time.perf_counter()
        if name == "none":
            texts[name] = ""
        elif name == "one":
            one = compile_text(classbench.generate(args.flavour, 1, 0).text(), "one.pf")
            texts[name] = linear_text(one, "__DEV__")
        elif name == "linear":
            texts[name] = linear_text(compiled, "__DEV__")
        elif name == "jumptree":
            tree = dtree.Tree(cs, 8, 4.0, grouped=False)
            texts[name] = jumptree_text(tree, [c.action for c in cs], rules.default,
                                        "__DEV__")
        elif name == "vmap":
            texts[name] = vmap_text(rules, "__DEV__")
        build_s[name] = round(time.perf_counter() - t0, 2)
    result = measure(texts, frames, args.seconds)
    for name in result:
        result[name]["build_s"] = build_s.get(name)
    report = {"flavour": args.flavour, "rules": args.rules, "variants": result}
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
