"""deberta_bucket / deberta_scores under torch.compile with changing configurations and lengths."""

from __future__ import annotations

import pytest


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_torch_compile_buckets_and_scores_with_changing_configs() -> None:
    """The host-side threshold tables are constants of the graph: compiling for several
    configurations and lengths (dynamo then makes lengths symbolic) stays exact."""
    torch = pytest.importorskip("torch")
    import posenc

    rel = torch.arange(-700, 700)
    for params in ({}, {"clamp": "original"}, {"bucket_size": 18, "max_position": 17},
                   {"bucket_size": 8, "max_position": 16, "clamp": "original"}):
        compiled = torch.compile(lambda r, params=params: posenc.deberta_bucket(r, **params),
                                 fullgraph=True)
        torch.testing.assert_close(compiled(rel), posenc.deberta_bucket(rel, **params),
                                   rtol=0, atol=0)

    def scores(q, k, rel_k, rel_q):
        return posenc.deberta_scores(q, k, rel_k, rel_q, position_buckets=8,
                                     max_relative_positions=10)

    compiled = torch.compile(scores, fullgraph=True)
    tables = torch.randn(2, 16, 4, dtype=torch.float64)
    for q_len, k_len in ((5, 5), (7, 9), (13, 4)):
        q = torch.randn(2, q_len, 4, dtype=torch.float64)
        k = torch.randn(2, k_len, 4, dtype=torch.float64)
        torch.testing.assert_close(compiled(q, k, tables[0], tables[1]),
                                   scores(q, k, tables[0], tables[1]), rtol=1e-13, atol=1e-13)


def test_the_constant_mark_is_torchs_own_and_an_eager_process_skips_dynamo() -> None:
    """posenc marks the threshold search exactly as torch.compiler.assume_constant_result
    does (so a compile sees what it saw before), without importing dynamo (a second) in a
    process that never compiles (the test above compiles with the mark)."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    code = (
        "import sys, torch, posenc\n"
        "posenc.deberta_bucket(torch.arange(-300, 300))\n"
        "assert 'torch._dynamo' not in sys.modules, 'eager use imported dynamo'\n"
        "from posenc.encodings import deberta\n"
        "ours = dict(vars(deberta._compute_thresholds))\n"
        "def f(): pass\n"
        "torch.compiler.assume_constant_result(f)\n"
        "assert ours == vars(f) == {'_dynamo_marked_constant': True}, (ours, vars(f))\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
