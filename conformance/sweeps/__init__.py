"""The engine sweeps (``posenc sweep mlx-lm``, later ``llama.cpp`` and ``vllm``) and the page
that merges them with the transformers sweep (``posenc sweep --from-reports DIR`` writes
``docs/engines.md``).

- :mod:`.engine_report`: one engine's verdicts, the float64 grading of an engine's rotation,
  the forked run of one family, the report file;
- :mod:`.mlx_lm`: what mlx-lm's own model classes rotate, family by family;
- :mod:`.engine_page`: the matrix page and its freshness;
- :mod:`.command`: the ``posenc sweep`` command.
"""
