# The files here are hostile programs for the sandbox, never test modules: pytest must not import
# them into its own process during collection (e.g. a name ending in "_test.py").
collect_ignore_glob = ["*.py"]
