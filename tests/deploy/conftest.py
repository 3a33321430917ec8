"""Fixtures of every deploy test: an own state directory (autouse) and a throw-away
namespace with a veth pair (``lab``), both defined in test_load.py."""

from tests.deploy.test_load import isolated, lab  # noqa: F401 - fixtures
