"""The exhaustive tier's CI matrix (.github/workflows/exhaustive.yml): a valid workflow whose
shards are exactly 1..N of one plan, whose posenc commands parse, and whose merge refuses a
lost shard instead of reporting a smaller green matrix."""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from posenc import cli

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "exhaustive.yml"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


def _posenc_commands(workflow: dict) -> list[tuple[str, str]]:
    """(job, command line) of every run step that calls posenc, with the workflow's
    expressions replaced by a value they take."""
    shards = str(workflow["env"]["SHARDS"])
    out = []
    for job_name, job in workflow["jobs"].items():
        for step in job["steps"]:
            for line in str(step.get("run", "")).splitlines():
                line = " ".join(line.split())
                if not line.startswith("posenc "):
                    continue
                line = line.replace("${{ matrix.shard }}", "3").replace("${{ env.SHARDS }}",
                                                                        shards)
                assert "${{" not in line, f"{job_name}: an expression the test cannot fill: {line}"
                out.append((job_name, line))
    return out


def test_shard_matrix_is_every_shard_of_one_plan_once():
    workflow = _workflow()
    shards = int(workflow["env"]["SHARDS"])
    matrix = workflow["jobs"]["shard"]["strategy"]["matrix"]["shard"]
    assert sorted(matrix) == list(range(1, shards + 1))
    assert workflow["jobs"]["shard"]["strategy"]["fail-fast"] is False  # one red shard keeps the rest
    commands = dict(_posenc_commands(workflow))
    assert re.search(rf"--shard 3/{shards}\b", commands["shard"])
    assert "--exhaustive" in commands["shard"]
    assert f"--expect-shards {shards}" in commands["merge"]
    assert workflow["jobs"]["merge"]["needs"] == "shard"


def test_workflow_commands_parse_with_posencs_own_parser():
    commands = _posenc_commands(_workflow())
    assert len(commands) == 2
    parser = cli.build_parser()
    for _, line in commands:
        parser.parse_args(line.split()[1:])  # argparse exits 2 on an unknown option


def test_workflow_is_valid_for_github_actions():
    checker = shutil.which("check-jsonschema")
    if checker is None:
        pytest.skip("check-jsonschema not installed (it is in posenc's test extra)")
    done = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_workflow_passes_actionlint_where_installed():
    actionlint = shutil.which("actionlint")
    if actionlint is None:
        pytest.skip("actionlint not on PATH (no registry wheel of it installs offline)")
    done = subprocess.run([actionlint, str(WORKFLOW)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory) -> list[Path]:
    folder = tmp_path_factory.mktemp("shards")
    paths = []
    for k in (1, 2):
        path = folder / f"shard-{k}.json"
        rc = cli.main(["conformance", "--backend", "numpy", "--encoding", "alibi_slopes",
                       "--workers", "1", "-q", "--shard", f"{k}/2", "--json", str(path)])
        assert rc == 0
        paths.append(path)
    return paths


def test_merge_of_every_shard_writes_junit_with_every_check(two_shards, tmp_path, capsys):
    junit = tmp_path / "merged.xml"
    assert cli.main(["report", "merge", *map(str, two_shards), "--junit", str(junit),
                     "--expect-shards", "2"]) == 0
    merged_line = capsys.readouterr().out.strip().splitlines()[-1]
    total = int(re.search(r"(\d+) checks", merged_line)[1])
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert sum(int(s.get("tests")) for s in suites) == total > 0
    assert sum(len(s.findall("testcase")) for s in suites) == total


def test_merge_refuses_a_missing_shard_and_names_it(two_shards, tmp_path, capsys):
    rc = cli.main(["report", "merge", str(two_shards[0]), "--junit", str(tmp_path / "j.xml"),
                   "--expect-shards", "2"])
    assert rc == 2
    assert "missing shard(s) 2" in capsys.readouterr().err


def test_merge_refuses_a_shard_given_twice_and_the_wrong_count(two_shards, tmp_path, capsys):
    first = str(two_shards[0])
    assert cli.main(["report", "merge", first, first, *map(str, two_shards[1:]),
                     "-o", str(tmp_path / "m.json"), "--expect-shards", "2"]) == 2
    assert "shard 1 given twice" in capsys.readouterr().err
    assert cli.main(["report", "merge", *map(str, two_shards), "-o", str(tmp_path / "m.json"),
                     "--expect-shards", "3"]) == 2
    assert "the reports are shards of 2" in capsys.readouterr().err
