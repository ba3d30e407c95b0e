"""SPMD: shardings the compiler chooses and the global program made per-device code.

  propagate.py   sharding propagation: parameter/result shardings a jit leaves open
  partition.py   the partitioner (Shardy's passes and our steps around them; `partition`
                 calls one function per step)
  fallback.py    its steps deciding which ops run on shards, the fallback, the guard
  unreduced.py   its steps for unreduced values (partial sums) and all-reduces
  combine.py     independent all-reduces combined into one (XLA's AllReduceCombiner)
  sharding.py    every sharding fact the compiler reads and writes (no pass of its own)

See docs/sharding.md.
"""
