"""Isolated, pinned environments for the peers whose pins conflict (``nox -s peers`` runs
every group; ``nox -s ggml`` one).

Each group is a requirements file ``peers/envs/<group>.txt``. Its comment lines may carry
two directives: ``# peers: NAME ...`` (the ``peer:NAME`` backends the group runs) and
``# pip: ARGS`` (a pip command run after the requirements, such as
``# pip: uninstall -y torchvision torchaudio``). A session installs torch 2.13.0 (the CPU
build) first, so that no requirement brings in another torch, then the group's requirements,
then posenc itself with ``--no-deps`` and only its light dependencies, and runs: the engine
tests of the group (``tests/peers/test_engines.py``, which skip without the engine), then the
scoreboard's run of each of the group's peers (``posenc peers --peer NAME --reports
.nox/reports``), writing ``.nox/reports/peer-NAME.json``. A peer that is still missing is
reported with the pip package that brings it. ``posenc peers --from-reports .nox/reports``
(in the main environment) then writes docs/peers.md from those reports and the peers
installed there. None of this runs in CI (``.ci/run``): engine tests skip there, saying why.

The engine sweeps (``nox -s sweeps``): each ``peers/sweeps/<engine>.txt`` is the pinned
environment of ``posenc sweep <engine>`` (session ``sweep-<engine>``), which writes
``.nox/reports/sweep-<engine>.json``, held to the transformers sweep run in that environment
(``truth-<engine>.json``); ``sweeps-page`` then sweeps transformers in the calling environment
and merges the reports into docs/engines.md (``posenc sweep --from-reports .nox/reports``).
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

import nox
import tomllib

ROOT = Path(__file__).parent
ENVS = ROOT / "peers" / "envs"
TORCH = "torch==2.13.0"
REPORTS = ROOT / ".nox" / "reports"

nox.options.sessions = ["peers"]
nox.options.reuse_existing_virtualenvs = True


def groups() -> list[str]:
    return sorted(path.stem for path in ENVS.glob("*.txt"))


def directives(requirements: Path) -> tuple[list[str], list[list[str]]]:
    """(the peers a requirements file's group runs, the pip commands to run after it)."""
    peers: list[str] = []
    steps: list[list[str]] = []
    for line in requirements.read_text(encoding="utf-8").splitlines():
        text = line.strip().lstrip("#").strip() if line.lstrip().startswith("#") else ""
        if text.startswith("peers:"):
            peers += text.removeprefix("peers:").split()
        elif text.startswith("pip:"):
            steps.append(shlex.split(text.removeprefix("pip:")))
    return peers, steps


def light_dependencies() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [*project["dependencies"], "pytest>=8"]


def install(session: nox.Session, requirements: Path, steps: Sequence[list[str]] = ()) -> None:
    """torch (CPU), the pinned requirements and their pip steps, then posenc and its light
    dependencies: the environment of a peer group or an engine sweep."""
    session.install(TORCH)
    session.install("-r", str(requirements))
    for step in steps:
        session.run("python", "-m", "pip", *step)
    # editable: the tests run from the checkout, whose posenc/ would shadow a wheel install
    session.install("--no-deps", "-e", ".")
    session.install(*light_dependencies())


def define(name: str, run: Callable[[nox.Session], None], doc: str) -> None:
    """A nox session ``name`` that calls ``run`` (one per peer group or engine sweep)."""
    @nox.session(name=name)
    def session(session: nox.Session) -> None:
        run(session)

    session.__doc__ = doc


def run_group(session: nox.Session, group: str) -> None:
    peers, steps = directives(ENVS / f"{group}.txt")
    install(session, ENVS / f"{group}.txt", steps)
    tests = [t for t in ("tests/peers/test_engines.py", f"tests/test_{group}_engine.py",
                         "tests/peers/test_peer_libraries.py")
             if (ROOT / t).exists()]
    session.run("python", "-m", "pytest", "-q", "-rs", *tests,
                "--rootdir", str(ROOT), "-p", "no:cacheprovider", "-k", group,
                success_codes=[0, 5])  # 5: a library group has no engine tests
    REPORTS.mkdir(parents=True, exist_ok=True)
    missing = []
    for peer in peers:
        code = ("from posenc.backends import get_backend\n"
                f"gone = get_backend('peer:{peer}').missing()\n"
                f"print(f'peer:{peer} needs the {{gone[0]}} module: pip install {{gone[1]}}' "
                "if gone else '', end='')")
        said = session.run("python", "-c", code, silent=True)
        if said:
            session.warn(said)
            missing.append(said)
            continue
        # the scoreboard's run of the peer (posenc peers --from-reports merges the reports)
        session.run("posenc", "peers", "--peer", peer, "--reports", str(REPORTS))
    if missing:
        session.error(f"group {group}: {'; '.join(missing)} (requirements in "
                      f"peers/envs/{group}.txt)")


for _group in groups():
    define(_group, functools.partial(run_group, group=_group),
           f"the {_group} peers: peers/envs/{_group}.txt, then its engine tests and peers")


@nox.session(venv_backend="none")
def peers(session: nox.Session) -> None:
    """Every peer group, each in its own environment."""
    for group in groups():
        session.notify(group)


# -- the engine sweeps (posenc sweep <engine>; docs/engines.md) ---------------------------------
SWEEP_ENVS = ROOT / "peers" / "sweeps"


def sweep_engines() -> list[str]:
    return sorted(path.stem for path in SWEEP_ENVS.glob("*.txt"))


def run_sweep(session: nox.Session, engine: str) -> None:
    """The engine's pinned environment, the transformers sweep's report (the pairing and the
    unrotated layers the engine is held to), the engine's sweep and its tests."""
    install(session, SWEEP_ENVS / f"{engine}.txt", directives(SWEEP_ENVS / f"{engine}.txt")[1])
    REPORTS.mkdir(parents=True, exist_ok=True)
    env = llama_cpp_source(session) if engine == "llama.cpp" else {}
    # the truth from the transformers pinned beside the engine (vLLM's is older than the
    # others'); the page's transformers column is sweeps-page's own run
    truth = REPORTS / f"truth-{engine}.json"
    session.run("posenc", "sweep", "transformers", "--json", str(truth),
                "--out", str(REPORTS / f"truth-{engine}"))
    session.run("posenc", "sweep", engine, "--truth", str(truth), "--out", str(REPORTS), env=env)
    own = f"tests/peers/test_{engine.replace('-', '_').replace('.', '_')}_sweep.py"
    tests = ["tests/peers/test_engine_sweeps.py", *([own] if (ROOT / own).exists() else [])]
    # the page's freshness is sweeps-page's to restore, after every engine has run
    session.run("python", "-m", "pytest", "-q", "-rs", *tests, "--deselect",
                "tests/peers/test_engine_sweeps.py::test_engines_page_is_fresh",
                "--rootdir", str(ROOT), "-p", "no:cacheprovider")


def llama_cpp_source(session: nox.Session) -> dict[str, str]:
    """llama.cpp's converter and C++ sources as llama-cpp-python 0.3.36's sdist vendors them,
    unpacked under .nox (the sweep reads them from POSENC_LLAMA_CPP)."""
    folder = ROOT / ".nox" / "llama-cpp-src"
    vendor = folder / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp"
    if not vendor.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        session.run("pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(folder),
                    "llama-cpp-python==0.3.36")
        session.run("python", "-c", "import sys, tarfile; tarfile.open(sys.argv[1]).extractall("
                    "sys.argv[2], filter='data')", str(folder / "llama_cpp_python-0.3.36.tar.gz"),
                    str(folder))
    return {"POSENC_LLAMA_CPP": str(vendor)}


for _engine in sweep_engines():
    define(f"sweep-{_engine}", functools.partial(run_sweep, engine=_engine),
           f"posenc sweep {_engine} in peers/sweeps/{_engine}.txt's environment")


@nox.session(venv_backend="none")
def sweeps(session: nox.Session) -> None:
    """Every engine sweep, each in its own environment, then docs/engines.md from the reports."""
    for engine in sweep_engines():
        session.notify(f"sweep-{engine}")
    session.notify("sweeps-page")


@nox.session(name="sweeps-page", venv_backend="none")
def sweeps_page(session: nox.Session) -> None:
    """docs/engines.md from .nox/reports/sweep-*.json (posenc sweep --from-reports), with the
    transformers column swept here, in the calling environment (the project's own)."""
    session.run("posenc", "sweep", "transformers", "--json",
                str(REPORTS / "sweep-transformers.json"), "--out", str(REPORTS / "transformers"),
                external=True)
    session.run("posenc", "sweep", "--from-reports", str(REPORTS), "--out", "docs",
                external=True)
