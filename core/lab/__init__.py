"""The Lab's reasoning: what the simulations mean for a person sizing a deployment.

`inputs` (the sidebar's workload and toggles, and the deployments they describe), `stages` (the five
architecture stages, the recommendation and the component path), `gauges` (the bottleneck gauges
and headline metrics), `tradeoffs` (each design choice simulated off and on), `sweeps` (the
bottleneck charts' series), `content` (rules, scenarios and stage notes from data/), `tutorial` and
`assumptions` (the write-up and the teaching assumptions, with live numbers)."""
