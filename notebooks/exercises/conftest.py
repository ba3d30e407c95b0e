# The exercises' starting points are sources for the reader to complete, not tests:
# pytest (`pytest --nbval tests notebooks`) must not collect approx_top_k_test.py.
collect_ignore_glob = ["*.py"]
