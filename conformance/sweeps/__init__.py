"""The sweeps: each checks every model family of one library or engine against posenc
(discovery, observation, judging and the generated page together).

- ``transformers_*``: the transformers sweep (``posenc sweep transformers``, docs/families.md);
- :mod:`.engine_report`: one engine's verdicts, the float64 grading of an engine's rotation,
  the forked run of one family, the report file;
- :mod:`.mlx_lm`: what mlx-lm's own model classes rotate, family by family;
- :mod:`.engine_page`: the matrix page (``posenc sweep --from-reports DIR``, docs/engines.md)
  and its freshness;
- :mod:`.command`: the ``posenc sweep`` command.
"""
