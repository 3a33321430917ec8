"""Fuzz the front end at scale (issue 17): the harness of ``tests/frontend/test_fuzz.py``
(``tests/frontend/fuzzing.py``) on 100,000 inputs, in forked workers.

Each input ``i`` is a function of ``(--seed, i)``: 20% grammar token streams, 10% valid
policies (a pool drawn once by hypothesis from the valid-policy generators), 70%
mutations of the examples, ``tests/bad/*.pf`` and the valid pool (a third of those with
a ``set`` also get a mutated set file). Per input: ``compile_source`` and
``format_source`` with the harness's checks; a clean policy is then built for every
target/format that needs no kernel (cbpf asm, nft text and JSON, iptables, ir, eBPF C for
socket/tc/xdp). A worker has a 3 GB address-space limit and a per-input CPU watchdog
(``--cpu-limit``, ITIMER_PROF); a worker silent for ``--wall-limit`` seconds is killed
and replaced. Afterwards ``--kernel-sample N`` clean policies go through the kernel's
own checkers in a throw-away namespace (clang + verifier for xdp, ``nft -c``,
``iptables-restore --test``, ``SO_ATTACH_FILTER``).

Printed: inputs, clean, diagnostics only, crashes (reproducers under ``--out``), hangs,
backend refusals and crashes, kernel rejections, and the CPU per input against a named
peer measured in the same run (compiling ``examples/*.pf``). Run as root from the
repository::

    .venv/bin/python benchmarks/fuzz.py --inputs 100000 --kernel-sample 200 --seed 1
    .venv/bin/python benchmarks/fuzz.py --replay out/fuzz/crashes/.../123.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import select
import signal
import statistics
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from pfc.frontend.pipeline import compile_path  # noqa: E402
from tests.frontend import fuzzing  # noqa: E402
from tests.paths import EXAMPLES  # noqa: E402

MEMORY = 3 << 30
SAVED_PER_CLASS = 5


class Watchdog(Exception):
    """The per-input CPU limit ran out."""


# ------------------------------------------------------------------------ inputs

def valid_pool(n: int, seed_value: int) -> list[str]:
    """``n`` valid policies from the harness's generators (hypothesis, seeded)."""
    out: list[str] = []

    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(seed_value)
    @given(fuzzing.valid_policies())
    def collect(text: str) -> None:
        out.append(text)

    collect()
    return out


def make_input(i: int, seed_value: int, pool: list[str],
               seeds: list[tuple[str, bytes]]) -> tuple[str, fuzzing.Input]:
    rng = random.Random(f"{seed_value}:{i}")
    kind = ("grammar", "grammar", "valid", *["mutation"] * 7)[i % 10]
    if kind == "grammar":
        tokens = [rng.choice(fuzzing.TOKENS) for _ in range(rng.randrange(60))]
        glue = [rng.randrange(4) for _ in range(8)]
        return kind, fuzzing.Input(f"g{i}.pf", fuzzing.token_text(tokens, glue).encode())
    if kind == "valid":
        return kind, fuzzing.Input(f"v{i}.pf", rng.choice(pool).encode())
    base = rng.choice(seeds) if rng.random() < 0.7 else ("pool.pf", rng.choice(pool).encode())
    ops = fuzzing.random_ops(rng, rng.randint(1, 4))
    set_base = set_ops = None
    if b"set" in base[1] and rng.random() < 1 / 3:
        set_base = rng.choice(fuzzing.set_bases())
        set_ops = fuzzing.random_ops(rng, rng.randint(0, 2))
    inp = fuzzing.mutated((f"m{i}-{base[0]}", base[1]), ops, set_ops or (), set_base)
    return kind, inp


# ------------------------------------------------------------------------ one input

def judge(inp: fuzzing.Input, cpu_limit: float, build: bool) -> dict:
    """Run one input under the CPU watchdog; a JSON-able result."""
    result: dict = {"size": len(inp.data) if inp.text is None else len(inp.text)}
    started = time.process_time()
    try:
        with _limit(cpu_limit):
            compiled = fuzzing.front_end(inp)
        result["outcome"] = "clean" if compiled.ok else "diagnostics"
    except Watchdog:
        result["outcome"] = "hang"
    except BaseException as exc:  # noqa: BLE001 - every escape is a finding
        result.update(outcome="crash", crash=_crash_class(exc), trace=traceback.format_exc())
    result["cpu"] = time.process_time() - started
    if build and result["outcome"] == "clean":
        result.update(_build(compiled, cpu_limit * 4))
    return result


def _build(compiled, cpu_limit: float) -> dict:
    try:
        with _limit(cpu_limit):
            return {"built": fuzzing.build_all(compiled)}
    except Watchdog:
        return {"backend": "hang"}
    except BaseException as exc:  # noqa: BLE001
        return {"backend": "crash", "crash": _crash_class(exc), "trace": traceback.format_exc()}


class _limit:
    """ITIMER_PROF (process CPU time) raising Watchdog after ``seconds``."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def __enter__(self) -> None:
        signal.signal(signal.SIGPROF, _expired)
        signal.setitimer(signal.ITIMER_PROF, self.seconds)

    def __exit__(self, *exc) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)


def _expired(signum, frame):
    raise Watchdog()


def _crash_class(exc: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/compiler/" in f.filename or "/backends/" in f.filename]
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    return f"{type(exc).__name__}@{where}"


# ------------------------------------------------------------------------ workers

def worker(indices: range, args, pool, seeds, out_fd: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    with os.fdopen(out_fd, "w", buffering=1) as out:
        for i in indices:
            out.write(json.dumps({"start": i}) + "\n")
            kind, inp = make_input(i, args.seed, pool, seeds)
            result = judge(inp, args.cpu_limit, i % args.build_every == 0)
            out.write(json.dumps({"i": i, "kind": kind, **result}) + "\n")
    os._exit(0)


def run_all(args, pool, seeds) -> list[dict]:
    """Every input through forked workers; a silent worker is killed and replaced."""
    live: dict[int, dict] = {}
    results: list[dict] = []
    for w in range(args.workers):
        _spawn(live, range(w, args.inputs, args.workers), args, pool, seeds)
    shown = 0.0
    while live:
        ready, _, _ = select.select(list(live), [], [], 5)
        for fd in ready:
            _read(fd, live, results, args, pool, seeds)
        _reap_silent(live, results, args, pool, seeds)
        if time.monotonic() - shown > 10:
            shown = time.monotonic()
            print(f"{len(results):,}/{args.inputs:,} inputs", file=sys.stderr, flush=True)
    return sorted(results, key=lambda r: r["i"])


def _spawn(live, chunk: range, args, pool, seeds) -> None:
    if not chunk:
        return
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        worker(chunk, args, pool, seeds, wfd)
    os.close(wfd)
    live[rfd] = {"pid": pid, "chunk": chunk, "current": None, "since": time.monotonic(),
                 "buffer": b""}


def _read(fd: int, live, results, args, pool, seeds) -> None:
    w = live[fd]
    data = os.read(fd, 1 << 16)
    if not data:
        _gone(fd, live)
        if w["current"] is not None:  # died inside an input (e.g. the OOM killer)
            results.append({"i": w["current"], "kind": "?", "outcome": "crash",
                            "crash": "worker died", "cpu": 0.0, "size": 0})
            _spawn(live, _rest(w["chunk"], w["current"]), args, pool, seeds)
        return
    *lines, w["buffer"] = (w["buffer"] + data).split(b"\n")
    for line in lines:
        record = json.loads(line)
        w["current"] = record.get("start")
        w["since"] = time.monotonic()
        if "start" not in record:
            results.append(record)


def _gone(fd: int, live) -> None:
    os.waitpid(live.pop(fd)["pid"], 0)
    os.close(fd)


def _rest(chunk: range, current: int) -> range:
    return range(current + chunk.step, chunk.stop, chunk.step)


def _reap_silent(live, results, args, pool, seeds) -> None:
    for fd, w in list(live.items()):
        if w["current"] is not None and time.monotonic() - w["since"] > args.wall_limit:
            os.kill(w["pid"], signal.SIGKILL)
            _gone(fd, live)
            results.append({"i": w["current"], "kind": "?", "outcome": "hang",
                            "killed": True, "cpu": args.wall_limit, "size": 0})
            _spawn(live, _rest(w["chunk"], w["current"]), args, pool, seeds)


# ------------------------------------------------------------------------ kernel

def kernel_sample(results: list[dict], n: int, args, pool, seeds) -> list[dict]:
    """``n`` clean inputs, evenly spread, through the kernel's checkers."""
    from pfc.kernel import netns

    clean = [r["i"] for r in results if r["outcome"] == "clean"]
    picked = clean[::max(1, len(clean) // n)][:n] if n else []
    out = []
    with netns.lab("pfcfz") as lab:
        for i in picked:
            _, inp = make_input(i, args.seed, pool, seeds)
            compiled = fuzzing.front_end(inp)
            rejected = fuzzing.kernel_rejections(compiled, lab.dut)
            out.append({"i": i, "rejected": rejected})
    return out


# ------------------------------------------------------------------------ report

def peer_cpu() -> float:
    """The peer: CPU seconds per compile of an example policy (this run, this machine)."""
    started = time.process_time()
    rounds = 20
    for _ in range(rounds):
        for path in EXAMPLES:
            compile_path(path)
    return (time.process_time() - started) / (rounds * len(EXAMPLES))


def save_reproducers(results: list[dict], kernel: list[dict], args, pool, seeds) -> Counter:
    crashes: Counter = Counter()
    for r in results:
        for key in ("outcome", "backend"):
            if r.get(key) in ("crash", "hang"):
                what = f"{'front' if key == 'outcome' else 'backend'}-{r[key]}"
                cls = f"{what}-{r.get('crash', 'cpu')}"
                crashes[cls] += 1
                if crashes[cls] <= SAVED_PER_CLASS:
                    _save(args.out / "crashes" / _safe(cls), r, args, pool, seeds)
    for k in kernel:
        if k["rejected"]:
            _save(args.out / "kernel-rejected", {**k, "trace": "\n".join(k["rejected"])},
                  args, pool, seeds)
    return crashes


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@" else "_" for c in name)


def _save(folder: Path, record: dict, args, pool, seeds) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    _, inp = make_input(record["i"], args.seed, pool, seeds)
    (folder / f"{record['i']}.json").write_text(json.dumps(
        {"seed": args.seed, **inp.replay(), "trace": record.get("trace")}, indent=1))
    (folder / f"{record['i']}.pf").write_bytes(
        inp.data if inp.text is None else inp.text.encode("utf-8", "backslashreplace"))
    if inp.set_data is not None:
        (folder / f"{record['i']}.set.txt").write_bytes(inp.set_data)


def summary(results: list[dict], kernel: list[dict], crashes: Counter, peer: float,
            elapsed: float) -> dict:
    outcomes = Counter(r["outcome"] for r in results)
    cpu = sorted(r["cpu"] for r in results if not r.get("killed"))
    refused: Counter = Counter()
    reasons: Counter = Counter()
    built = 0
    for r in results:
        for target, reason in r.get("built", {}).items():
            built += 1
            refused[target] += reason is not None
            reasons[reason] += reason is not None
    return {
        "inputs": len(results), "clean": outcomes["clean"],
        "diagnostics_only": outcomes["diagnostics"], "crashes": outcomes["crash"],
        "hangs": outcomes["hang"], "crash_classes": dict(crashes),
        "builds": built, "backend_refusals": dict(+refused),
        "refusal_reasons": dict((+reasons).most_common(12)),
        "backend_crashes": sum(r.get("backend") == "crash" for r in results),
        "backend_hangs": sum(r.get("backend") == "hang" for r in results),
        "kernel_sample": len(kernel), "kernel_rejections": sum(bool(k["rejected"]) for k in kernel),
        "cpu_ms": {"mean": 1000 * statistics.fmean(cpu), "p99": 1000 * cpu[len(cpu) * 99 // 100],
                   "max": 1000 * cpu[-1]} if cpu else {},
        "peer_examples_compile_ms": 1000 * peer,
        "ratio_mean_input_to_example": statistics.fmean(cpu) / peer if cpu else None,
        "largest_input": max((r["size"] for r in results), default=0),
        "wall_s": elapsed,
    }


def replay(path: Path) -> int:
    record = json.loads(path.read_text())
    inp = fuzzing.Input(record["name"], record["data"].encode("latin1"), record["text"],
                        None if record["set_data"] is None else record["set_data"].encode("latin1"))
    compiled = fuzzing.front_end(inp)
    print("clean" if compiled.ok else f"{len(compiled.diagnostics)} diagnostics")
    if compiled.ok:
        print(fuzzing.build_all(compiled))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--inputs", type=int, default=10_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    p.add_argument("--cpu-limit", type=float, default=10.0,
                   help="CPU seconds per input before it counts as a hang (default 10)")
    p.add_argument("--wall-limit", type=float, default=120.0,
                   help="seconds a worker may stay silent before it is killed")
    p.add_argument("--build-every", type=int, default=1,
                   help="build every Nth clean input for every target (default: all)")
    p.add_argument("--kernel-sample", type=int, default=0, metavar="N")
    p.add_argument("--pool", type=int, default=2000, help="valid policies drawn for seeds")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "fuzz")
    p.add_argument("--replay", type=Path, help="run one saved reproducer (.json)")
    args = p.parse_args()
    if args.replay:
        return replay(args.replay)
    started = time.monotonic()
    pool, seeds = valid_pool(args.pool, args.seed), fuzzing.corpus()
    results = run_all(args, pool, seeds)
    kernel = kernel_sample(results, args.kernel_sample, args, pool, seeds)
    crashes = save_reproducers(results, kernel, args, pool, seeds)
    report = summary(results, kernel, crashes, peer_cpu(), time.monotonic() - started)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.json").write_text(json.dumps(report, indent=2))
    for key, value in report.items():
        print(f"{key:>30}: {value}")
    return 1 if report["crashes"] or report["hangs"] or report["backend_crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
