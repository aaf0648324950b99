"""The physics: what the hardware and the model are, and what one engine step costs.

`catalog` (GPUs and models, every value sourced, from data/), `costmodel` (the time of one step
from its token mix: a per-operator roofline with fitted efficiencies) and `memory` (weights,
workspace and the KV pool a GPU holds). Nothing here knows about requests or queues."""
