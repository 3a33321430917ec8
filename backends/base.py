"""What every backend is: a name, what it supports, and ``emit(policy, options)``.

Backends print; they don't decide. A change of meaning is an IR→IR pass run before
``emit`` (``Backend.passes``). What a target cannot express is reported by
:func:`capability_errors` as an error on the user's rule, naming the target and the
targets that can; a backend never drops a rule silently. That covers sizes too: a
backend whose emitter refuses a policy for its size (iptables' alternatives per rule)
says so in its ``limits`` hook, so ``pfc check --target T`` refuses what ``pfc compile``
would.

User strings reach emitted text only through :func:`printable` (``#`` comment lines of
nft, iptables-restore and ipset restore files) and :func:`c_comment` (inside ``/* */``);
names go through :func:`check_name` / :func:`check_dev` (allow-lists).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pfc.frontend import ir
from pfc.frontend.diagnostics import Diagnostic, error
from pfc.kernel.observation import Observation

if TYPE_CHECKING:
    from pfc.frontend.firewall.ruleset import Ruleset

# Features a rule can need. A backend's SUPPORTS lists those it can express.
FEATURES = {
    "count": "`count` rules",
    "redirect": "`redirect` rules",
    "payload": "`payload` matches",
    "ipv6": "IPv6 rules",
    "non-ip": "rules that match non-IP frames",
    "log": "`log` rules",
    "limit": "`limit` on a drop rule",
    "audit": "audit mode (`drop ... audit`, `--audit`)",
    "ct": "`ct state` matches",
    "queue": "`queue` rules (user-space verdicts)",
    # whole firewalls (v2): a target lists those it prints; the others refuse the rule
    "reject": "`reject` rules",
    "nat": "`dnat`, `snat`, `masquerade` and nat `redirect` rules",
    "set-mark": "`mark ... to N` rules",
    "notrack": "`notrack` rules",
    "pass-limit": "`limit` on a pass rule",
    "iface": "`iif`/`oif` matches",
    "iif-post": "`iif` in `postrouting` and `nat postrouting`",
    "ether": "`ether-src`/`ether-dst` matches",
    "ether-type": "`ether-type` matches",
    "vlan-id": "`vlan-id` matches",
    "icmp-code": "`icmp-code` matches",
    "addr-type": "`dst-type`/`src-type` matches",
    "mark": "`mark` matches",
    "ct-mark": "`ct mark` matches",
    "ct-status": "`ct status` matches",
}
V2_FEATURES = frozenset(("reject", "nat", "set-mark", "notrack", "pass-limit", "iface",
                         "iif-post",
                         "ether", "ether-type", "vlan-id", "icmp-code", "addr-type", "mark",
                         "ct-mark", "ct-status"))
POSTROUTING_BLOCKS = ("postrouting", "nat postrouting")  # where "iif-post" is asked for
# The feature each v2 match needs (by field).
FIELD_FEATURES = {"iif": "iface", "oif": "iface", "ether-src": "ether",
                   "ether-dst": "ether", "ether-type": "ether-type", "vlan-id": "vlan-id",
                   "icmp-code": "icmp-code", "dst-type": "addr-type", "src-type": "addr-type",
                   "mark": "mark", "ct-mark": "ct-mark", "ct-status": "ct-status"}
_ACTION_FEATURES = {ir.Reject: "reject", ir.Nat: "nat", ir.Mark: "set-mark",
                    ir.Notrack: "notrack"}


@dataclass(frozen=True)
class Options:
    """What ``pfc compile`` passes to a backend. Unknown keys live in ``extra``."""

    target: str
    format: str | None = None
    hook: str | None = None
    dev: str | None = None
    table: str = "pfc"
    notrack: bool = False
    audit: bool = False  # applied before the backend runs (``pfc.passes.audit``)
    extra: dict = field(default_factory=dict)


@dataclass
class Artifact:
    """A compiled policy. ``text`` is the printable form in ``format``; ``files`` is what
    ``-o`` writes (the first entry is the main one); ``meta`` holds what loaders and
    runners need (program names, map names, counter names per rule index ...)."""

    target: str
    hook: str
    format: str
    text: str | None
    files: dict[str, bytes]
    policy: ir.Policy
    meta: dict = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)  # the front end's warnings


# The key of the default verdict's (packets, bytes) in a runner's ``Observation.counters``,
# beside the rule indexes: every runner reports every rule and the default.
DEFAULT_COUNTER = "default"

Counters = dict[int | str, tuple[int, int]]


def counters_since(after: Counters, before: Counters) -> Counters:
    """(packets, bytes) per key counted between two readings of the same counters."""
    return {k: (p - before.get(k, (0, 0))[0], b - before.get(k, (0, 0))[1])
            for k, (p, b) in after.items()}


Pass = Callable[[ir.Policy], ir.Policy]
Limits = Callable[[ir.Policy], list[Diagnostic]]


Runner = Callable[[Artifact, list[bytes]], Observation]
View = Callable[[str, bytes], "bytes | None"]


def raw_view(hook: str, frame: bytes) -> bytes | None:
    """Hooks that see the frame as it is on the wire (XDP)."""
    return frame


_UNSAFE_STEM = re.compile(r"[^A-Za-z0-9_.+-]")


def artifact_name(policy: ir.Policy, target: str, ext: str) -> str:
    """``STEM.TARGET.EXT`` where STEM is the policy file's name without ``.pf``, every
    character outside ``[A-Za-z0-9_.+-]`` (a space, a newline, a non-ASCII letter) made
    ``_`` and cut to 64; ``policy`` for text that came from no file (``<policy>``)."""
    stem = policy.source.rsplit("/", 1)[-1]
    stem = stem[:-3] if stem.endswith(".pf") else stem
    if not stem or stem.startswith("<"):
        stem = "policy"
    return f"{_UNSAFE_STEM.sub('_', stem)[:64].lstrip('.') or 'policy'}.{target}.{ext}"


@dataclass(frozen=True)
class Backend:
    name: str  # the target name
    description: str
    supports: frozenset[str]
    formats: tuple[str, ...]  # first is the default
    hooks: tuple[str, ...]  # first is the default
    emit: Callable[[ir.Policy, Options], Artifact]
    passes: tuple[Pass, ...] = ()
    binary_formats: frozenset[str] = frozenset()
    run: Runner | None = None  # kernel (or reference) execution, for tests and verify
    view: View = raw_view  # what the hook sees of a frame; None: never sees it
    # the hook when none is asked for, from the other options (None: ``hooks[0]``)
    pick_hook: Callable[[Options], str] | None = None
    # what the target cannot take in a policy it can express rule by rule (sizes,
    # combinations): errors on the rules, for the *lowered* policy (``lower``)
    limits: Limits | None = None
    # whole firewalls (v2): the hook blocks this target carries, each to the hook of
    # ``hooks`` it is emitted at (``ingress`` → ``xdp`` for XDP); a target with
    # ``emit_ruleset`` takes all its blocks in one artifact (nft, iptables)
    carries: Mapping[str, str] = field(default_factory=dict)
    emit_ruleset: Callable[[Ruleset, Options], Artifact] | None = None
    # why the target cannot express a feature (of FEATURES), said after the error
    reasons: Mapping[str, str] = field(default_factory=dict)

    def default_hook(self, options: Options) -> str:
        return self.pick_hook(options) if self.pick_hook else self.hooks[0]

    def lower(self, policy: ir.Policy) -> ir.Policy:
        for p in self.passes:
            policy = p(policy)
        return policy


def rule_features(rule: ir.Rule) -> set[str]:
    needs = set()
    if isinstance(rule.action, ir.Count):
        needs.add("count")
    if isinstance(rule.action, ir.Redirect):
        needs.add("redirect")
    if any(isinstance(m, ir.PayloadMatch) for m in rule.matches):
        needs.add("payload")
    if 6 in rule.family.versions and rule.family is not ir.Family.ANY:
        needs.add("ipv6")
    if rule.family is ir.Family.ANY:
        needs.add("non-ip")
    if isinstance(rule.action, ir.Log):
        needs.add("log")
    if rule.limit is not None:
        needs.add("limit")
    if isinstance(rule.action, ir.Drop) and rule.action.audit:
        needs.add("audit")
    if any(isinstance(m, ir.CtMatch) for m in rule.matches):
        needs.add("ct")
    if isinstance(rule.action, ir.Queue):
        needs.add("queue")
    return needs | v2_features(rule)


def needed_features(rule: ir.Rule, backend: Backend) -> set[str]:
    """``rule_features`` that ``backend`` is asked for: a target with ``emit_ruleset``
    prints the v2 words itself and refuses, rule by rule, what it cannot (its own
    capability errors), so only the v1 features are asked of it here; a target of one
    list per block (``build_policy``) is asked for every v2 feature too."""
    return rule_features(rule) - _owned(backend)


def _owned(backend: Backend) -> frozenset[str]:
    return V2_FEATURES if backend.emit_ruleset is not None else frozenset()


def v2_features(rule: ir.Rule) -> set[str]:
    """What a rule of a whole firewall needs beyond v1 (``jump``/``goto`` need nothing:
    ``pfc.passes.inline_chains`` writes them out for targets without chains)."""
    needs = {f for m in rule.matches if (f := FIELD_FEATURES.get(m.field))}
    if type(rule.action) in _ACTION_FEATURES:
        needs.add(_ACTION_FEATURES[type(rule.action)])
    if rule.limit is not None and isinstance(rule.action, ir.Pass):
        needs.add("pass-limit")
    return needs


def capability_errors(policy: ir.Policy, backend: Backend, registry: dict[str, Backend],
                      limits: bool = True) -> list[Diagnostic]:
    """One error per rule the backend cannot express; then, when every rule can be
    expressed and ``limits`` is true, what the backend's ``limits`` hook says of the
    policy after the backend's passes (a rule that needs too many iptables rules, a
    policy too large for classic BPF). ``build_artifact`` passes ``limits=False``: the
    emitter enforces the same limits with the same diagnostics, and the passes would
    run twice."""
    out = feature_errors(policy, backend, registry)
    if not out and limits and backend.limits is not None:
        out = backend.limits(backend.lower(policy))
    return out


def feature_errors(policy: ir.Policy, backend: Backend,
                   registry: dict[str, Backend]) -> list[Diagnostic]:
    """One error per rule needing a feature (``FEATURES``) the backend lacks (and one
    on ``default`` for an audited default drop)."""
    out = []
    if policy.default_audit and "audit" not in backend.supports:
        able = [b.name for b in registry.values() if "audit" in b.supports and b.name != "ir"]
        out.append(error(f"target `{backend.name}` cannot express {FEATURES['audit']} "
                         "(the default drop)", policy.default_span,
                         hint=("targets that can: " + ", ".join(able)) if able else None,
                         code="unsupported"))
    after_routing = policy.hook is not None and policy.hook.name in POSTROUTING_BLOCKS
    for rule in policy.rules:
        needs = needed_features(rule, backend)
        if after_routing and any(m.field == "iif" for m in rule.matches) \
                and backend.emit_ruleset is None:
            needs.add("iif-post")
        missing = sorted(needs - backend.supports)
        if not missing:
            continue
        able = [b.name for b in registry.values()
                if set(missing) <= b.supports | _owned(b) and b.name != "ir"]
        what = ", ".join(FEATURES[m] for m in missing)
        why = "; ".join(dict.fromkeys(backend.reasons[m] for m in missing
                                      if m in backend.reasons))
        out.append(error(
            f"target `{backend.name}` cannot express {what} (rule at line {rule.line})"
            + (f": {why}" if why else ""),
            rule.span, hint=("targets that can: " + ", ".join(able)) if able else None,
            code="unsupported"))
    return out


def printable(text: str) -> str:
    """``text`` on one line of printable ASCII: every other character (newline, tab,
    escape sequences, NUL, any non-ASCII letter) and the backslash written as a Python
    escape (``\\n``, ``\\x1b``, ``\\xe9``, ``\\u2028``, ``\\\\``). Safe after ``#`` in
    nft, iptables-restore and ``ipset restore`` input, which end a comment only at a
    newline; it is not safe inside a quoted string of any of them."""
    return text.encode("unicode_escape").decode("ascii")


def c_comment(text: str) -> str:
    """``printable(text)`` that cannot end a C block comment (``*/`` becomes ``* /``)."""
    return printable(text).replace("*/", "* /")


_SAFE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,30}$")
_SAFE_DEV = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")


def check_name(value: str, what: str) -> str:
    """Allow-list for names that land in emitted text (tables, chains, sets)."""
    if not _SAFE_NAME.match(value):
        raise ValueError(f"invalid {what} `{value}`: use letters, digits, `_` and `-` "
                         "(at most 31 characters, not starting with a digit)")
    return value


def check_dev(value: str) -> str:
    """A Linux interface name, as the kernel's ``dev_valid_name`` (net/core/dev.c)
    accepts it: 1 to 15 bytes (IFNAMSIZ 16 with the NUL), not ``.`` or ``..``, no ``/``,
    ``:`` or whitespace; and, since it lands in emitted text (nft, iptables, a shell),
    only letters, digits and ``_ . @ -`` (an allow-list: no quotes, no control or
    non-ASCII characters)."""
    if value in (".", "..") or not _SAFE_DEV.fullmatch(value):
        shown = value.encode("ascii", "backslashreplace").decode()
        shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in shown)
        raise ValueError(f"invalid device name `{shown}`: a Linux interface name is 1 to "
                         "15 letters, digits and `_ . @ -`, and not `.` or `..`")
    return value
