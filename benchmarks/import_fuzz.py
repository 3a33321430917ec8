"""The long fuzzing campaign of ``pfc import`` (issue 26: 0 crashes over 10,000 mutated
rulesets): tests/importers/fuzzing.py's harness, whose short campaign (1,000 inputs) is
tests/importers/test_fuzz.py. Seeds: the corpus's real rulesets, netfilter's own test
files (nft dumps and JSON, iptables' ``.t`` rules), pcap-filter expressions. Printed:
each outcome's count (``crash`` must be absent) and the CPU seconds. Run from the
repository::

    .venv/bin/python benchmarks/import_fuzz.py --inputs 10000 --seed 1 --keep out/import-fuzz
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.importers.corpus import CORPUS  # noqa: E402
from tests.importers.fuzzing import run  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="write crashing inputs here")
    args = parser.parse_args()
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    start = time.process_time()
    seen = run(CORPUS, args.inputs, args.seed, args.keep)
    for key, count in sorted(seen.items()):
        print(f"{count:>7}  {key}")
    print(f"{args.inputs} inputs, {seen['crash']} crashes, "
          f"CPU {time.process_time() - start:.1f} s")
    return 1 if seen["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
