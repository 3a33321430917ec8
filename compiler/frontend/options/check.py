"""AST options → IR: ``log``'s ``prefix``/``rate``/``snap``, a drop rule's ``limit`` and
``audit``, and ``ct state`` matches. Every mistake is a diagnostic on its text.

The ``log`` prefix is checked here, before it can reach any template: 1 to
``LOG_PREFIX_MAX`` characters of ``PREFIX_CHARS`` (an allow-list). pfc puts
``pfc L<line> <verdict> `` (at most 18 characters) before it, so the whole text fits
NFLOG's 64-byte prefix (63 characters and a NUL; nft's ``log prefix`` takes 127).
"""

from __future__ import annotations

import re

from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error, suggest
from pfc.frontend.options.queue import FIRST_MAX, QUEUE_NUM_MAX
from pfc.frontend.source import Span
from pfc.frontend.syntax import MatchNode, OptionNode, RateNode, RuleNode, Value
from pfc.frontend.text import shorten
from pfc.frontend.values import decode_string, read_number

PREFIX_CHARS = "letters, digits, space and `_ . , : = / + -`"
_PREFIX = re.compile(r"[A-Za-z0-9 _.,:=/+-]+")
UNITS = ("second", "minute")
# A log rate stays within `-m limit`'s 10,000/second (a log that cannot flood); a
# limit within hashlimit's 1,000,000/second (xt_hashlimit revision 2+).
LOG_RATE_MAX, LIMIT_RATE_MAX = 10_000, 1_000_000
BURST_MAX = 10_000
_LOG_ONLY = ("prefix", "rate", "snap")
_QUEUE_ONLY = ("num", "first", "bypass")
_DROP_ONLY = {"limit": "it matches only the packets over the rate, and drops them",
              "audit": "it turns a drop into a would-be drop"}


def check_options(node: RuleNode, diags: list[Diagnostic]) -> tuple[dict, ir.Limit | None]:
    """The options of a rule: keyword arguments for ``ir.Log`` (``log`` rules) or
    ``ir.Queue`` (``queue`` rules), ``{"audit": True}`` (drop rules), and the limit.
    Errors go to ``diags``."""
    seen: dict[str, OptionNode] = {}
    log: dict = {}
    limit = None
    for opt in node.options:
        if opt.kind in seen:
            diags.append(error(f"`{opt.kind}` is given twice", opt.keyword_span,
                               code="option-twice"))
            continue
        seen[opt.kind] = opt
        if not _allowed(opt, node.action, diags):
            continue
        if opt.kind == "prefix":
            prefix = _prefix(opt.value, diags)
            if prefix is not None:
                log["prefix"] = prefix
        elif opt.kind == "snap":
            snap = _bounded(opt.value, 0, ir.LOG_SNAP_MAX, "`snap`", diags)
            if snap is not None:
                log["snap"] = snap
        elif opt.kind == "rate":
            log["rate"] = _rate(opt.rate, None, LOG_RATE_MAX, diags)
        elif opt.kind == "limit":
            limit = _limit(opt, diags)
        elif opt.kind in _QUEUE_ONLY:
            _queue_option(opt, log, diags)
        else:
            log["audit"] = True
    if node.action == "queue":
        _queue_protocol(node, diags)
    return log, limit


def _queue_option(opt: OptionNode, out: dict, diags: list[Diagnostic]) -> None:
    """``num N`` (the NFQUEUE queue number), ``first K`` (packets of a flow the decider
    sees), ``bypass`` (fail open) into ``out``, the keyword arguments of ``ir.Queue``."""
    if opt.kind == "bypass":
        out["bypass"] = True
        return
    top = QUEUE_NUM_MAX if opt.kind == "num" else FIRST_MAX
    n = _bounded(opt.value, 0 if opt.kind == "num" else 1, top, f"`{opt.kind}`", diags)
    if n is not None:
        out[opt.kind] = n


def _queue_protocol(node: RuleNode, diags: list[Diagnostic]) -> None:
    """A queued flow is a TCP or UDP connection (its 5-tuple keys the verdict)."""
    if node.protocol not in ("tcp", "udp"):
        diags.append(error("`queue` needs `tcp` or `udp` in the rule: a flow's verdict is "
                           "kept per connection (addresses, protocol and ports)",
                           node.protocol_span or node.action_span, code="needs-protocol",
                           hint="write e.g. `queue tcp dport 80 first 8`"))


def _allowed(opt: OptionNode, action: str, diags: list[Diagnostic]) -> bool:
    if opt.kind in _LOG_ONLY and action != "log":
        diags.append(error(f"`{opt.kind}` belongs to `log`, not `{action}`",
                           opt.keyword_span, code="stray-option",
                           hint="log first, then decide: `log MATCHES prefix \"...\"` on "
                           "the line before this rule"))
        return False
    if opt.kind in _QUEUE_ONLY and action != "queue":
        diags.append(error(f"`{opt.kind}` belongs to `queue`, not `{action}`",
                           opt.keyword_span, code="stray-option",
                           hint="`queue tcp MATCHES num N first K bypass`: hand the "
                           "packet to the decider on queue N (docs/queue.md)"))
        return False
    if opt.kind in _DROP_ONLY and action != "drop":
        diags.append(error(f"`{opt.kind}` belongs to a `drop` rule, not `{action}`",
                           opt.keyword_span, code="stray-option",
                           hint=f"`drop MATCHES {opt.kind} ...`: {_DROP_ONLY[opt.kind]}"))
        return False
    return True


def _prefix(value: Value, diags: list[Diagnostic]) -> str | None:
    data = decode_string(value, diags)
    if data is None:
        return None
    text = data.decode("utf-8", "replace")
    if not text or len(text) > ir.LOG_PREFIX_MAX:
        diags.append(error(f"a log prefix is 1 to {ir.LOG_PREFIX_MAX} characters; this one "
                           f"is {len(text)}", value.span, code="bad-prefix",
                           hint="NFLOG carries at most 63 characters, and pfc adds "
                           "`pfc L<line> <verdict> ` before the prefix"))
        return None
    bad = next((c for c in text if not _PREFIX.fullmatch(c)), None)
    if bad is not None:
        diags.append(error(f"a log prefix may hold only {PREFIX_CHARS}; not "
                           f"`{shorten(bad.encode('unicode_escape').decode())}`",
                           value.span, code="bad-prefix"))
        return None
    if text != text.strip(" "):
        diags.append(_spaces(text, value))
        return None
    return text


def _spaces(text: str, value: Value) -> Diagnostic:
    """A prefix that starts or ends with a space (or is only spaces): NFLOG's reader and
    nft trim them, so the event would not carry what the policy says. The caret is
    under the spaces when they are written as spaces (not as ``\x20``)."""
    body = value.text[1:-1]
    start, end = value.span.start + 1, value.span.end - 1
    if not text.strip(" "):
        what, span = "only spaces", value.span
    elif text.startswith(" "):
        what = "starts with a space"
        lead = len(body) - len(body.lstrip(" "))
        span = Span(value.span.file, start, start + lead) if lead else value.span
    else:
        what = "ends with a space"
        trail = len(body) - len(body.rstrip(" "))
        span = Span(value.span.file, end - trail, end) if trail else value.span
    fixed = text.strip(" ")
    return error(f"a log prefix cannot be {what}" if what == "only spaces" else
                 f"a log prefix cannot start or end with a space; this one {what}", span,
                 hint=f'write `prefix "{fixed}"`' if fixed else "leave `prefix` out, or "
                 "give it a word", code="bad-prefix")


def _bounded(value: Value, lo: int, hi: int, what: str,
             diags: list[Diagnostic]) -> int | None:
    n = read_number(value.text, value.span, diags)
    if n is None:
        return None
    if not lo <= n <= hi:
        diags.append(error(f"{what} is {lo} to {hi}; not {shorten(value.text)}", value.span,
                           code="out-of-range"))
        return None
    return n


def _rate(node: RateNode, burst: Value | None, top: int,
          diags: list[Diagnostic]) -> ir.Rate | None:
    count = _bounded(node.count, 1, top, "a rate", diags)
    unit = node.unit.text
    if unit not in UNITS:
        hint = suggest(unit, UNITS)
        diags.append(error(f"a rate is per `second` or `minute`; not `{shorten(unit)}`",
                           node.unit.span, code="bad-unit", hint=hint))
        return None
    size = 5 if burst is None else _bounded(burst, 1, BURST_MAX, "`burst`", diags)
    if count is None or size is None:
        return None
    return ir.Rate(count, unit, size)


def _limit(opt: OptionNode, diags: list[Diagnostic]) -> ir.Limit | None:
    rate = _rate(opt.rate, opt.burst, LIMIT_RATE_MAX, diags)
    per = None
    if opt.per is not None:
        per = opt.per.text
        if per not in ("src", "dst"):
            diags.append(error(f"`per` takes `src` or `dst`; not `{per}`", opt.per.span,
                               code="bad-per"))
            return None
    return None if rate is None else ir.Limit(rate, per, opt.span)


def ct_match(node: MatchNode, diags: list[Diagnostic]) -> ir.CtMatch | None:
    """``ct state S,...`` → CtMatch with the states in ``CT_STATES`` order."""
    states: set[str] = set()
    ok = True
    for item in node.value.items:
        name = item.text if item.kind == "name" else None
        if name not in ir.CT_STATES:
            hint = suggest(item.text, ir.CT_STATES) if name else None
            diags.append(error(f"`{shorten(item.text)}` is not a connection state; states: "
                               + ", ".join(sorted(ir.CT_STATES)), item.span,
                               hint=hint, code="bad-ct-state"))
            ok = False
            continue
        states.add(name)
    if not ok:
        return None
    return ir.CtMatch(tuple(s for s in ir.CT_STATES if s in states), node.negated, node.span)
