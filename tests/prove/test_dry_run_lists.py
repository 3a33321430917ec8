"""``pfc load --dry-run`` against a loaded policy whose named lists changed (issue
29, m1): a rule whose text is the same on both sides is listed once (``~``) and the
lists' entries that changed are shown; the JSON starts with the version (m6). Kernel
tests in a throw-away namespace (the deploy tests' ``lab``)."""

from __future__ import annotations

import json

import pytest

from tests.deploy.test_load import ROOT_REASON, isolated, lab, pfc, policy_file  # noqa: F401

pytestmark = [pytest.mark.kernel,
              pytest.mark.skipif(ROOT_REASON is not None, reason=ROOT_REASON or "")]

WEB = ("define admins = { 203.0.113.10, 203.0.113.11 }\ndefine web = { 80, 443 }\n"
       "default drop\npass tcp src $admins dport 22\npass tcp dport $web\n")
WEB2 = WEB.replace("203.0.113.10, 203.0.113.11", "203.0.113.10").replace(
    "80, 443", "80, 443, 8443")


def test_dry_run_shows_what_changed_inside_lists(lab, tmp_path) -> None:  # noqa: F811
    old, new = policy_file(tmp_path, WEB, "web.pf"), policy_file(tmp_path, WEB2, "web2.pf")
    where = ["--target", "nft", "--dev", lab.dut, "--netns", lab.name]
    assert pfc("load", old, *where)[0] == 0
    code, out, err = pfc("load", new, *where, "--dry-run")
    assert code == 0, err
    assert "  rules: 0 removed, 0 added, 2 changed by a list's entries\n" in out
    assert "    ~ line 4: pass tcp src $admins dport 22\n" in out
    assert "  lists: $admins: -203.0.113.11; $web: +8443\n" in out
    assert "tcp src 203.0.113.11 (no longer in $admins) dport 22: pass → drop" in out
    code, out, err = pfc("load", new, *where, "--dry-run", "--format", "json")
    seen = json.loads(out)
    assert code == 0 and list(seen)[0] == "version" and seen["version"] == 1
    assert seen["sets"] == [{"name": "admins", "removed": ["203.0.113.11"], "added": []},
                            {"name": "web", "removed": [], "added": ["8443"]}]
