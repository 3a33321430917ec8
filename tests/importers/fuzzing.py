"""Mutated rulesets through ``pfc import``: no input may make it fail (an exception, a
checker error on its own output), whatever the bytes. Seeds: the real rulesets of the
corpus (iptables and nft), nft's JSON dumps, netfilter's own test files (nft's shell
dumps, iptables' ``extensions/*.t`` rules as dumps), pcap-filter expressions; mutations: lines
dropped, doubled, swapped or cut, bytes flipped, tokens of every format spliced in,
numbers made huge, text cut anywhere.

benchmarks/import_fuzz.py runs the long campaign (10,000 inputs) the docs cite;
tests/importers/test_fuzz.py a short one (1,000).
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from pfc.frontend.source import SourceFile
from pfc.importers.detect import UnknownFormat
from pfc.importers.driver import import_sources
from tests.importers.corpus import iptables_t_cases, iptables_t_dump, nft_dumps

TOKENS = ["-A", "-j", "ACCEPT", "DROP", "RETURN", "-m", "state", "--state", "NEW,BOGUS",
          "!", "-s", "10.0.0.0/33", "::1", "-p", "tcp", "--dport", "70000", "1:2:3",
          "*filter", "COMMIT", ":INPUT", "-", "[0:0]", "-g", "LOOP", '"', "\\", "{", "}",
          ";", "table", "chain", "inet", "type", "filter", "hook", "input", "priority",
          "-99999999999999999999", "policy", "accept", "jump", "goto", "vmap", "@set",
          "$undefined", "define", "include", '"/dev/zero"', "ct", "state", "tcp", "flags",
          "&", "|", "(", ")", ".", ":", "map", "dnat", "to", "[", "]", "and", "or",
          "not", "host", "port", "\x00", "\u202e", "é", "0x" + "f" * 70]
FORMATS = ("iptables", "nft", "nft-json", "pcap-filter", None)


def seeds(corpus: Path) -> list[tuple[str, str]]:
    out = []
    for path in sorted((corpus / "real" / "iptables").glob("*/*")):
        if "LICEN" not in path.name and "COPYING" not in path.name and \
                path.stat().st_size < 60_000:
            out.append(("iptables", path.read_text(errors="replace")))
    for path in sorted((corpus / "real" / "nft").glob("*/root/**/*")):
        if path.is_file():
            out.append(("nft", path.read_text(errors="replace")))
    for path in sorted((corpus / "nftables").glob("tests/shell/testcases/**/dumps/*.json-nft"
                                                   ))[:40]:
        out.append(("nft-json", path.read_text(errors="replace")))
    # netfilter's own test files: every 8th nft dump, every 16th iptables .t rule
    out += [("nft", p.read_text(errors="replace")) for p in nft_dumps()[::8]]
    out += [("iptables", iptables_t_dump(*case[1:]))
            for case in list(iptables_t_cases())[::16]]
    out += [("pcap-filter", e) for e in ("tcp port 80 and not src net 10/8",
                                         "ip and (udp portrange 1-100 or icmp)",
                                         "ether src 1:2:3:4:5:6 or not arp")]
    return out


def mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 4)):
        text = rng.choice(_MUTATIONS)(text, rng)
    return text


def _lines(text: str, rng: random.Random) -> str:
    lines = text.split("\n")
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    kind = rng.randrange(4)
    if kind == 0:
        del lines[i]
    elif kind == 1:
        lines.insert(j, lines[i])
    elif kind == 2:
        lines[i], lines[j] = lines[j], lines[i]
    else:
        lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
    return "\n".join(lines)


def _token(text: str, rng: random.Random) -> str:
    at = rng.randrange(len(text) + 1)
    return text[:at] + " " + rng.choice(TOKENS) + " " + text[at:]


def _bytes(text: str, rng: random.Random) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 8)):
        if chars:
            chars[rng.randrange(len(chars))] = chr(rng.randrange(1, 0x3000))
    return "".join(chars)


def _numbers(text: str, rng: random.Random) -> str:
    import re
    return re.sub(r"\d+", lambda m: rng.choice([m.group(), "0", "65536", "4294967296",
                                                "9" * 30, "-1"]), text, count=5)


def _cut(text: str, rng: random.Random) -> str:
    return text[:rng.randrange(len(text) + 1)]


_MUTATIONS = (_lines, _lines, _token, _token, _bytes, _numbers, _cut)


def run(corpus: Path, inputs: int, seed: int = 0, keep: Path | None = None) -> Counter:
    """``inputs`` mutated rulesets; counts of outcomes (``crash`` must stay 0); the
    inputs that crashed are written to ``keep`` (a directory) when given."""
    rng = random.Random(seed)
    pool = seeds(corpus)
    seen: Counter = Counter()
    for n in range(inputs):
        kind, text = rng.choice(pool)
        text = mutate(text, rng)
        fmt = rng.choice(FORMATS) if rng.random() < 0.3 else kind
        try:
            result = import_sources([SourceFile(f"fuzz{n}", text)], fmt)
        except UnknownFormat:
            seen["unknown format"] += 1
            continue
        except Exception as exc:  # noqa: BLE001  (what the campaign counts)
            seen["crash"] += 1
            seen[f"crash: {type(exc).__name__}: {str(exc)[:120]}"] += 1
            if keep is not None:
                (keep / f"crash-{seed}-{n}.txt").write_text(f"{fmt}\n{text}")
            continue
        seen["complete" if result.complete else "refused"] += 1
    return seen
