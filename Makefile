# The two commands of the README. Both set everything up first (Debian packages,
# .venv, pfc itself) through scripts/setup, which is idempotent.
.PHONY: examples test setup lint

examples: setup
	scripts/examples

test: setup
	scripts/test

setup:
	scripts/setup

lint: setup
	.venv/bin/ruff check compiler backends tests benchmarks
