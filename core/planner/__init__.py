"""Sizing by search: which deployments meet a workload's latency targets, which is cheapest, and
the trade-off frontier of cost against p99 TTFT and TPOT.

`space` (what a deployment is, the shapes within a budget, the simulation each becomes), `bounds`
(what the memory planner and the roofline rule out before simulating), `search` (one shape's
cheapest passing size and its highest rate within the targets), `plan` (every shape, the cheapest
answer and the frontier) and `executors` (where the searches run: in-process, a local process
pool, or Ray)."""
