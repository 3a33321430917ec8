"""The fleet roll-out, run for real (#27): ``ansible-playbook`` applies
packaging/ansible's role to three hosts, network namespaces reached through the role's
connection plugin (packaging/ansible/connection_plugins/netns.py), each with its own
config, state and last-good directories: a canary first, then the rest (``serial: [1,
'50%']``); a host that refuses the release stops the run with nothing changed on the
other hosts; a second run changes nothing; rollback.yml restores the last good release;
report.yml merges every host's ``pfc status --format json`` into one table. Measured on
the 2-core machine: the roll-out test 131 s at load 7 (80 s of CPU), 240 s at load 13
(seven playbook runs); the others take under a second."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pfc.deploy import base as deploy_base
from pfc.kernel import netns
from tests.paths import ROOT

ANSIBLE = ROOT / "packaging" / "ansible"
PLAYBOOK_BIN = Path(sys.executable).with_name("ansible-playbook")
PFC_BIN = Path(sys.executable).with_name("pfc")
ROOT_REASON = netns.missing_privileges()
V1 = "count udp\ndrop udp dport 1001\n"
V2 = "count udp\ndrop udp dport 1002\n"

sys.path.insert(0, str(ANSIBLE / "roles" / "pfc" / "filter_plugins"))
import pfc_fleet  # noqa: E402 - the role's filters, from the role's directory


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Fleet:
    """Three namespaces h1 (the canary), h2, h3 with a veth eth0 each, an inventory
    naming them, and the release files; ``play`` runs a playbook of packaging/ansible."""

    def __init__(self, base: Path):
        self.base = base
        self.ns = {h: f"pfcfl{os.getpid()}{h}" for h in ("h1", "h2", "h3")}
        for name in self.ns.values():
            subprocess.run(["ip", "netns", "add", name], check=True)
            self.link(name, "eth0")
        hosts = {h: {"ansible_host": name, "pfc_config": str(base / h / "etc/pfc.conf"),
                     "pfc_state_dir": str(base / h / "run"),
                     "pfc_lib_dir": str(base / h / "lib")} for h, name in self.ns.items()}
        (base / "hosts.yml").write_text(yaml.safe_dump({"pfc": {"hosts": hosts, "vars": {
            "ansible_connection": "netns", "ansible_python_interpreter": "/usr/bin/python3",
            "pfc_bin": str(PFC_BIN), "pfc_report": str(base / "pfc-fleet")}}}))

    @staticmethod
    def link(name: str, dev: str, kind: str = "veth") -> None:
        """``dev`` in namespace ``name``: a veth (its peer ``pDEV``), or a bridge (no
        driver support for native XDP)."""
        more = ["peer", "name", f"p{dev}"] if kind == "veth" else []
        subprocess.run(["ip", "-n", name, "link", "add", dev, "type", kind, *more],
                       check=True)
        for d in (dev, *more[-1:]):
            subprocess.run(["ip", "-n", name, "link", "set", d, "up"], check=True)

    def release(self, policy: str, *places: dict) -> Path:
        """Extra vars: edge.pf (``policy``) loaded at each of ``places`` (``dev``, and
        ``target``: nft unless said, one nft table per device)."""
        (self.base / "edge.pf").write_text(policy)
        tables = [{"file": "edge.pf", "target": "nft", "table": f"pfc_{p['dev']}"} | p
                  for p in places]
        path = self.base / "release.yml"
        path.write_text(yaml.safe_dump({
            "pfc_files": [{"src": str(self.base / "edge.pf"), "dest": "edge.pf"}],
            "pfc_policies": tables}))
        return path

    def play(self, book: str, *more: str) -> tuple[int, str, dict]:
        """(exit code, output, the recap's counts per host)."""
        env = os.environ | {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_PIPELINING": "True",
                            "ANSIBLE_RETRY_FILES_ENABLED": "False",
                            "ANSIBLE_LOCALHOST_WARNING": "False"}
        if book == "site.yml":  # a canary, then the two others in one batch
            more = ("-e", json.dumps({"pfc_serial": [1, 2]}), *more)
        done = subprocess.run([PLAYBOOK_BIN, "-i", self.base / "hosts.yml",
                               ANSIBLE / book, *more], capture_output=True, text=True,
                              env=env, cwd=self.base)
        out = done.stdout + done.stderr
        recap = {h: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
                 for h, counts in re.findall(r"^(h\d)\s*:\s*(.*)$", done.stdout, re.M)}
        return done.returncode, out, recap

    def loaded(self, host: str) -> list[tuple]:
        env = os.environ | {"PFC_STATE_DIR": str(self.base / host / "run")}
        done = subprocess.run(["ip", "netns", "exec", self.ns[host], PFC_BIN, "status",
                               "--format", "json"], capture_output=True, text=True, env=env)
        assert done.returncode in (0, 3, 4), done.stderr
        return sorted((e["dev"], e["sha256"], e["health"])
                      for e in json.loads(done.stdout)["loaded"])

    def config(self, host: str) -> str | None:
        path = self.base / host / "etc" / "pfc.conf"
        return path.read_text() if path.exists() else None

    def close(self) -> None:
        for name in self.ns.values():
            subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def fleet(tmp_path):
    f = Fleet(tmp_path)
    yield f
    f.close()


@pytest.mark.kernel
@pytest.mark.timeout(1800)
@pytest.mark.skipif(ROOT_REASON is not None or not PLAYBOOK_BIN.exists(),
                    reason=ROOT_REASON or "ansible-core is not installed (test extras)")
def test_roll_out_canary_refusal_rollback_and_report(fleet):
    eth0, eth1 = {"dev": "eth0"}, {"dev": "eth1"}
    v1 = fleet.release(V1, eth0)
    # --check (on the canary): its kernel asked (a dry run), nothing loaded or written
    code, out, recap = fleet.play("site.yml", "-e", f"@{v1}", "--check", "--limit", "h1")
    assert code == 0 and recap["h1"]["changed"] >= 1, out
    assert fleet.loaded("h1") == [] and fleet.config("h1") is None
    # the roll-out: every host holds v1; a second run changes nothing
    code, out, recap = fleet.play("site.yml", "-e", f"@{v1}")
    assert code == 0, out
    assert all(fleet.loaded(h) == [("eth0", sha(V1), "ok")] for h in fleet.ns)
    batches = [p for p in re.split(r"^PLAY ", out, flags=re.M) if p.startswith("[Roll out")]
    assert [sorted(set(re.findall(r"\[(h\d)\]", b))) for b in batches] == [
        ["h1"], ["h2", "h3"]]  # the canary first
    code, out, recap = fleet.play("site.yml", "-e", f"@{v1}")
    assert code == 0 and all(recap[h]["changed"] == 0 for h in fleet.ns), out
    good_config = fleet.config("h1")
    # the canary's kernel refuses: eth0's policy changes and eth1 gets native XDP, but
    # h1's eth1 is a bridge; the verifier accepts the program (the dry run passes), the
    # driver refuses the attach: eth0's new policy is undone, the run stops there
    fleet.link(fleet.ns["h1"], "eth1", "bridge")
    bad = fleet.release(V2, eth0, eth1 | {"target": "xdp", "mode": "native"})
    code, out, recap = fleet.play("site.yml", "-e", f"@{bad}")
    assert code != 0 and recap["h1"]["failed"] == 1, out
    assert "h1: the kernel refused the release" in out
    assert "does not support native XDP" in out
    assert "the release applied before was restored" in out
    assert "h2" not in recap and "h3" not in recap  # the next batch never started
    for h in fleet.ns:
        assert fleet.loaded(h) == [("eth0", sha(V1), "ok")] and fleet.config(h) == good_config
    # v2 adds nft on eth1, which h2 gets now and h3 lacks: the canary takes v2, then h3
    # refuses in the second batch (its dry run) and h2, in that batch, is left as it was
    fleet.link(fleet.ns["h2"], "eth1")
    v2 = fleet.release(V2, eth0, eth1)
    code, out, recap = fleet.play("site.yml", "-e", f"@{v2}")
    assert code != 0 and recap["h3"]["failed"] == 1 and recap["h2"]["failed"] == 0, out
    assert "h3 refused the release, nothing was changed there" in out
    assert "device `eth1` does not exist" in out and "h1 refused" not in out
    assert fleet.loaded("h1") == [("eth0", sha(V2), "ok"), ("eth1", sha(V2), "ok")]
    for h in ("h2", "h3"):
        assert fleet.loaded(h) == [("eth0", sha(V1), "ok")] and fleet.config(h) == good_config
    # the report: which host runs which policy, drift (h2's table deleted by hand)
    subprocess.run(["ip", "netns", "exec", fleet.ns["h2"], "nft", "delete", "table",
                    "netdev", "pfc_eth0"], check=True)
    code, out, recap = fleet.play("report.yml")
    assert code == 0 and all(recap[h]["changed"] == 0 for h in fleet.ns), out
    table = (fleet.base / "pfc-fleet.txt").read_text()
    assert f"nft eth0: sha256 {sha(V1)[:12]} on h2, h3" in table
    assert f"nft eth1: sha256 {sha(V2)[:12]} on h1" in table
    assert "drift: h2" in table
    rows = json.loads((fleet.base / "pfc-fleet.json").read_text())
    assert [(r["host"], r["dev"], r["health"]) for r in rows] == [
        ("h1", "eth0", "ok"), ("h1", "eth1", "ok"), ("h2", "eth0", "vanished"),
        ("h3", "eth0", "ok")]
    # rollback: every host back on v1 (h1's eth1 unloaded; h2 repaired), h3 untouched
    code, out, recap = fleet.play("rollback.yml")
    assert code == 0 and recap["h3"]["changed"] == 0, out
    for h in fleet.ns:
        assert fleet.loaded(h) == [("eth0", sha(V1), "ok")] and fleet.config(h) == good_config
    assert "drift: none" in (fleet.base / "pfc-fleet.txt").read_text()


# ------------------------------------------------------------------- no kernel needed

def test_the_fleet_table_names_policies_hosts_and_drift():
    def status(*entries):
        return {"pfc_status": {"loaded": [
            {"netns": "default", "target": "nft", "dev": dev, "policy": "/etc/pfc/e.pf",
             "sha256": digest, "loaded_at": "t", "health": health, "detail": "",
             "policy_file_changed": edited, "default_counter": {"packets": 7, "bytes": 1},
             "rules": [{"packets": 2, "bytes": 100}, {"packets": packets, "bytes": 50}]}
            for dev, digest, health, edited, packets in entries]}}
    hostvars = {"a": status(("eth0", "1" * 64, "ok", False, 3)),
                "b": status(("eth0", "1" * 64, "ok", True, None)),
                "c": {"pfc_status": {"loaded": []}}, "d": {}}
    rows = pfc_fleet.pfc_fleet_rows(["a", "b", "c", "d"], hostvars)
    assert [(r["host"], r.get("rule_packets"), r.get("drift")) for r in rows] == [
        ("a", 5, False), ("b", None, True), ("c", None, None), ("d", None, None)]
    table = pfc_fleet.pfc_fleet_table(rows).splitlines()
    assert table[0].split()[:3] == ["HOST", "PLACE", "POLICY"]
    assert table[1].split() == ["a", "nft", "eth0", "e.pf", "1" * 12, "ok", "no", "5",
                                "150", "7"]
    assert table[2].split()[-4:] == ["yes", "?", "150", "7"]  # a counter unreadable
    assert "nothing loaded" in table[3] and "no status" in table[4]
    assert table[-2:] == [f"nft eth0: sha256 {'1' * 12} on a, b", "drift: b"]


def test_refusals_are_one_line_with_the_place():
    out = {"outcomes": [{"place": "nft on eth1 (namespace x)", "action": "failed",
                         "messages": ["device `eth1` does not exist"]},
                        {"place": "nft on eth0 (namespace x)", "action": "loaded",
                         "messages": []}]}
    assert pfc_fleet.pfc_refusal({"stdout": json.dumps(out), "rc": 1}) == \
        "nft on eth1 (namespace x): device `eth1` does not exist"
    assert pfc_fleet.pfc_refusal({"stdout": '{"error": "pfc.conf:3: bad"}'}) == \
        "pfc.conf:3: bad"
    assert pfc_fleet.pfc_refusal({"stdout": "", "stderr": "a\nTraceback\n", "rc": 70}) == \
        "Traceback"
    assert pfc_fleet.pfc_changed('{"changed": false}') is False
    assert pfc_fleet.pfc_changed("not json") is True


def test_net_admin_alone_applies_in_the_current_namespace(monkeypatch):
    """The container's nft/iptables case: pfc asked CAP_SYS_ADMIN for the namespace it
    runs in (apply names it), though it only needs it to enter another one."""
    monkeypatch.setattr(deploy_base, "effective_caps", lambda: {deploy_base.CAP_NET_ADMIN})
    deploy_base.check_privileges("nft", deploy_base.current_netns(), "load")
    with pytest.raises(deploy_base.LoadError, match="CAP_SYS_ADMIN"):
        deploy_base.check_privileges("nft", "some-other-namespace", "load")


def test_the_manifest_runs_the_built_image_unprivileged():
    """Offline (tests/tools/test_fleet_image.py runs the image with these settings)."""
    (ds,) = list(yaml.safe_load_all((ROOT / "packaging/kubernetes/pfc.yaml").read_text()))
    version = re.search(r'^version = "(.*)"', (ROOT / "pyproject.toml").read_text(),
                        re.M).group(1)
    spec = ds["spec"]["template"]["spec"]
    for c in spec["initContainers"] + spec["containers"]:
        assert c["image"] == f"localhost/pfc:{version}"  # packaging/image/build's tag
        assert c["securityContext"]["privileged"] is False
        assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]


def test_the_rendered_config_escapes_every_value():
    """pfc.conf.j2 as Ansible renders it (its to_json is json.dumps): quotes,
    backslashes, newlines and non-ASCII in a value stay that value in TOML."""
    import tomllib

    import jinja2
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters["to_json"] = json.dumps
    template = env.from_string(
        (ANSIBLE / "roles/pfc/templates/pfc.conf.j2").read_text())
    odd = 'a"b\\c\nd\u00e9 = "x"'
    text = template.render(pfc_unlisted="keep", pfc_policies=[
        {"file": odd, "dev": "eth0", "target": "nft"}])
    conf = tomllib.loads(text)
    assert conf == {"unlisted": "keep",
                    "policy": [{"file": odd, "dev": "eth0", "target": "nft"}]}
