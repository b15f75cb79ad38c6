"""The run-file fuzzer behind ``make fuzz`` (``python -m tests.fuzz``): seeded mutants of run
files (``mutants``), read by the CLI and classified (``verdict``). It lives with the tests
because the regression corpus (``tests/unit/test_damaged_corpus.py``) makes its failing mutants
again from their recipes."""
