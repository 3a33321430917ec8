"""Artifacts with one change each, for the mutation tests and the benchmark.

Each target gets the kinds of change a hand edit or a compiler bug makes: a jump
target moved, a constant off by one, a branch swapped, a load offset moved, a rule
removed (pfc's artifact of the policy without that rule). Mutants are drawn with a
seeded ``random.Random`` and are distinct; some are equivalent to the policy (a
constant nothing can reach), which is what the prover must then say.
"""

from __future__ import annotations

import contextlib
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from pfc.backends.base import Artifact
from pfc.build import build_artifact
from pfc.frontend.pipeline import Compiled


@dataclass(frozen=True)
class Mutant:
    what: str  # "constant +1 at instruction 7", ...
    artifact: Artifact


def mutants(compiled: Compiled, artifact: Artifact, n: int, seed: int = 0) -> list[Mutant]:
    """Up to ``n`` distinct mutants of ``artifact``."""
    rng = random.Random(seed)
    out, seen = [], set()
    makers = {"cbpf": _cbpf, "nft": _text, "iptables": _text}.get(artifact.target, _ebpf)
    pool = list(makers(artifact))
    rng.shuffle(pool)
    removals = list(_removals(compiled, artifact))
    rng.shuffle(removals)
    share = max(1, n // 10)
    for what, make in removals[:share] + pool:
        if len(out) >= n or what in seen:
            continue
        seen.add(what)
        mutant = make()
        if mutant is not None:
            out.append(Mutant(what, mutant))
    return out


# ----------------------------------------------------------------------- judging

OUTCOMES = ("differs", "proved", "kernel refuses", "models refuse", "unconfirmed")


@dataclass(frozen=True)
class Judged:
    """What became of one mutant: ``outcome`` one of ``OUTCOMES``: the prover says it
    differs and the kernel, running it on the witness, confirms; the prover proves it
    equal; the kernel (or its loader) refuses to load it, so it is no program; the
    models cannot read a program the kernel takes (a gap, ``note`` says which); the
    prover says it differs and the kernel does not confirm (a pfc bug)."""

    mutant: Mutant
    outcome: str
    note: str = ""


# an IPv4 UDP datagram, header checksum verifying: a frame every hook sees
PROBE = bytes.fromhex("02000000000102000000000208004500001c00010000401100000a0000010a"
                      "00000204d2003500080000")


def judge(m: Mutant, policy) -> Judged:
    """Prove ``m`` against ``policy``; run it in the kernel where that decides
    (inside :func:`lab`)."""
    from pfc.prove import proof, views
    from pfc.prove.targets.cbpf import Unsupported
    try:
        result = proof.prove(m.artifact, policy)
    except Unsupported as exc:
        if not proof.loads(m.artifact, views.repair("ip", PROBE)):
            return Judged(m, "kernel refuses", str(exc))
        return Judged(m, "models refuse", str(exc))
    except (RuntimeError, OSError) as exc:  # nft's model reads the ruleset back from
        if proof.refused(exc):              # the kernel: nft refuses to load it
            return Judged(m, "kernel refuses", str(exc).splitlines()[0])
        raise
    if result.equal:
        return Judged(m, "proved")
    if proof.REFUSED in result.note:
        return Judged(m, "kernel refuses", result.note)
    return Judged(m, "differs" if result.confirmed else "unconfirmed", result.note)


def disagreement(artifact: Artifact, policy, n: int = 200) -> str | None:
    """Where ``artifact``, run in the kernel on ``n`` generated frames, disagrees with
    the interpreter in what the prover proves (verdicts, rewritten bytes, the packet
    counters of `count` rules), or None. The counters every rule and the default carry for
    `pfc status` (per-CPU slots, nft/iptables rule counters) are not proved
    (docs/prove.md): a mutant that only moves those is proved equal, rightly."""
    from pfc import backends
    from pfc.kernel.bpf import BpfError
    from pfc.oracle import gen
    from pfc.verifier.equiv import compare

    try:
        report = compare(artifact, backends.get(artifact.target), gen.sample(policy, n, seed=5))
    except BpfError:
        return None  # the same meaning, but not a program the verifier takes (a check removed)
    except RuntimeError as exc:
        if "rules in" not in str(exc):
            raise
        return None  # the runner cannot read per-rule counters of an edited rule layout
    counted = {r.index for r in policy.count_rules}  # packets: eBPF byte counters are
    want = {k: v[0] for k, v in (report.counters_expected or {}).items() if k in counted}
    got = want if report.counters_got is None else {  # not proved (None: no counters)
        k: v[0] for k, v in report.counters_got.items() if k in counted}
    if report.mismatches or want != got:
        return report.summary()
    return None


@contextlib.contextmanager
def lab(target: str):
    """One throw-away namespace for every mutant's kernel runs (nft, iptables)."""
    if target == "nft":
        from pfc.backends.nft import run as nftrun
        with nftrun.session():
            yield
    elif target == "iptables":
        from pfc.backends.iptables import run as iptrun
        with iptrun.session():
            yield
    else:
        yield


def _removals(compiled: Compiled, artifact: Artifact) -> Iterator:
    policy = compiled.require()
    for rule in policy.rules:
        def make(rule=rule):
            rest = replace(policy, rules=tuple(r for r in policy.rules if r is not rule))
            smaller = replace(compiled, policy=rest)
            built, _ = build_artifact(smaller, artifact.target, hook=artifact.hook,
                                      **({"dev": artifact.meta["dev"]}
                                         if artifact.meta.get("dev") else {}))
            return None if built is None else replace(built, policy=policy)
        yield f"rule at line {rule.line} removed", make


def _cbpf(artifact: Artifact) -> Iterator:
    insns = list(artifact.meta["insns"])

    def variant(i: int, insn) -> Artifact:
        changed = insns[:i] + [insn] + insns[i + 1:]
        return replace(artifact, meta=artifact.meta | {"insns": changed})
    for i, (code, jt, jf, k) in enumerate(insns):
        cls = code & 0x07
        if cls == 0x05 and code != 0x05:
            yield f"branches swapped at {i}", lambda i=i, c=code, t=jt, f=jf, k=k: \
                variant(i, (c, f, t, k))
            if i + 2 + jt < len(insns):
                yield f"jump target +1 at {i}", lambda i=i, c=code, t=jt, f=jf, k=k: \
                    variant(i, (c, t + 1, f, k))
        if cls in (0x04, 0x05, 0x06) and not code & 0x08:
            for d in (1, -1):
                yield f"constant {d:+d} at {i}", lambda i=i, c=code, t=jt, f=jf, k=k, d=d: \
                    variant(i, (c, t, f, (k + d) & 0xFFFFFFFF))
        if cls in (0x00, 0x01) and code & 0xE0 in (0x20, 0x40, 0xA0):
            yield f"load offset +1 at {i}", lambda i=i, c=code, t=jt, f=jf, k=k: \
                variant(i, (c, t, f, k + 1))


_NUMBER = re.compile(r"(?<![\w.:/@-])(\d+)(?![\w.:/-])")


def _text(artifact: Artifact) -> Iterator:
    """Rulesets: a number ±1, a verdict swapped, a rule line removed."""
    if artifact.target == "nft":
        name = next(iter(artifact.files))
        text = artifact.text
    else:
        name = artifact.meta["files"]["ipv4"]
        text = artifact.files[name].decode()
    lines = text.splitlines(keepends=True)
    rule_lines = [i for i, line in enumerate(lines) if _is_rule(artifact.target, line)]

    def variant(i: int, new_line: str) -> Artifact:
        changed = "".join(lines[:i] + [new_line] + lines[i + 1:])
        files = dict(artifact.files) | {name: changed.encode()}
        if artifact.target == "nft":
            meta = {k: v for k, v in artifact.meta.items() if k != "prove_listing"}
            return replace(artifact, text=changed, files=files, meta=meta)
        return replace(artifact, files=files)
    swaps = {"nft": (" drop ", " accept "), "iptables": ("-j DROP", "-j RETURN")}
    a, b = swaps[artifact.target]
    for i in rule_lines:
        line = lines[i]
        for m in _NUMBER.finditer(line):
            for d in (1, -1):
                value = int(m.group(1)) + d
                if value >= 0:
                    new = line[:m.start()] + str(value) + line[m.end():]
                    yield f"number {m.group(1)}{d:+d} on line {i + 1}", \
                        lambda i=i, new=new: variant(i, new)
        if a in line or b in line:
            new = line.replace(a, "\0").replace(b, a).replace("\0", b)
            yield f"verdict swapped on line {i + 1}", lambda i=i, new=new: variant(i, new)
        yield f"line {i + 1} removed", lambda i=i: variant(i, "")
    if artifact.target == "nft":
        for i, what, new in _elements(lines):
            yield f"{what} on line {i + 1}", lambda i=i, new=new: variant(i, new)


_JUMP = re.compile(r": (jump|goto) (\S+?),?$")
_RANGE = re.compile(r"(?<![\w:])(\d+(?:\.\d+){3}|\d+)-(\d+(?:\.\d+){3}|\d+)(?![\w:])")


def _elements(lines: list[str]) -> Iterator[tuple[int, str, str]]:
    """Verdict map elements: the chain jumped to swapped for another element's, an
    interval's bound moved by one (ports, IPv4 addresses)."""
    import ipaddress

    found = [(i, m) for i, line in enumerate(lines) if (m := _JUMP.search(line.rstrip()))]
    targets = [m.group(2) for _, m in found]
    for (i, m), other in zip(found, targets[1:] + targets[:1], strict=True):
        if other != m.group(2):
            line = lines[i]
            new = line[:m.start(2)] + other + line[m.end(2):]
            yield i, f"element verdict {m.group(2)} -> {other}", new
    for i, _ in found:
        line = lines[i]
        for r in _RANGE.finditer(line):
            for side in (1, 2):
                text = r.group(side)
                value = int(ipaddress.IPv4Address(text)) if "." in text else int(text)
                for d in (1, -1):
                    moved = value + d
                    if moved < 0 or moved >= (1 << 32 if "." in text else 1 << 16):
                        continue
                    shown = str(ipaddress.IPv4Address(moved)) if "." in text else str(moved)
                    new = line[:r.start(side)] + shown + line[r.end(side):]
                    yield i, f"interval bound {text}{d:+d}", new


def _is_rule(target: str, line: str) -> bool:
    if target == "iptables":
        return line.startswith("-A ") and " -j PFC" not in line
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith(("#", "table", "chain", "type",
                                                       "}", "set", "counter", "elements",
                                                       "flags", "delete", "policy"))


def _ebpf(artifact: Artifact) -> Iterator:
    """ELF objects: instruction fields patched in the program section."""
    from pfc.prove.targets.ebpf import program_span

    name = next(n for n in artifact.files if n.endswith(".o"))
    data = artifact.files[name]
    start, count = program_span(data, artifact.meta["program"])

    def variant(i: int, insn: bytes) -> Artifact:
        at = start + 8 * i
        patched = data[:at] + insn + data[at + 8:]
        return replace(artifact, files=dict(artifact.files) | {name: patched})
    for i in range(count):
        raw = data[start + 8 * i:start + 8 * i + 8]
        op, off, imm = raw[0], int.from_bytes(raw[2:4], "little", signed=True), \
            int.from_bytes(raw[4:8], "little", signed=True)
        cls, code = op & 0x07, op & 0xF0
        if cls in (0x05, 0x06) and code not in (0x00, 0x80, 0x90):
            if code in (0x10, 0x50):
                flipped = bytes([op ^ 0x40]) + raw[1:]  # jeq <-> jne
                yield f"branch swapped at {i}", lambda i=i, r=flipped: variant(i, r)
            yield f"jump target +1 at {i}", lambda i=i, r=raw, o=off: variant(
                i, r[:2] + (o + 1).to_bytes(2, "little", signed=True) + r[4:])
            if not op & 0x08:
                for d in (1, -1):
                    yield f"constant {d:+d} at {i}", lambda i=i, r=raw, v=imm, d=d: variant(
                        i, r[:4] + (v + d).to_bytes(4, "little", signed=True))
        if cls == 0x01 and op & 0xE0 == 0x60:
            yield f"load offset +1 at {i}", lambda i=i, r=raw, o=off: variant(
                i, r[:2] + (o + 1).to_bytes(2, "little", signed=True) + r[4:])

