"""Benchmarks and cost model of the dependency tracker (``make bench``).

Three ways for a parent to wait on n dependencies (our Map pattern, our join,
and a polling baseline), the handlers' costs, one join over up to thousands of
members (calls and units per member and per invocation, the hot partition),
and a cost model in dollars from documented AWS list prices
(``bench/prices.json``). Every figure goes to ``build/bench/results.json``;
the counts and the cost model, what carries over to AWS, to the committed
``bench/summary.json``, and the counts are held to ``bench/budgets.json`` by
the test suite. ``python -m bench.timing`` (optional) adds this machine's
wall-clock figures: throughput, the engine bound, CPU per thread.
``docs/performance.md`` explains them.
"""
