"""The front-end fuzzing harness, shared by ``tests/frontend/test_fuzz.py`` (hypothesis,
10,000 inputs) and ``benchmarks/fuzz.py`` (the same at scale, in forked workers).

Inputs come from three generators:

- **grammar**: random streams of the grammar's own tokens (``SAMPLES`` holds sample
  lexemes for every terminal of ``grammar/pfc.lark``, checked by a test) and keywords;
- **valid**: the valid-policy generator of ``tests/strategies.py`` plus rules with a
  field given two to four times (the merge of ``pfc.frontend.merge``); and whole
  firewalls (v2: hook blocks, chains, interfaces; ``tests/frontend/firewalls.py``);
- **mutation**: the examples (whole firewalls too) and ``tests/bad/*.pf`` changed by a
  few operations (``MUTATIONS``): bit flips, token insert/delete/swap/duplicate, huge
  numbers (and numbers behind 4,300 leading zeros), long names, NUL/Unicode/control
  characters, lone surrogates (text handed over in-process, as an editor can), CRLF,
  byte-order marks, ``{`` nesting, continuations, line shuffles, truncation. A policy
  with a ``set`` gets a mutated set file too.

Mutations are plain functions of integers (``Op``), so hypothesis draws and shrinks them
and the benchmark replays them from a seed. Inputs stay small (``MAX_INPUT`` bytes):
a blow-up in the front end shows as time, not as size.

``front_end(inp)`` runs ``compile_source`` and ``format_source`` and checks what must
hold for any input (never raise, spans inside the text, at most ``MAX_ERRORS`` + 1
errors, nothing raw for a terminal, fmt idempotent and meaning-preserving on valid
input); ``build_all`` builds a clean policy for every target/format that needs no
kernel; ``kernel_rejections`` loads one into the real checkers.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

from pfc.build import build_artifact, build_ruleset
from pfc.frontend.diagnostics import MAX_ERRORS, render_text, to_json
from pfc.frontend.fmt import format_source
from pfc.frontend.hints import KEYWORDS
from pfc.frontend.pipeline import Compiled, compile_source
from pfc.frontend.source import SourceFile
from tests.frontend.firewalls import firewalls
from tests.paths import BAD, EXAMPLES, FIREWALLS
from tests.strategies import policies, rule_text

MAX_INPUT = 16_384
Op = tuple[str, int, int]  # (mutation, a, b): a and b pick the place and the size

# A sample lexeme (or several) for every terminal of the grammar.
SAMPLES: dict[str, tuple[str, ...]] = {
    "DEFINE": ("define",), "SET": ("set",), "FILE": ("file",), "DEFAULT": ("default",),
    "TO": ("to",), "DROP": ("drop",), "PASS": ("pass",), "ACCEPT": ("accept",),
    "COUNT": ("count",), "REDIRECT": ("redirect",), "ALL": ("all",), "IP": ("ip",),
    "IP6": ("ip6",), "TCP": ("tcp",), "UDP": ("udp",), "ICMP": ("icmp",),
    "ICMP6": ("icmp6",), "FIELD": ("src", "dst", "sport", "dport", "proto", "icmp-type",
                                    "ttl", "len"),
    "FLAGS": ("flags",), "FRAG": ("frag",), "PAYLOAD": ("payload",), "NOT": ("!",),
    "LOG": ("log",), "PREFIX": ("prefix",), "RATE": ("rate",), "SNAP": ("snap",),
    "LIMIT": ("limit",), "BURST": ("burst",), "PER": ("per",), "AUDIT": ("audit",),
    "QUEUE": ("queue",), "NUM": ("num",), "FIRST": ("first",), "BYPASS": ("bypass",),
    "CT": ("ct",), "STATE": ("state",), "SLASH": ("/",),
    # v2 (whole firewalls)
    "INGRESS": ("ingress",), "EGRESS": ("egress",), "RAW": ("raw",), "NAT": ("nat",),
    "PREROUTING": ("prerouting",), "INPUT": ("input",), "FORWARD": ("forward",),
    "OUTPUT": ("output",), "POSTROUTING": ("postrouting",), "CHAIN": ("chain",),
    "INTERFACE": ("interface",), "ADDRESS": ("address",), "GATEWAY": ("gateway",),
    "REJECT": ("reject",), "NOTRACK": ("notrack",), "MARK": ("mark",), "DNAT": ("dnat",),
    "SNAT": ("snat",), "MASQUERADE": ("masquerade",), "JUMP": ("jump",), "GOTO": ("goto",),
    "WITH": ("with",), "STATUS": ("status",), "CLOSE": ("}", "{ }"),
    "V2FIELD": ("iif", "oif", "ether-src", "ether-dst", "ether-type", "vlan-id", "icmp-code",
                "dst-type", "src-type", "mark"),
    "WILDNAME": ("eth*", "br-*", "x*"), "PORTONLY": (":8080", ":$p", ":0x1f", ":99999"),
    "EQEQ": ("==",), "EQUAL": ("=",), "LBRACE": ("{",), "RBRACE": ("}",), "COMMA": (",",),
    "LSQB": ("[",), "RSQB": ("]",), "COLON": (":",), "MINUS": ("-",),
    "IPV4": ("10.0.0.1", "192.168.0.0/16", "0.0.0.0/0", "10.0.0.1/33", "300.1.2.3",
             "10.0.0.0/99999"),
    "IPV6": ("2001:db8::1", "::/0", "fe80::/10", "2001:db8::/129", "1:2:3:4:5:6:7:8:9",
             "::ffff:10.0.0.1", "aa:bb:cc:dd:ee:ff", "aa:bb:cc"),
    "NUMBER": ("0", "53", "65535", "65536", "0x1f", "0xffffffffffffffff", "255", "8"),
    "STRING": ('"X"', '"\\x41"', '"\\x"', '"\\xZZ"', '"\\q"', '"\\\\"', '"abc"', '""'),
    "VARREF": ("$lan", "$web", "$s", "$x"),
    "NAME": ("lan", "syn", "ack", "echo-request", "ssh", "DROP", "allow", "from", "any",
             "gre", "type", "second", "minute", "new", "established", "invalid",
             "tcp-reset", "port-unreachable", "dnat", "local", "eth0", "lo", "arp",
             "untracked", "iifname"),
    "COMMENT": ("# note", "# \x1b[31m"),
    "_NL": ("\n", "\r\n", "\n\n"),
    "CONTINUATION": ("\\\n",),
    "WS": (" ", "\t", "\f"),
}
TOKENS: tuple[str, ...] = tuple(dict.fromkeys(
    [s for samples in SAMPLES.values() for s in samples] + list(KEYWORDS)))
WEIRD = ("\x00", "\x1b", "\x1b[2J", "\ufeff", "\u200b", "\xa0", "\u202e", "\ufffd", "\r",
         "\x0b", "\x0c", "\x85", "\u2028", "\u201c", "\u2013", "é", "\U0001f600", "'", ";",
         "\\", '"', "$", "#", "\x7f")
SET_BASES = (b"10.0.0.1\n10.0.0.0/8\n2001:db8::/32\n", b"53\n80-90\n0x1f\n",
             b"# list\n192.168.0.1 # host\n\n")
MUTATIONS = ("flip", "insert", "delete", "swap", "dup", "number", "name", "char",
             "surrogate", "crlf", "bom", "nest", "continuation", "lines", "truncate")


@dataclass(frozen=True)
class Input:
    """One fuzz input: a file's bytes (decoded as ``SourceFile.read`` would) or text
    handed over in-process (``text``, which may hold lone surrogates); ``set_data``
    the bytes any ``set`` file reads as (None: set files are missing)."""

    name: str
    data: bytes = b""
    text: str | None = None
    set_data: bytes | None = None

    def source(self) -> SourceFile:
        if self.text is not None:
            return SourceFile(self.name, self.text)
        return SourceFile.decode(self.name, self.data)

    def read_set(self, path: Path) -> SourceFile:
        if self.set_data is None:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return SourceFile.decode(str(path), self.set_data)

    def replay(self) -> dict:
        """Everything needed to run it again (JSON)."""
        return {"name": self.name, "data": self.data.decode("latin1"), "text": self.text,
                "set_data": None if self.set_data is None else self.set_data.decode("latin1")}


# --------------------------------------------------------------------------- corpus

def corpus() -> list[tuple[str, bytes]]:
    """The mutation seeds: every example and every ``tests/bad`` policy."""
    return [(p.name, p.read_bytes())
            for p in [*EXAMPLES, *FIREWALLS, *sorted(BAD.glob("*.pf"))]]


def set_bases() -> list[bytes]:
    return [*SET_BASES, *(p.read_bytes() for p in sorted(BAD.glob("*.txt")))]


# ------------------------------------------------------------------------ generators

def token_text(tokens: Sequence[str], glue: Sequence[int] = ()) -> str:
    """Tokens joined by a space, or nothing, or a newline (``glue`` picks, cycling)."""
    out = []
    for i, tok in enumerate(tokens):
        g = glue[i % len(glue)] if glue else 0
        out.append(tok + ("", " ", " ", "\n")[g % 4])
    return "".join(out)


def mutate(data: bytes, ops: Sequence[Op]) -> tuple[bytes, str | None]:
    """Apply ``ops`` in order; returns the bytes, or (after ``surrogate``) text."""
    text: str | None = None
    for kind, a, b in ops:
        if kind == "surrogate":
            base = text if text is not None else data.decode("utf-8", "replace")
            at = a % (len(base) + 1)
            text = base[:at] + chr(0xD800 + b % 0x800) + base[at:]
            continue
        if text is not None:  # back to bytes: a surrogate becomes `?`
            data, text = text.encode("utf-8", "replace"), None
        data = _MUTATORS[kind](data, a, b)[:MAX_INPUT]
    return data, text


_TOKEN = re.compile(rb"\s+|[A-Za-z0-9_$.:/-]+|.", re.S)


def _tokens(data: bytes) -> list[bytes]:
    return _TOKEN.findall(data) or [b""]


def _flip(data: bytes, a: int, b: int) -> bytes:
    if not data:
        return bytes([b % 256])
    i = a % len(data)
    return data[:i] + bytes([data[i] ^ (1 << (b % 8))]) + data[i + 1:]


def _insert(data: bytes, a: int, b: int) -> bytes:
    toks = _tokens(data)
    i = a % (len(toks) + 1)
    return b"".join([*toks[:i], b" ", TOKENS[b % len(TOKENS)].encode(), b" ", *toks[i:]])


def _delete(data: bytes, a: int, b: int) -> bytes:
    toks = _tokens(data)
    i = a % len(toks)
    return b"".join(toks[:i] + toks[i + 1 + b % 3:])


def _swap(data: bytes, a: int, b: int) -> bytes:
    toks = _tokens(data)
    i, j = a % len(toks), b % len(toks)
    toks[i], toks[j] = toks[j], toks[i]
    return b"".join(toks)


def _dup(data: bytes, a: int, b: int) -> bytes:
    toks = _tokens(data)
    i = a % len(toks)
    return b"".join(toks[:i + 1] + toks[i:i + 1 + b % 4] + toks[i + 1:])


def _number(data: bytes, a: int, b: int) -> bytes:
    huge = (b"9" * (4290 + b % 20), b"0x" + b"f" * (b % 4000 + 1), b"1" * (b % 80 + 1),
            b"0" * (b % 100) + b"53", b"0" * (4290 + b % 20) + b"1")[a % 5]  # F1: zeros
    numbers = [m for m in re.finditer(rb"(?<![\w.:])(0x[0-9a-fA-F]+|[0-9]+)(?![\w.:])", data)]
    if not numbers:
        return data + b" " + huge
    m = numbers[b % len(numbers)]
    return data[:m.start()] + huge + data[m.end():]


def _name(data: bytes, a: int, b: int) -> bytes:
    name = (b"$" if a % 2 else b"") + b"n" + b"a" * (30 + b % 5000)
    return _insert_at(data, a // 2, name)


def _char(data: bytes, a: int, b: int) -> bytes:
    return _insert_at(data, a, WEIRD[b % len(WEIRD)].encode())


def _insert_at(data: bytes, a: int, what: bytes) -> bytes:
    i = a % (len(data) + 1)
    return data[:i] + what + data[i:]


def _crlf(data: bytes, a: int, b: int) -> bytes:
    return data.replace(b"\n", b"\r\n") if a % 2 else _insert_at(data, b, b"\r")


def _bom(data: bytes, a: int, b: int) -> bytes:
    return b"\xef\xbb\xbf" + data if a % 2 else _insert_at(data, b, b"\xef\xbb\xbf")


def _nest(data: bytes, a: int, b: int) -> bytes:
    depth = 1 + b % 2000
    inner = b"{ " * depth + b"1" + b" }" * (depth - a % 2)
    return _insert_at(data, a, b" " + inner + b" ")


def _continuation(data: bytes, a: int, b: int) -> bytes:
    return _insert_at(data, a, b" \\\n" * (1 + b % 50))


def _lines(data: bytes, a: int, b: int) -> bytes:
    lines = data.split(b"\n")
    i, j = a % len(lines), b % len(lines)
    if a % 3 == 0:
        lines[i], lines[j] = lines[j], lines[i]
    elif a % 3 == 1:
        lines.insert(j, lines[i])
    else:
        del lines[i]
    return b"\n".join(lines)


def _truncate(data: bytes, a: int, b: int) -> bytes:
    return data[:a % (len(data) + 1)]


_MUTATORS: dict[str, Callable[[bytes, int, int], bytes]] = {
    "flip": _flip, "insert": _insert, "delete": _delete, "swap": _swap, "dup": _dup,
    "number": _number, "name": _name, "char": _char, "crlf": _crlf, "bom": _bom,
    "nest": _nest, "continuation": _continuation, "lines": _lines, "truncate": _truncate}


def mutated(seed: tuple[str, bytes], ops: Sequence[Op], set_ops: Sequence[Op] = (),
            set_base: bytes | None = None) -> Input:
    data, text = mutate(seed[1], ops)
    set_data = None if set_base is None else mutate(set_base, set_ops)[0]
    return Input(seed[0], data, text, set_data)


# ------------------------------------------------------------ hypothesis strategies

def ops(max_size: int = 4) -> st.SearchStrategy[list[Op]]:
    one = st.tuples(st.sampled_from(MUTATIONS), st.integers(0, 1 << 16), st.integers(0, 1 << 16))
    return st.lists(one, min_size=1, max_size=max_size)


def token_inputs() -> st.SearchStrategy[Input]:
    tokens = st.lists(st.sampled_from(TOKENS), max_size=60)
    glue = st.lists(st.integers(0, 3), max_size=8)
    return st.builds(lambda t, g: Input("tokens.pf", token_text(t, g).encode()), tokens, glue)


def mutated_inputs() -> st.SearchStrategy[Input]:
    seeds = corpus()
    no_set = st.none()
    set_part = st.tuples(st.sampled_from(set_bases()), ops(2))
    return st.builds(
        lambda seed, o, s: mutated(seed, o, s[1] if s else (), s[0] if s else None),
        st.sampled_from(seeds), ops(), st.one_of(no_set, set_part))


V4 = ("10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.3", "10.200.0.0/13", "0.0.0.0/0",
      "10.0.0.0/7", "192.168.0.0/16", "192.168.1.128/25", "11.0.0.0/8")
V6 = ("2001:db8::/32", "2001:db8:1::/48", "2001:db8:1::5", "::/0", "fe80::/10")
PORTS = ("53", "0", "65535", "1-1000", "500-2000", "80-90", "0-100", "50-65535", "1024-65535")
FLAGS = ("syn", "ack", "syn,ack", "syn,!ack", "!ack", "rst", "fin,!syn", "!syn,!fin")
_DUP_POOLS = {
    "addr4": V4, "addr6": V6, "addr46": V4 + V6, "port": PORTS,
    "ttl": ("1", "64", "1-10", "5-255", "0-4"),
    "icmp": ("8", "0", "3-5", "echo-request", "0-10"),
    "proto": ("6", "17", "tcp", "0-10", "1-255"), "flags": FLAGS, "frag": ("",)}


def _values(pool: Sequence[str]) -> st.SearchStrategy[str]:
    many = st.lists(st.sampled_from(pool), min_size=1, max_size=3, unique=True)
    return st.one_of(st.sampled_from(pool), many.map(lambda xs: "{ " + ", ".join(xs) + " }"))


@st.composite
def dup_rule(draw, valid: bool = False) -> str:
    """A rule with one field given 2-4 times, each maybe negated. ``valid``: only
    what checks clean (one family per address rule, flags that one match can say)."""
    kinds = sorted(set(_DUP_POOLS) - ({"addr46", "flags", "frag"} if valid else set()))
    kind = draw(st.sampled_from(kinds))
    proto = {"port": draw(st.sampled_from(["tcp", "udp"])), "flags": "tcp", "icmp": "icmp",
             "addr6": "ip6", "frag": "ip", "proto": draw(st.sampled_from(["", "ip"]))
             }.get(kind, draw(st.sampled_from(["", "tcp", "udp"])))
    field = {"addr4": draw(st.sampled_from(["src", "dst"])), "addr6": "dst",
             "addr46": "src", "port": draw(st.sampled_from(["sport", "dport"])),
             "icmp": "icmp-type"}.get(kind, kind)
    matches = []
    for _ in range(draw(st.integers(2, 4))):
        neg = draw(st.sampled_from(["", "", "!"]))
        value = "" if kind == "frag" else " " + draw(
            st.sampled_from(FLAGS) if kind == "flags" else _values(_DUP_POOLS[kind]))
        matches.append(f"{neg}{field}{value}")
    action = draw(st.sampled_from(["drop", "pass", "count"]))
    extra = draw(st.sampled_from(["", "", "ttl 1-200", "!len 0-40"]))
    return " ".join(w for w in (action, proto, *draw(st.permutations(matches)), extra) if w)


def valid_files() -> st.SearchStrategy[str]:
    """Valid policies (one rule list) and valid whole firewalls."""
    return st.one_of(valid_policies(), firewalls())


def valid_policies(**features) -> st.SearchStrategy[str]:
    """Valid policies, some with a field given more than once."""
    count = features.get("count", True)
    rules = st.lists(st.one_of(rule_text(**features), dup_rule(valid=True).filter(
        lambda r: count or not r.startswith("count"))), min_size=1, max_size=5)
    return st.one_of(policies(**features), rules.map(lambda rs: "\n".join(rs) + "\n"))


# ------------------------------------------------------------------------ front end

def front_end(inp: Input) -> Compiled:
    """Compile and format one input; AssertionError if an invariant breaks (anything
    else raised is a crash)."""
    source = inp.source()
    compiled = compile_source(source, read_set=inp.read_set)
    _check_diagnostics(compiled, source)
    formatted, diags = format_source(source)
    for d in diags:
        render_text(d, {source.name: source})
    if formatted is not None:
        again, _ = format_source(SourceFile(source.name, formatted))
        assert again == formatted, "fmt is not idempotent"
        if compiled.ok:
            refmt = compile_source(SourceFile(source.name, formatted), read_set=inp.read_set)
            assert refmt.ok, "fmt broke a valid policy"
            assert meaning(refmt) == meaning(compiled), "fmt changed the meaning"
    return compiled


def _check_diagnostics(compiled: Compiled, source: SourceFile) -> None:
    errors = sum(d.severity == "error" for d in compiled.diagnostics)
    assert errors <= MAX_ERRORS + 1, errors
    for d in compiled.diagnostics:
        if d.span.file == source.name:
            assert 0 <= d.span.start <= d.span.end <= len(source.text) + 1, d
        shown = render_text(d, compiled.sources)
        assert not any(c < " " and c != "\n" or c == "\x7f" for c in shown), repr(shown)
        json.dumps(to_json(d, compiled.sources))


def meaning(compiled: Compiled) -> object:
    """The IR without spans and lines: what the policy means."""
    from pfc.backends.irjson import to_jsonable

    if compiled.ruleset is not None:
        return _strip(to_jsonable(compiled.ruleset))
    return _strip(to_jsonable(compiled.require()))


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items()
                if k not in ("span", "default_span", "line", "source")}
    if isinstance(obj, list):
        return [_strip(x) for x in obj]
    return obj


# -------------------------------------------------------------------------- backends

TARGETS: tuple[tuple[str, str | None, dict], ...] = (
    ("cbpf", "asm", {}), ("nft", "nft", {"dev": "eth0"}), ("nft", "json", {"dev": "eth0"}),
    ("iptables", None, {}), ("ir", None, {}), ("socket", "c", {}), ("tc", "c", {}),
    ("xdp", "c", {}))


def build_all(compiled: Compiled) -> dict[str, str | None]:
    """Build a clean policy for every target/format above (no clang): target → None
    when built, else why it was refused (the first diagnostic, line numbers left out).
    Anything raised is a backend crash."""
    out = {}
    for target, fmt, options in TARGETS:
        if compiled.ruleset is not None:  # a whole firewall: the blocks the target carries
            made, diags = build_ruleset(compiled.ruleset, [target], fmt, **options)
            artifact = made[0] if made else None
            assert bool(made) != bool(diags), (target, diags)
        else:
            artifact, diags = build_artifact(compiled, target, fmt, **options)
        assert (artifact is None) == bool(diags), (target, diags)
        reason = re.sub(r" \(rule at line \d+\)", "", diags[0].message) if diags else None
        out[f"{target}/{fmt or 'default'}"] = reason
    return out


# ---------------------------------------------------------------------------- kernel

def kernel_rejections(compiled: Compiled, dev: str) -> list[str]:
    """Load a clean policy into the real checkers, in the current (lab) namespace:
    clang and the verifier for xdp, ``nft -c -f`` (text and JSON), ``ipset restore``
    and ``iptables-restore --test`` per family, ``SO_ATTACH_FILTER`` for cbpf. Returns
    the rejections (empty: every target that can express the policy accepted it). A
    whole firewall gives none yet: its multi-block artifacts come with the backends
    that carry its blocks."""
    out: list[str] = []
    if compiled.ruleset is not None:
        return out
    for name, check in (("xdp", _xdp), ("nft", _nft), ("iptables", _iptables),
                        ("cbpf", _cbpf)):
        try:
            check(compiled, dev)
        except _Refused:
            continue
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            out.append(f"{name}: {exc}")
    return out


class _Refused(Exception):
    """The target cannot express the policy (a diagnostic, not a rejection)."""


def _built(compiled: Compiled, target: str, fmt: str | None = None, **options):
    artifact, diags = build_artifact(compiled, target, fmt, **options)
    if artifact is None:
        if any(d.message.startswith("internal error") for d in diags):
            raise RuntimeError(diags[0].message)
        raise _Refused()
    return artifact


def _xdp(compiled: Compiled, dev: str) -> None:
    from pfc.kernel import bpf

    artifact = _built(compiled, "xdp", "o")
    obj = next(data for name, data in artifact.files.items() if name.endswith(".o"))
    with bpf.Object(obj, "pfc_fuzz"):
        pass


def _run(argv: list[str], text: str) -> None:
    result = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=60)
    if result.returncode:
        raise RuntimeError(f"`{' '.join(argv)}`: {result.stderr.strip()[-500:]}")


def _nft(compiled: Compiled, dev: str) -> None:
    for fmt, flag in (("nft", []), ("json", ["-j"])):
        artifact = _built(compiled, "nft", fmt, dev=dev)
        _run(["nft", "-c", *flag, "-f", "-"], next(iter(artifact.files.values())).decode())


def _iptables(compiled: Compiled, dev: str) -> None:
    artifact = _built(compiled, "iptables")
    meta, files = artifact.meta, artifact.files
    tool = {4: f"iptables-{meta['flavour']}-restore", 6: f"ip6tables-{meta['flavour']}-restore"}
    try:
        if meta["files"]["ipset"]:
            _run(["ipset", "restore"], files[meta["files"]["ipset"]].decode())
        for family, init, main in ((4, "init4", "ipv4"), (6, "init6", "ipv6")):
            _run([tool[family], "--noflush"], files[meta["files"][init]].decode())
            _run([tool[family], "--test", "--noflush"], files[meta["files"][main]].decode())
    finally:
        for family in (4, 6):  # a restore without --noflush empties these tables
            _run([tool[family]], "*raw\nCOMMIT\n*filter\nCOMMIT\n")
        _run(["ipset", "destroy"], "")


def _cbpf(compiled: Compiled, dev: str) -> None:
    from pfc.backends.cbpf.run import make_room
    from pfc.kernel import netns

    program = _built(compiled, "cbpf", "asm").meta["insns"]
    make_room(program)
    sock = netns.packet_socket(dev)
    try:
        netns.attach_cbpf(sock, program)
    finally:
        sock.close()


def random_ops(rng: random.Random, n: int) -> list[Op]:
    """``n`` mutation operations from a seeded generator (the benchmark's draw)."""
    return [(rng.choice(MUTATIONS), rng.randrange(1 << 16), rng.randrange(1 << 16))
            for _ in range(n)]
