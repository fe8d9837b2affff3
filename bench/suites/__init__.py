"""One module per suite: each builds the cases (planned rows and their builders) of its suite;
:mod:`posenc.bench.plan` puts them in order."""
