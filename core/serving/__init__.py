"""Serving runs: a configuration in, a simulated run out.

`workload` generates requests (or reads a trace), `simulate` turns a `SimConfig` into the engine's
tables, runs it and reads the results, and `metrics` computes the summary every view shows
(TTFT, TPOT, throughput, goodput, cost)."""
