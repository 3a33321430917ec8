"""pfc installed as a user installs it: from the wheel, from the sdist, with pipx (#27, #29).

Once per session a copy of the checkout's files (``git ls-files``, uncommitted changes
included: nothing is written into the checkout) is built with ``python -m build`` (the
sdist, then the wheel from the sdist), and ``pip wheel`` puts every dependency in a
wheelhouse (pip's cache makes that quick after the first run). Each install is a fresh
venv in a tmp directory that installs from the wheelhouse only (``--no-index``). Every
command then runs with its working directory outside the checkout and without
PYTHONPATH, so the source tree cannot be imported: only the installed files.

docs/operate.md ("Installing pfc") shows these commands as run here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pfc.cli.main import COMMANDS
from pfc.kernel.netns import missing_privileges
from tests.paths import EXAMPLES, ROOT

TARGETS = ("cbpf", "socket", "tc", "xdp", "nft", "iptables", "ir")
DEBIAN_NFTABLES = "/usr/lib/python3/dist-packages/nftables/__init__.py"
kernel = pytest.mark.skipif(missing_privileges() is not None,
                            reason=str(missing_privileges()))


def run(argv: list, cwd: Path, env: dict | None = None, check: bool = True,
        stdin: str | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env or clean_env(),
                          capture_output=True, text=True, input=stdin)
    if check and proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, argv))} exited {proc.returncode}\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def clean_env(bin_dir: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, no venv of the test run."""
    path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = {"PATH": f"{bin_dir}:{path}" if bin_dir else path, "HOME": os.environ["HOME"],
           "LANG": "C.UTF-8", "TMPDIR": os.environ.get("TMPDIR", "/tmp")}
    return env | extra


# ---------------------------------------------------------------------------- builds

@pytest.fixture(scope="session")
def dists(tmp_path_factory) -> dict[str, Path]:
    """The sdist, the wheel (built from the sdist), a wheelhouse of every dependency
    (plus the build requirements and pip) and the copy of the checkout they came from."""
    base = tmp_path_factory.mktemp("install")
    src, dist, wheels = base / "src", base / "dist", base / "wheels"
    files = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], ROOT).stdout
    for rel in filter(None, files.split("\0")):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    env = clean_env()
    run([sys.executable, "-m", "build", "--outdir", dist, src], base, env)
    wheel, = dist.glob("pfc-*.whl")
    sdist, = dist.glob("pfc-*.tar.gz")
    run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", wheels, wheel,
         "setuptools>=77", "wheel", "pip", "pipx"], base, env)
    return {"src": src, "wheel": wheel, "sdist": sdist, "wheels": wheels, "base": base}


# What the tests add to a user's `pip install`: the wheelhouse instead of an index, and
# no byte-compiling of the ~40 MB of dependencies (most of an install's time here).
PIP_OFFLINE = ("--no-index", "--find-links", "{wheels}", "--no-compile")


def _pip_flags(dists: dict) -> list[str]:
    return [f.format(wheels=dists["wheels"]) for f in PIP_OFFLINE]


def _venv_install(dists: dict, artifact: Path | str, where: Path) -> Path:
    """``python3 -m venv VENV && VENV/bin/pip install ARTIFACT`` (plus PIP_OFFLINE)."""
    run([_base_python(), "-m", "venv", where], dists["base"])
    run([where / "bin" / "pip", "install", "-q", *_pip_flags(dists), artifact],
        dists["base"])
    return where / "bin"


def _pipx_install(dists: dict, where: Path) -> Path:
    """``pipx install .`` in the copy of the checkout, PIPX_HOME and PIPX_BIN_DIR in tmp;
    pipx itself is Debian's if installed, else installed into a venv of its own."""
    pipx = shutil.which("pipx")
    if pipx is None:
        tool = _venv_install(dists, "pipx", where / "pipx-tool")
        pipx = tool / "pipx"
    env = clean_env(PIPX_HOME=str(where / "pipx-home"), PIPX_BIN_DIR=str(where / "bin"),
                    PIP_NO_INDEX="1", PIP_FIND_LINKS=str(dists["wheels"]), PIP_NO_COMPILE="1")
    run([pipx, "install", "."], dists["src"], env)
    return where / "bin"


def _base_python() -> str:
    """The interpreter the test venv was made from (a venv of a venv is the same)."""
    return getattr(sys, "_base_executable", sys.executable)


class Install:
    """An installed pfc: its bin directory, its python, and a working directory outside
    the checkout holding a copy of examples/."""

    def __init__(self, kind: str, bin_dir: Path, python: Path, work: Path):
        self.kind, self.bin, self.python, self.work = kind, bin_dir, python, work
        self.env = clean_env(bin_dir)

    def pfc(self, *args, check: bool = True, stdin: str | None = None):
        return run([self.bin / "pfc", *args], self.work, self.env, check, stdin)

    def py(self, code: str, *args) -> subprocess.CompletedProcess:
        return run([self.python, "-c", code, *args], self.work, self.env)


@pytest.fixture(scope="module", params=["wheel", "sdist", "pipx"])
def install(request, dists, tmp_path_factory) -> Install:
    where = tmp_path_factory.mktemp(request.param)
    if request.param == "pipx":
        bin_dir = _pipx_install(dists, where)
        python = bin_dir.joinpath("pfc").resolve().parent / "python"
    else:
        bin_dir = _venv_install(dists, dists[request.param], where / "venv")
        python = bin_dir / "python"
    work = where / "work"
    shutil.copytree(ROOT / "examples", work / "examples")
    return Install(request.param, bin_dir, python, work)


# ----------------------------------------------------------------------------- tests

def test_the_installed_pfc_runs_from_its_own_files(install):
    out = install.py("import pfc, sys; print(pfc.__file__); print(sys.path)").stdout
    location = Path(out.splitlines()[0])
    assert ROOT not in location.parents, location
    assert str(ROOT) not in out
    assert install.pfc("--version").stdout.strip() == "pfc 0.1.0"


def test_every_command_has_help(install):
    """`pfc --help`, `pfc COMMAND --help` for each, `python -m pfc --help`: all at once."""
    pfc = str(install.bin / "pfc")
    expected = {(pfc, "--help"): "usage: pfc [",
                (str(install.python), "-m", "pfc", "--help"): "usage: pfc ["}
    expected |= {(pfc, c.name, "--help"): f"usage: pfc {c.name} " for c in COMMANDS}
    procs = {argv: subprocess.Popen(argv, cwd=install.work, env=install.env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for argv in expected}
    for argv, proc in procs.items():
        out, err = proc.communicate()
        usage = expected[argv]
        assert (proc.returncode, out[:len(usage)]) == (0, usage), (argv, err)


def _module_names() -> list[str]:
    """Every module of the source tree, as the name it has once installed."""
    names = []
    for package, folder in (("pfc", ROOT / "compiler"), ("pfc.backends", ROOT / "backends")):
        for path in sorted(folder.rglob("*.py")):
            parts = [p for p in path.relative_to(folder).with_suffix("").parts
                     if p != "__init__"]
            names.append(".".join([package, *parts]))
    return names


IMPORT_ALL = """
import importlib, importlib.util, json, sys
bad = {}
for name in sys.argv[1:]:
    try:
        if name.endswith(".__main__"):  # importing it would run it
            assert importlib.util.find_spec(name) is not None, "not installed"
        else:
            importlib.import_module(name)
    except BaseException as exc:
        bad[name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(bad))
"""


def test_every_module_of_the_source_tree_imports(install):
    names = _module_names()
    assert len(names) > 150 and "pfc.frontend.options.check" in names
    bad = json.loads(install.py(IMPORT_ALL, *names).stdout)
    assert bad == {}


def test_every_example_checks_and_compiles_for_every_target(install):
    examples = [f"examples/{p.name}" for p in EXAMPLES]
    install.pfc("check", *examples)
    # The matrix runs the installed `pfc` entry point in one process (70 processes
    # would take a minute); one real process per target writes its files too.
    results = json.loads(install.py(COMPILE_ALL, *examples).stdout)
    assert len(results) == len(examples) * len(TARGETS)
    for example, target, code, err in results:
        assert code == 0 or (code == 1 and "cannot express" in err), (example, target, err)
    for target in TARGETS:
        proc = install.pfc("compile", "examples/edge-drop.pf", "--target", target,
                           "-o", f"out/{target}/")
        assert "wrote " in proc.stdout + proc.stderr
    assert (install.work / "out" / "xdp" / "edge-drop.xdp.o").stat().st_size > 0


COMPILE_ALL = f"""
import contextlib, io, json, sys
from pfc.cli.main import main
results = []
for example in sys.argv[1:]:
    for target in {TARGETS!r}:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["compile", example, "--target", target, "-o", "matrix/"])
        results.append((example, target, code, err.getvalue()))
print(json.dumps(results))
"""


def _lsp_send(proc: subprocess.Popen, message: dict) -> None:
    body = json.dumps(message).encode()
    proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    proc.stdin.flush()


def _lsp_reply(proc: subprocess.Popen, id_: int) -> dict:
    """The response to request ``id_`` (notifications before it are skipped)."""
    while True:
        length = None
        while (line := proc.stdout.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        assert length is not None, f"server closed stdout: {proc.stderr.read()!r}"
        message = json.loads(proc.stdout.read(length))
        if message.get("id") == id_:
            return message


def test_language_server_initializes_over_stdio(install):
    proc = subprocess.Popen([install.bin / "pfc", "lsp"], cwd=install.work, env=install.env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        _lsp_send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"processId": None, "rootUri": None, "capabilities": {}}})
        reply = _lsp_reply(proc, 1)
        assert "textDocumentSync" in reply["result"]["capabilities"], reply
        assert reply["result"]["serverInfo"]["name"].startswith("pfc")
        _lsp_send(proc, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
        _lsp_send(proc, {"jsonrpc": "2.0", "id": 2, "method": "shutdown"})
        assert _lsp_reply(proc, 2)["result"] is None
        _lsp_send(proc, {"jsonrpc": "2.0", "method": "exit"})
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()


NFTABLES_ALONE = """
import importlib, sys
from pfc.kernel import nftlib
print(nftlib.load().__file__)
print(any("dist-packages" in p for p in sys.path))
try:
    import apt_pkg  # Debian's python3-apt, beside nftables: it must stay unseen
    print("apt_pkg visible")
except ImportError:
    print("apt_pkg hidden")
"""


@pytest.mark.skipif(not os.path.exists(DEBIAN_NFTABLES),
                    reason=f"Debian's python3-nftables is not installed ({DEBIAN_NFTABLES})")
def test_debian_nftables_is_found_and_nothing_else(install):
    """m4: a venv does not see Debian's dist-packages; pfc loads that one package."""
    plain = run([install.python, "-c", "import nftables"], install.work, install.env,
                check=False)
    assert "No module named 'nftables'" in plain.stderr
    assert install.py(NFTABLES_ALONE).stdout.split("\n")[:3] == [
        DEBIAN_NFTABLES, "False", "apt_pkg hidden"]


@pytest.mark.kernel
@kernel
def test_verify_in_the_kernel(install):
    """nft runs through Debian's python3-nftables, xdp through clang and the
    installed templates."""
    out = install.pfc("verify", "examples/edge-drop.pf", "--targets", "nft,xdp",
                      "--frames", "200", "--format", "json").stdout
    rows = json.loads(out)["files"][0]["targets"]
    assert [(r["target"], r["status"]) for r in rows] == [("nft", "agree"), ("xdp", "agree")]
