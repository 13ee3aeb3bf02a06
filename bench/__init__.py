"""Benchmarks and cost model of the dependency tracker (``make bench``).

Three ways for a parent to wait on n dependencies (our Map pattern, our join,
and a polling baseline), the throughput of the whole local pipeline against
the engine's own per-call bound, the handlers' costs, one join over up to
thousands of members (calls and units per member and per invocation, the hot
partition, wall time against the bound), and a cost model in dollars from
documented AWS list prices (``bench/prices.json``). Results go to
``bench/results.json``; ``docs/performance.md`` explains them.
"""
