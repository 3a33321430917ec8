"""Fleet packaging: the Ansible role run with ``ansible-playbook -c local`` inside a
throw-away namespace (check mode → ``pfc apply --dry-run``), and the DaemonSet manifest
and Dockerfile checked offline (no cluster, no Docker engine here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_load import ROOT_REASON, policy_file, status
from tests.paths import ROOT

PLAYBOOK = ROOT / "packaging" / "ansible"
PLAYBOOK_BIN = Path(sys.executable).with_name("ansible-playbook")


def playbook(tmp_path: Path, dev: str) -> Path:
    policy_file(tmp_path, "count udp\ndrop udp dport 1001\n", "edge.pf")
    (tmp_path / "etc").mkdir()
    book = tmp_path / "site.yml"
    book.write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False, "roles": ["pfc"],
        "vars": {"pfc_bin": str(Path(sys.executable).with_name("pfc")),
                 "pfc_config": str(tmp_path / "etc/pfc.conf"),
                 "pfc_files": [{"src": str(tmp_path / "edge.pf"),
                                "dest": str(tmp_path / "etc/edge.pf")}],
                 "pfc_policies": [{"file": "edge.pf", "dev": dev, "target": "nft"}]}}]))
    return book


def run_playbook(lab, book: Path, *more: str) -> dict:
    env = os.environ | {"ANSIBLE_ROLES_PATH": str(PLAYBOOK / "roles"),
                        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
                        "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING":
                        "False", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False"}
    done = subprocess.run(["ip", "netns", "exec", lab.name, PLAYBOOK_BIN, "-c", "local",
                           "-i", "localhost,", str(book), *more],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    recap = re.search(r"^localhost\s*:\s*(.*)$", done.stdout, re.MULTILINE).group(1)
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap)}


@pytest.mark.kernel
@pytest.mark.skipif(ROOT_REASON is not None or not PLAYBOOK_BIN.exists(),
                    reason=ROOT_REASON or "ansible-core is not installed (test extras)")
def test_ansible_role_check_mode_is_a_dry_run(lab, tmp_path):
    book = playbook(tmp_path, lab.dut)
    policy_file(tmp_path / "etc", "", "pfc.conf")  # check mode renders no file
    stats = run_playbook(lab, book, "--check")
    assert stats["changed"] >= 1 and status(lab) == []  # nothing was loaded
    stats = run_playbook(lab, book)
    assert stats["changed"] >= 1 and [e["health"] for e in status(lab)] == ["ok"]
    assert "edge.pf" in (tmp_path / "etc/pfc.conf").read_text()
    stats = run_playbook(lab, book)
    assert stats["changed"] == 0  # pfc apply: nothing to change


def test_daemonset_manifest_has_what_pfc_needs():
    (ds,) = list(yaml.safe_load_all((ROOT / "packaging/kubernetes/pfc.yaml").read_text()))
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    assert ds["spec"]["selector"]["matchLabels"].items() <= \
        ds["spec"]["template"]["metadata"]["labels"].items()
    volumes = {v["name"]: v for v in spec["volumes"]}
    for c in spec["initContainers"] + spec["containers"]:
        assert c["securityContext"]["privileged"] is True and c["image"]
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        assert {"/sys/fs/bpf", "/etc/pfc", "/run/pfc", "/var/lib/pfc"} <= set(mounts)
        assert set(mounts.values()) <= set(volumes)
    assert volumes["bpffs"]["hostPath"]["path"] == "/sys/fs/bpf"
    assert spec["initContainers"][0]["args"] == ["apply"]


def test_dockerfile_parses_and_runs_pfc_apply():
    text = (ROOT / "packaging/Dockerfile").read_text()
    lines = [ln for ln in re.sub(r"\\\n", " ", text).splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    words = [ln.split()[0] for ln in lines]
    assert words[0] == "FROM" and set(words) <= {"FROM", "RUN", "WORKDIR", "COPY", "ENV",
                                                  "ENTRYPOINT", "CMD", "ARG", "LABEL"}
    assert json.loads(lines[words.index("ENTRYPOINT")].split(None, 1)[1]) == ["pfc"]
    assert json.loads(lines[words.index("CMD")].split(None, 1)[1]) == ["apply"]
    for tool in ("nftables", "iptables", "ipset", "clang", "libbpf1"):
        assert tool in text
    if shutil.which("hadolint"):
        assert subprocess.run(["hadolint", ROOT / "packaging/Dockerfile"]).returncode == 0
