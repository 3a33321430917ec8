"""The container image (#27), built here and run: packaging/image/build makes it from
Debian packages with Debian's own tools (the Debian 12 root of the .deb's test, cached by
mmdebstrap, turned into a base by ``podman import``; ``podman build`` installs pfc_*.deb
with apt), then the image runs ``pfc apply`` the way packaging/kubernetes/pfc.yaml runs it
(its capabilities, its mounts, the host's network: here a namespace's, ``--network
ns:/run/netns/NAME``) and must leave the namespace's kernel state as the host-installed pfc
leaves another namespace's.

Cache: the image is kept by podman, labelled with a digest of the checkout's files; it is
rebuilt (the .deb and the image: 56 s at load 6, 135 s at load 16) only when they change;
the .deb is shared with tests/tools/test_install_deb.py. The base is imported once per
Debian root (~70 s). The tests themselves: 12 s at load 6. A cold machine adds the Debian
root (tests/tools/test_install_deb.py: ~15 minutes).
"""

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

from pfc.deploy.base import effective_caps
from tests.paths import ROOT
from tests.tools.test_install_deb import (
    SYSTEM_PATH,
    build_deb,
    debian12_root,
    sh,
    source_digest,
)

IMAGE = "localhost/pfc:0.1.0"
MANIFEST = ROOT / "packaging" / "kubernetes" / "pfc.yaml"
LABEL = "org.pfc.source"
TOOLS = ("podman", "dpkg-buildpackage", "dh", "mmdebstrap", "unshare", "ip")
POLICY = "count udp\ndrop udp dport 1001\n"
TARGETS = ("nft", "iptables", "xdp", "tc")
CAP_SYS_RESOURCE = 24

HYBRID_CGROUPS = os.path.ismount("/sys/fs/cgroup/unified")  # v1 controllers + cgroup2

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(
        os.geteuid() != 0 or any(shutil.which(t, path=SYSTEM_PATH) is None for t in TOOLS),
        reason="needs root and podman with Debian's packaging tools: apt install podman "
               "mmdebstrap debhelper dh-python pybuild-plugin-pyproject (scripts/setup)"),
    pytest.mark.skipif(HYBRID_CGROUPS and shutil.which("runc", path=SYSTEM_PATH) is None,
                       reason="hybrid cgroups, which crun refuses: apt install runc")]


def manifest() -> dict:
    (ds,) = list(yaml.safe_load_all(MANIFEST.read_text()))
    return ds


def init_container() -> dict:
    return manifest()["spec"]["template"]["spec"]["initContainers"][0]


def podman_conf(where: Path) -> dict:
    """CONTAINERS_CONF for what this machine lacks, and only that: crun refuses hybrid
    cgroups (v1 controllers beside a cgroup2 mount), runc does not; without
    CAP_SYS_RESOURCE podman cannot raise the container's limits to its defaults (nofile
    1048576), so they are lowered instead."""
    lines = []
    if CAP_SYS_RESOURCE not in effective_caps():
        lines += ["[containers]", 'default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]']
    if HYBRID_CGROUPS:
        lines += ["[engine]", 'runtime = "runc"']
    if not lines:
        return {}
    conf = where / "containers.conf"
    conf.write_text("\n".join(lines) + "\n")
    return {"CONTAINERS_CONF": str(conf)}


def inspect(env: dict) -> dict | None:
    done = subprocess.run(["podman", "image", "inspect", IMAGE], capture_output=True,
                          text=True, env={"PATH": SYSTEM_PATH} | env)
    return json.loads(done.stdout)[0] if done.returncode == 0 else None


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[dict, dict]:
    """(podman's inspection of the image, the environment podman runs with)."""
    env = podman_conf(tmp_path_factory.mktemp("podman"))
    digest = source_digest()
    old = inspect(env)
    if old is None or (old["Config"].get("Labels") or {}).get(LABEL) != digest:
        deb = build_deb(tmp_path_factory.mktemp("deb"))
        out = sh([ROOT / "packaging" / "image" / "build", "--base-tar", debian12_root(),
                  "--label", f"{LABEL}={digest}", deb], **env).stdout
        assert out.split()[-1] == IMAGE
        if old is not None:  # the image it replaced, untagged now
            subprocess.run(["podman", "rmi", old["Id"]], capture_output=True,
                           env={"PATH": SYSTEM_PATH} | env)
    return inspect(env), env


class Host:
    """A network namespace with a veth ``eth0``, and the directories the manifest
    mounts from a node (the ConfigMap's /etc/pfc, /run/pfc, /var/lib/pfc, the
    xtables lock) in ``dirs``."""

    def __init__(self, name: str, base: Path, targets=TARGETS):
        self.name, self.base = name, base
        subprocess.run(["ip", "netns", "add", name], check=True)
        subprocess.run(["ip", "-n", name, "link", "add", "eth0", "type", "veth", "peer",
                        "name", "peer0"], check=True)
        for dev in ("eth0", "peer0", "lo"):
            subprocess.run(["ip", "-n", name, "link", "set", dev, "up"], check=True)
        self.dirs = {"config": base / "etc", "run": base / "run", "lib": base / "lib",
                     "xtables-lock": base / "xtables.lock"}
        for key in ("config", "run", "lib"):
            self.dirs[key].mkdir(parents=True)
        self.dirs["xtables-lock"].touch()
        (base / "etc" / "edge.pf").write_text(POLICY)
        (base / "etc" / "pfc.conf").write_text("".join(
            f'[[policy]]\nfile = "edge.pf"\ndev = "eth0"\ntarget = "{t}"\n\n' for t in targets))

    def run(self, env: dict, *args: str, caps: list[str] | None = None
            ) -> subprocess.CompletedProcess:
        """The image as the manifest's init container runs, with ``args`` for its
        args and ``caps`` (default: the manifest's) added to none."""
        spec = init_container()
        security = spec["securityContext"]
        caps = security["capabilities"]["add"] if caps is None else caps
        argv = ["podman", "run", "--rm", f"--network=ns:/run/netns/{self.name}",
                "--cap-drop=all", *(f"--cap-add={c}" for c in caps)]
        if security.get("allowPrivilegeEscalation") is False:
            argv.append("--security-opt=no-new-privileges")
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}  # podman's own
        for m in spec["volumeMounts"]:
            ro = ":ro" if m.get("readOnly") else ""
            argv += ["-v", f"{self.dirs[m['name']]}:{m['mountPath']}{ro}"]
        return subprocess.run(argv + [IMAGE, *args], capture_output=True, text=True,
                              env={"PATH": SYSTEM_PATH} | env)

    def host_pfc(self, *args: str) -> subprocess.CompletedProcess:
        """The pfc of this checkout's venv, as installed on a host."""
        pfc = Path(sys.executable).with_name("pfc")
        env = os.environ | {"PFC_STATE_DIR": str(self.dirs["run"]),
                            "PFC_LIB_DIR": str(self.dirs["lib"])}
        return subprocess.run(["ip", "netns", "exec", self.name, pfc, *args, "--config",
                               self.dirs["config"] / "pfc.conf"] if args[0] == "apply" else
                              ["ip", "netns", "exec", self.name, pfc, *args],
                              capture_output=True, text=True, env=env)

    def kernel(self) -> dict:
        """What the namespace's kernel holds, in words that do not depend on ids."""
        def out(*argv):
            return subprocess.run(["ip", "netns", "exec", self.name, *argv], check=True,
                                  capture_output=True, text=True).stdout
        ipt = [ln for ln in out("iptables-save").splitlines() if ln[:1] not in "#:"]
        nft = re.sub(r"packets \d+ bytes \d+", "packets N bytes N", out("nft", "list",
                                                                         "ruleset"))
        return {"nft": nft, "iptables": ipt,
                "xdp": re.findall(r"prog/xdp id \d+ name (\S+) tag (\w+)",
                                  out("ip", "-d", "link", "show", "eth0")),
                "tc": re.findall(r"(pfc_\w+)\S* .*?tag (\w+)",
                                 out("tc", "filter", "show", "dev", "eth0", "ingress"))}

    def close(self):
        subprocess.run(["ip", "netns", "del", self.name], check=False)


@pytest.fixture
def hosts(tmp_path):
    made: list[Host] = []

    def make(tag: str, targets=TARGETS) -> Host:
        made.append(Host(f"pfcimg-{os.getpid()}-{tag}", tmp_path / tag, targets))
        return made[-1]
    yield make
    for h in made:
        h.close()


def loaded(status: subprocess.CompletedProcess) -> list[tuple]:
    assert status.returncode == 0, status.stdout + status.stderr
    return sorted((e["target"], e["dev"], e["sha256"], e["health"], len(e["rules"]))
                  for e in json.loads(status.stdout)["loaded"])


@pytest.mark.timeout(3600)
def test_the_image_applies_as_the_host_pfc_does(image, hosts):
    """Every target, the manifest's capabilities and mounts: the container's namespace
    ends up as the host pfc's (nft ruleset, iptables rules, the XDP and tc programs'
    tags: the same clang and libbpf of Debian 12), pfc's records say the same, and a
    second run of the container changes nothing."""
    _, env = image
    pod, host = hosts("pod"), hosts("host")
    done = pod.run(env, *init_container()["args"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": loaded") == len(TARGETS), done.stdout
    done = host.host_pfc("apply")
    assert done.returncode == 0, done.stdout + done.stderr
    assert pod.kernel() == host.kernel()
    assert pod.kernel()["xdp"] and pod.kernel()["tc"] and "drop" in pod.kernel()["nft"]
    assert loaded(pod.run(env, "status", "--format", "json")) == \
        loaded(host.host_pfc("status", "--format", "json"))
    again = pod.run(env, "apply")
    assert again.returncode == 0 and "nothing to change" in again.stdout, again.stdout


def test_the_manifest_names_the_image_and_its_entrypoint(image):
    info, env = image
    ds = manifest()
    spec = ds["spec"]["template"]["spec"]
    assert (ds["apiVersion"], ds["kind"]) == ("apps/v1", "DaemonSet")
    assert ds["spec"]["selector"]["matchLabels"].items() <= \
        ds["spec"]["template"]["metadata"]["labels"].items()
    assert spec["hostNetwork"] is True
    config = info["Config"]
    assert config["Entrypoint"] == ["/usr/bin/pfc"] and config["Cmd"] == ["apply"]
    env_of_image = dict(v.split("=", 1) for v in config["Env"])
    volumes = {v["name"]: v for v in spec["volumes"]}
    for c in spec["initContainers"] + spec["containers"]:
        assert c["image"] == IMAGE
        security = c["securityContext"]
        assert security["privileged"] is False
        assert security["capabilities"] == {"drop": ["ALL"],
                                            "add": ["NET_ADMIN", "SYS_ADMIN"]}
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert {m["name"] for m in mounts.values()} <= set(volumes)
        # what the image's pfc reads and writes is what the node provides
        assert str(Path(env_of_image["PFC_CONFIG"]).parent) in mounts
        assert mounts["/etc/pfc"].get("readOnly") is True
        assert {env_of_image["PFC_STATE_DIR"], env_of_image["PFC_LIB_DIR"]} <= set(mounts)
        for path, m in mounts.items():
            if "hostPath" in volumes[m["name"]]:
                assert volumes[m["name"]]["hostPath"]["path"] == path
    assert "command" not in spec["initContainers"][0]  # the image's entrypoint: pfc
    (main,) = spec["containers"]
    shell, flag, script = main["command"]
    check = subprocess.run(["podman", "run", "--rm", "--network=none", f"--entrypoint={shell}",
                            IMAGE, "-n", flag, script], capture_output=True, text=True,
                           env={"PATH": SYSTEM_PATH} | env)
    assert check.returncode == 0, check.stderr  # the shell is there, the script parses
    assert re.search(r"\bdo (\S+) apply; done", script).group(1) == "/usr/bin/pfc"


def test_each_capability_is_needed_and_sys_admin_only_for_ebpf(image, hosts):
    """NET_ADMIN alone applies nft and iptables policies and reads their status (pfc
    asks for SYS_ADMIN only to enter another namespace); xdp and tc need SYS_ADMIN: with
    CAP_BPF and CAP_PERFMON instead, the runtime's seccomp profile refuses bpf() and
    the load fails, keeping nothing half-applied."""
    _, env = image
    nf = hosts("nf", ("nft", "iptables"))
    done = nf.run(env, "apply", caps=["NET_ADMIN"])
    assert done.returncode == 0 and done.stdout.count(": loaded") == 2, done.stdout + done.stderr
    seen = nf.run(env, "status", caps=["NET_ADMIN"])  # no eBPF loaded: no CAP_BPF asked
    assert seen.returncode == 0 and "nft" in seen.stdout, seen.stdout + seen.stderr
    ebpf = hosts("ebpf", ("xdp",))
    done = ebpf.run(env, "apply", caps=["NET_ADMIN", "BPF", "PERFMON"])
    assert done.returncode == 1 and "FAILED" in done.stdout, done.stdout + done.stderr
    assert "Operation not permitted" in done.stdout + done.stderr
    assert ebpf.kernel()["xdp"] == []
    done = nf.run(env, "apply", caps=[])
    assert done.returncode == 1 and "CAP_NET_ADMIN" in done.stdout + done.stderr
