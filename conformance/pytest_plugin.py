"""pytest plugin (entry point ``pytest11``): ``pytest --pyargs posenc.conformance --posenc-backend B``.

Each conformance check becomes one test item, with the same ids as the CLI's JSON report;
unsupported capabilities are skipped and expectations become xfail.
"""

from __future__ import annotations

from typing import Any

import pytest

from posenc import params


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("posenc", "posenc conformance")
    group.addoption("--posenc-backend", action="append", default=[], metavar="B",
                    help="backend to check (repeatable; default: every installed backend)")
    group.addoption("--posenc-encoding", action="append", default=[], metavar="ID")
    group.addoption("--posenc-dtype", action="append", default=[], metavar="D")
    group.addoption("--posenc-mode", action="append", default=[], choices=["eager", "compiled"])
    group.addoption("--posenc-device", default="cpu")
    group.addoption("--posenc-max-examples", type=params.option("int", minimum=1), default=25)
    group.addoption("--posenc-expectations", default=None, metavar="PATH")
    group.addoption("--posenc-precision", default=None,
                    choices=["exact", "conventional", "reduced"],
                    help="precision profile to meet (default: the posenc_precision ini value, "
                         "else exact)")
    group.addoption("--posenc-include-posenc-code", action="store_true",
                    help="check posenc's own code for encodings an override backend lacks")
    from posenc.backends.backend import SETTINGS

    group.addoption("--posenc-matmul-precision", default=None,
                    choices=SETTINGS["matmul_precision"],
                    help="float32 matmul precision the code under test runs at (default: as "
                         "the caller has it; as `posenc conformance --matmul-precision`)")
    parser.addini("posenc_precision", "precision profile: exact, conventional or reduced",
                  default="exact")
    group.addoption("--posenc-shard", default=None, metavar="K/N",
                    help="only shard K of N of the plan (as `posenc conformance --shard`)")


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist's mark, registered here too so that runs without xdist do not warn
    config.addinivalue_line("markers", "xdist_group(name): run with other items of the group "
                                       "in one pytest-xdist worker (--dist loadgroup)")
    if config.getoption("posenc_shard", None):
        from posenc.conformance.shard import parse_shard
        from posenc.errors import PosencError

        try:
            config.stash[_SHARD] = parse_shard(config.getoption("posenc_shard"))
        except PosencError as exc:
            raise pytest.UsageError(str(exc).replace("--shard", "--posenc-shard")) from None


def _options(config: pytest.Config) -> Any:
    from posenc.conformance.cli.options import build_options

    get = config.getoption
    return build_options(
        backends=get("posenc_backend"), encodings=get("posenc_encoding"),
        dtypes=get("posenc_dtype"), modes=get("posenc_mode"), device=get("posenc_device"),
        max_examples=get("posenc_max_examples"), expectations=get("posenc_expectations"),
        precision=get("posenc_precision") or config.getini("posenc_precision"),
        include_posenc_code=get("posenc_include_posenc_code"),
        matmul_precision=get("posenc_matmul_precision"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "posenc_check" not in metafunc.fixturenames:
        return
    from posenc.conformance import shard
    from posenc.conformance.runner import Runner

    runner = Runner(_options(metafunc.config))
    checks = runner.plan()
    if _SHARD in metafunc.config.stash:
        checks = shard.select(checks, *metafunc.config.stash[_SHARD],
                              max_examples=runner.options.max_examples)
    metafunc.config.stash[_RUNNER] = runner
    # one group (backend/device/dtype/mode/encoding) shares compiled functions: under
    # `pytest -n N --dist loadgroup` it stays in one worker
    params = [pytest.param(c, id=c.id,
                           marks=pytest.mark.xdist_group("/".join(shard.group_key(c))))
              for c in checks]
    metafunc.parametrize("posenc_check", params)


_RUNNER = pytest.StashKey[Any]()
_SHARD = pytest.StashKey[tuple[int, int]]()


@pytest.fixture(scope="session")
def posenc_runner(request: pytest.FixtureRequest) -> Any:
    runner = request.config.stash[_RUNNER]
    yield runner
    runner.close()
