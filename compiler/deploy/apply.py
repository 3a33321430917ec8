"""``pfc apply``: make the host hold what ``/etc/pfc/pfc.conf`` says, and nothing else
of pfc's; idempotent, and never a host without a policy after a failure.

The config (TOML; ``--config``, ``PFC_CONFIG``, default ``/etc/pfc/pfc.conf``)::

    unlisted = "unload"        # or "keep": pfc's policies the config does not list
    [[policy]]
    file = "edge.pf"           # relative to the config file's directory
    dev = "eth0"
    target = "xdp"             # xdp | tc | nft | iptables
    mode = "native"            # optional, xdp only
    hook = "ingress"           # optional, nft / iptables
    table = "pfc"              # optional
    netns = "blue"             # optional; default: the namespace pfc apply runs in

    [[policy]]                 # no `dev`: a whole firewall (v2), the namespace's one
    file = "router.pf"
    target = "xdp,nft"         # each block to the first that carries it (default nft)

Per listed policy, in order: compile it; if pfc's record at (netns, dev, target) has
the same copy (the policy's sources, set files included, and its options: the digest
of :class:`pfc.deploy.snapshot.Copy`) and the kernel holds it as loaded (``status``
health ``ok``), nothing is done ("unchanged"); otherwise it is loaded (an atomic
replace) — also when the kernel changed outside pfc ("repaired", with ``--force``:
the place is pfc's, the config says so). After a successful load the copy is kept
as the place's *last good copy* (:mod:`pfc.deploy.snapshot`, ``/var/lib/pfc``).

A policy that fails (it does not compile, the kernel refuses it) leaves the previous
policy in force (every load is all or nothing); when there is none (at boot: nothing
loaded yet, or it vanished), the last good copy is loaded instead. A config that
cannot be read at all does the same for every last good copy of the namespace.
Then pfc's records in the namespaces the config covers that it does not list are
unloaded (``unlisted = "keep"`` keeps them).
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pfc.deploy import journal, sets, snapshot, state
from pfc.deploy import load as deploying
from pfc.deploy.base import LoadError, current_netns, in_netns, netns_path, unwritable
from pfc.deploy.firewall import commit
from pfc.deploy.firewall.loader import DEV as FIREWALL_DEV
from pfc.deploy.firewall.loader import TARGET as FIREWALL
from pfc.deploy.preview import load_compiled
from pfc.frontend.diagnostics import CompileError
from pfc.frontend.pipeline import Compiled, compile_path

DEFAULT_CONFIG = "/etc/pfc/pfc.conf"
KEYS = {"file", "dev", "target", "mode", "hook", "table", "netns"}


class ConfigError(ValueError):
    """The config cannot be used: where and why, one line."""


@dataclass(frozen=True)
class Entry:
    file: Path
    dev: str
    target: str
    netns: str
    mode: str | None = None
    hook: str | None = None
    table: str = "pfc"
    parts: tuple[str, ...] = ()  # a whole firewall (target "firewall"): its target list

    @property
    def options(self) -> dict:
        if self.target == FIREWALL:
            return commit.copy_options(list(self.parts), self.table, self.mode)
        return {"target": self.target, "hook": self.hook, "table": self.table,
                "mode": self.mode}

    @property
    def place(self) -> str:
        if self.target == FIREWALL:
            return f"firewall ({','.join(self.parts)}) (namespace {self.netns})"
        return f"{self.target} on {self.dev} (namespace {self.netns})"


@dataclass
class Config:
    path: Path
    entries: list[Entry]
    unlisted: str = "unload"


def config_path(given: str | None = None) -> Path:
    return Path(given or os.environ.get("PFC_CONFIG") or DEFAULT_CONFIG)


def read_config(path: Path) -> Config:
    """The config at ``path``; ConfigError naming the file and the TOML line (the
    key's, else its ``[[policy]]`` table's) otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from None
    except ValueError as exc:  # tomllib: an integer of more than 4,300 digits
        raise ConfigError(f"{path}: not a valid config: {str(exc).split(';')[0]}") from None
    unknown = set(data) - {"policy", "unlisted"}
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(f"{path}:{_line(text, 0, key)}: unknown key `{key}` (keys: "
                          "policy, unlisted)")
    if data.get("unlisted", "unload") not in ("unload", "keep"):
        raise ConfigError(f"{path}:{_line(text, 0, 'unlisted')}: unlisted must be "
                          "\"unload\" or \"keep\"")
    policies = data.get("policy", [])
    if not isinstance(policies, list):
        raise ConfigError(f"{path}:{_line(text, 0, 'policy')}: `policy` must be a list "
                          "of tables ([[policy]])")
    here = current_netns()
    entries = [_entry(path, text, i, p, here) for i, p in enumerate(policies, 1)]
    seen: set[tuple[str, str, str]] = set()
    for i, e in enumerate(entries, 1):
        if (e.netns, e.dev, e.target) in seen:
            raise ConfigError(f"{path}:{_line(text, i)}: policy {i}: {e.place} is listed "
                              "twice")
        seen.add((e.netns, e.dev, e.target))
    return Config(path, entries, data.get("unlisted", "unload"))


def _line(text: str, n: int, key: str | None = None) -> int:
    """The line of ``key`` in the ``n``-th ``[[policy]]`` table (0: before the first
    table), or of that table's header; 1 when neither is found (an inline table)."""
    tables = [i for i, ln in enumerate(text.splitlines(), 1)
              if ln.strip().replace(" ", "").startswith("[[policy]]")]
    lines = text.splitlines()
    start = 0 if n == 0 else (tables[n - 1] if n <= len(tables) else 0)
    end = (tables[n] - 1 if n < len(tables) else len(lines)) if n else \
        (tables[0] - 1 if tables else len(lines))
    if key is not None:
        pattern = re.compile(rf'^\s*("?){re.escape(key)}\1\s*=')
        for i in range(start, end):
            if pattern.match(lines[i]):
                return i + 1
    return start or 1


def _entry(path: Path, text: str, n: int, p: object, here: str) -> Entry:
    where = f"{path}:{_line(text, n)}: policy {n}"
    if not isinstance(p, dict):
        raise ConfigError(f"{where}: not a table")
    unknown = set(p) - KEYS
    if unknown:
        key = sorted(unknown)[0]
        raise ConfigError(f"{path}:{_line(text, n, key)}: policy {n}: unknown key `{key}` "
                          f"(keys: {', '.join(sorted(KEYS))})")
    if "dev" not in p:
        return _firewall_entry(path, where, p, here)
    for key in ("file", "dev", "target"):
        if not isinstance(p.get(key), str) or not p[key]:
            raise ConfigError(f"{where}: `{key}` is required (a string)")
    if p["target"] not in deploying.TARGETS:
        raise ConfigError(f"{where}: target `{p['target']}` is not one of "
                          f"{', '.join(deploying.TARGETS)}")
    if not state.valid_part(p["dev"]) or not state.valid_part(p.get("netns") or here):
        raise ConfigError(f"{where}: invalid device or namespace name")
    if p.get("mode") not in (None, "native", "generic") or \
            (p.get("mode") and p["target"] != "xdp"):
        raise ConfigError(f"{where}: mode is native or generic, for target xdp only")
    file = Path(p["file"])
    return Entry(file if file.is_absolute() else path.parent / file, p["dev"], p["target"],
                 p.get("netns") or here, p.get("mode"), p.get("hook"),
                 p.get("table") or "pfc")


def _firewall_entry(path: Path, where: str, p: dict, here: str) -> Entry:
    """A ``[[policy]]`` without ``dev``: a whole firewall, ``target`` its list."""
    if not isinstance(p.get("file"), str) or not p["file"]:
        raise ConfigError(f"{where}: `file` is required (a string)")
    target = p.get("target", "nft")
    parts = tuple(t.strip() for t in target.split(",")) if isinstance(target, str) else ()
    if not parts or any(t not in commit.LOADABLE for t in parts):
        raise ConfigError(f"{where}: a whole firewall (no `dev`) takes a target list of "
                          f"{', '.join(commit.LOADABLE)}, not `{target}`")
    if p.get("hook") is not None:
        raise ConfigError(f"{where}: a whole firewall (no `dev`) names its hooks in its "
                          "blocks: `hook` is for one rule list")
    if not state.valid_part(p.get("netns") or here):
        raise ConfigError(f"{where}: invalid namespace name")
    if p.get("mode") not in (None, "native", "generic") or \
            (p.get("mode") and "xdp" not in parts):
        raise ConfigError(f"{where}: mode is native or generic, for target xdp only")
    file = Path(p["file"])
    return Entry(file if file.is_absolute() else path.parent / file, FIREWALL_DEV, FIREWALL,
                 p.get("netns") or here, p.get("mode"), None, p.get("table") or "pfc",
                 parts)


# ------------------------------------------------------------------------ applying

@dataclass
class Outcome:
    """What apply did (or, dry, would do) at one place."""

    place: str
    action: str  # unchanged | loaded | replaced | repaired | unloaded | failed | fallback
    messages: list[str] = field(default_factory=list)
    preview: object | None = None  # dry run: what pfc.api.dry_run returned

    @property
    def ok(self) -> bool:
        return self.action not in ("failed", "fallback")


DryRun = Callable[[Compiled, Entry], object]  # pfc.api's dry run of one entry


@dataclass
class Current:
    """What is at an entry's place: pfc's record, the kernel's health of it, pfc's
    copy of its sources (only one whose digest is the record's), and notes (an
    unfinished load or set settled first, a copy that is not the record's)."""

    record: state.Record | None
    health: str
    copy: snapshot.Copy | None = None
    notes: list[str] = field(default_factory=list)


def _current(e: Entry, settle: bool = True) -> Current:
    if netns_path(e.netns) is None:
        raise LoadError(f"network namespace `{e.netns}` does not exist",
                        hint="list namespaces with `ip netns list`")
    try:
        with in_netns(e.netns), state.locked():
            notes = deploying.recover(e.netns, e.dev, e.target) if settle else []
            try:
                record = state.read(e.netns, e.dev, e.target)
            except state.Unreadable:
                return Current(None, "vanished", None, notes)
            copy, why = snapshot.checked(record) if record else (None, None)
    except state.Unwritable as exc:
        raise unwritable(exc, "nothing was changed") from None
    if record is None:
        return Current(None, "vanished", None, notes)
    if why:
        notes.append(f"note: {why}; loading the policy again")
    health = deploying.inspect(record).health
    if health == "ok":
        with in_netns(e.netns):
            health = "changed" if sets.drift(record) else "ok"
    return Current(record, health, copy, notes)


def apply_entry(e: Entry, dry: DryRun | None = None) -> Outcome:
    now = _current(e, settle=dry is None)
    compiled = compile_path(e.file)
    if not compiled.ok:
        raise CompileError(compiled.diagnostics, compiled.sources)
    wanted = snapshot.Copy.of(compiled, e.options)
    if now.record is not None and now.health == "ok" and now.copy and \
            now.copy.applied == wanted.digest:
        return Outcome(e.place, "unchanged", now.notes)
    action = "loaded" if now.record is None else \
        ("replaced" if now.health == "ok" else "repaired")
    if dry is not None:
        return Outcome(e.place, action, now.notes, preview=dry(compiled, e))
    result = _load(compiled, e, now.record is not None)
    journal.point("applied")
    return Outcome(e.place, action, now.notes + result.messages + _keep(e, wanted))


def _load(compiled: Compiled, e: Entry, force: bool) -> deploying.Result:
    if e.target == FIREWALL:
        return commit.load_compiled(compiled, list(e.parts), e.netns, force, e.mode,
                                    e.table)
    return load_compiled(compiled, e.target, e.dev, e.netns, force, e.mode, e.hook,
                         e.table)


def _keep(e: Entry, wanted: snapshot.Copy) -> list[str]:
    """The last good copy of what was applied; a warning if it cannot be written (the
    policy is loaded all the same)."""
    try:
        snapshot.keep_last_good(e.netns, e.dev, e.target, wanted)
    except state.Unwritable as exc:
        return [f"warning: the policy is loaded, but its last good copy was not kept: "
                f"{exc} ({exc.need()})"]
    return []


def fallback(e: Entry, why: str) -> Outcome:
    """After ``why`` (the entry failed): keep what is in force; load the last good copy
    when nothing of pfc's is."""
    try:
        now = _current(e)
    except LoadError as exc:
        return Outcome(e.place, "failed", [why, exc.cause])
    record, health = now.record, now.health
    if record is not None and health != "vanished":
        return Outcome(e.place, "failed", [why, "the previous policy stays in force "
                                           f"({record.policy}, loaded {record.loaded_at})"])
    return load_last_good(e.netns, e.dev, e.target, why)


def _place(target: str, dev: str, netns: str) -> str:
    if target == FIREWALL:
        return f"firewall (namespace {netns})"
    return f"{target} on {dev} (namespace {netns})"


def load_last_good(netns: str, dev: str, target: str, why: str) -> Outcome:
    place = _place(target, dev, netns)
    good = snapshot.read_last_good(netns, dev, target)
    if good is None:
        return Outcome(place, "failed", [why, "no last good copy to fall back to: "
                                         "nothing of pfc's filters here"])
    o = good.options
    e = Entry(Path(good.main), dev, target, netns, o.get("mode"), o.get("hook"),
              o.get("table") or "pfc", tuple((o.get("targets") or "").split(",")))
    place = e.place
    try:
        _load(snapshot.compile_copy(good), e, True)
    except (LoadError, CompileError) as exc:
        cause = exc.cause if isinstance(exc, LoadError) else "it does not compile"
        return Outcome(place, "failed", [why, f"the last good copy failed too: {cause}"])
    return Outcome(place, "fallback", [why, f"loaded the last good copy of {good.main} "
                                       f"({snapshot.last_good_path(netns, dev, target)})"])


def unlisted(config: Config, dry: bool) -> list[Outcome]:
    """Unload pfc's policies the config does not list, in the namespaces it covers."""
    if config.unlisted == "keep":
        return []
    listed = {(e.netns, e.dev, e.target) for e in config.entries}
    out = []
    for ns in sorted({e.netns for e in config.entries} | {current_netns()}):
        for r in state.records(ns):
            if (r.netns, r.dev, r.target) in listed or netns_path(r.netns) is None:
                continue
            place = _place(r.target, r.dev, r.netns)
            messages = [] if dry else deploying.unload(r.target, r.dev, r.netns).messages
            out.append(Outcome(place, "unloaded", messages))
    return out


def fallback_all(why: str, netns: str | None = None) -> list[Outcome]:
    """The config is unreadable: every place of the namespace with a last good copy
    and nothing of pfc's in force gets its last good copy."""
    ns = netns or current_netns()
    root = snapshot.lib_dir() / "last-good" / ns
    out = []
    for p in sorted(root.glob(f"*/*{snapshot.SUFFIX}")):
        e = Entry(Path("?"), p.parent.name, p.name[:-len(snapshot.SUFFIX)], ns)
        out.append(fallback(e, why))
    return out


def apply(config: Config, dry: DryRun | None = None) -> list[Outcome]:
    """Make the host match ``config`` (module doc); ``dry``: only say what would be
    done, with ``dry(compiled, entry)``'s preview of each load."""
    out = []
    for e in config.entries:
        try:
            out.append(apply_entry(e, dry))
        except CompileError as exc:
            why = f"{e.file} has errors:\n{exc.render()}"
            out.append(Outcome(e.place, "failed", [why]) if dry else fallback(e, why))
        except LoadError as exc:
            why = exc.cause + (f" (hint: {exc.hint})" if exc.hint else "")
            out.append(Outcome(e.place, "failed", [why]) if dry else fallback(e, why))
    return out + unlisted(config, dry is not None)
