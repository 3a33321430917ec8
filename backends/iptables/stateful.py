"""iptables arguments for ``log``, ``limit``, ``audit`` and ``ct state`` (docs/language.md
"Logging, limits, audit and connection state"; docs/iptables.md has the measurements).

- ``ct state`` is ``-m conntrack [!] --ctstate NEW,...``; only at ``filter-input``:
  raw PREROUTING runs before conntrack (every packet would be untracked), so
  :func:`hook_errors` refuses it there, naming the hook;
- buckets are ``-m hashlimit`` (``--hashlimit-above`` for a drop rule's ``limit``,
  ``--hashlimit-upto`` for a ``log`` rule's rate) with ``--hashlimit-burst B`` (a
  bucket of B packets, as nft's; measured alike) and a
  ``--hashlimit-name`` of its own per rule and family: one policy rule printed as
  several iptables lines (u32 alternatives) shares one bucket, as in the interpreter;
  ``per src|dst`` is ``--hashlimit-mode srcip|dstip``; entries expire after the time an
  empty bucket takes to fill up (an expired entry comes back full, as it would be);
- ``log`` is ``-j NFLOG --nflog-group 20 --nflog-prefix "pfc L<line> <verdict> <prefix>"
  --nflog-size SNAP`` (NFLOG is not terminal: the chain goes on);
- an audited drop is two lines with the same matches: ``-j NFLOG ...`` (its counters
  are not the rule's: owner ``"log"``) and the pass (``-j RETURN``) that counts it.
  A ``limit`` on an audited drop would take two tokens per packet (one per line), so
  that combination is refused (:func:`limits`).
"""

from __future__ import annotations

import math
import re
import zlib

from pfc.backends.iptables import queue
from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error
from pfc.oracle.events import nflog_prefix

LOG_GROUP = 20  # NFLOG group of pfc's events (`pfc log` listens on it)
LOG_OWNER = "log"  # the owner of a line whose counters belong to no rule
AFTER_CONNTRACK = ("filter-input",)
_SAFE_PREFIX = re.compile(r"[A-Za-z0-9 _.,:=/+-]{1,63}")


def ct_args(m: ir.CtMatch) -> tuple[str, ...]:
    neg = ("!",) if m.negated else ()
    return ("-m", "conntrack", *neg, "--ctstate", ",".join(s.upper() for s in m.states))


def _name(table: str, rule: ir.Rule, family: int, what: str) -> str:
    """A hashlimit table name (at most 15 characters), one per rule, family and
    configuration: a reload with another rate must not reuse the old table (the
    kernel keeps a table by name while a rule uses it, with its first configuration)."""
    limit = (rule.limit.rate, rule.limit.per) if rule.limit else None
    key = f"{table}/{rule.index}/{family}/{what}/{limit}/{getattr(rule.action, 'rate', '')}"
    return f"pfc{zlib.crc32(key.encode()):08x}"


def _hashlimit(rate: ir.Rate, over: bool, name: str, per: str | None) -> list[str]:
    unit = "second" if rate.unit == "second" else "minute"
    expire = (math.ceil(rate.capacity * rate.seconds / rate.count) + 1) * 1000
    args = ["-m", "hashlimit", "--hashlimit-above" if over else "--hashlimit-upto",
            f"{rate.count}/{unit}", "--hashlimit-burst", str(rate.capacity)]
    if per is not None:
        args += ["--hashlimit-mode", "srcip" if per == "src" else "dstip"]
    return args + ["--hashlimit-name", name, "--hashlimit-htable-expire", str(expire)]


def nflog(line: int, verdict: str, audit: bool, prefix: str, snap: int) -> str:
    text = nflog_prefix(line, verdict, audit, prefix)
    if not _SAFE_PREFIX.fullmatch(text):  # the checker's allow-list, checked again
        raise ValueError(f"unsafe log prefix {text!r}")
    return (f'-j NFLOG --nflog-group {LOG_GROUP} --nflog-prefix "{text}" '
            f"--nflog-size {snap}")


def rule_lines(rule: ir.Rule, family: int, argvs: list[list[str]], tail: str | None,
               table: str, default: ir.Verdict) -> list[tuple[str, int | str]]:
    """The iptables lines of one rule in one family, each with its counters' owner."""
    action = rule.action
    extra: list[str] = []
    if rule.limit is not None:  # `pass ... limit` holds within the rate, others over it
        extra = _hashlimit(rule.limit.rate, not isinstance(action, ir.Pass),
                           _name(table, rule, family, "limit"), rule.limit.per)
    if isinstance(action, ir.Log):
        if action.rate is not None:
            extra = _hashlimit(action.rate, False, _name(table, rule, family, "log"), None)
        log = nflog(rule.line, default.value, False, action.prefix, action.snap)
        return [(" ".join(argv + extra + [log]), rule.index) for argv in argvs]
    out: list[tuple[str, int | str]] = []
    for argv in argvs:
        words = argv + extra
        if isinstance(action, ir.Queue):
            out += [(line, rule.index) for line in queue.lines(rule, words)]
            continue
        if isinstance(action, ir.Drop) and action.audit:
            out.append((" ".join(words + [audit_log(rule.line)]), LOG_OWNER))
        out.append((" ".join(words + ([tail] if tail else [])), rule.index))
    return out


def audit_log(line: int) -> str:
    return nflog(line, "drop", True, "", ir.LOG_SNAP_DEFAULT)


def hook_errors(policy: ir.Policy, hook: str) -> list[Diagnostic]:
    """``ct state`` (and ``queue ... first K``) at a hook before conntrack: an error on
    each such rule."""
    if hook in AFTER_CONNTRACK:
        return []
    ct = [error(f"target `iptables` cannot express `ct state` at hook `{hook}` (rule at "
                f"line {r.line}): raw PREROUTING runs before conntrack, where every "
                "packet is untracked", r.span,
                hint="compile with `--hook filter-input` (after conntrack)",
                code="unsupported")
          for r in _once(policy) if any(isinstance(m, ir.CtMatch) for m in r.matches)]
    return queue.hook_errors(policy, hook) + ct


def _once(policy: ir.Policy) -> list[ir.Rule]:
    """Each rule once (``split_families`` made two of some, with one index)."""
    return list({r.index: r for r in policy.rules}.values())


def limits(policy: ir.Policy) -> list[Diagnostic]:
    """``limit`` with ``audit`` on one rule: refused (module doc)."""
    return [error(f"target `iptables` cannot express `limit` with `audit` (rule at line "
                  f"{r.line}): its two lines would take two tokens per packet", r.span,
                  hint="targets that can: nft", code="unsupported")
            for r in _once(policy)
            if r.limit is not None and isinstance(r.action, ir.Drop) and r.action.audit]
