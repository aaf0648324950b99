"""The engine: the jitted step loop that serves requests over paged KV blocks on a cluster.

`loop.run` is the one loop (scheduling policies are rules on it); beside it are the pieces it is
made of: `kvcache` (block accounting), `queues` (waiting lists and the finish heap), `cohort` (the
decoding sequences of a replica as one aggregate), `fastforward` (quiet decode steps back to
back), `tally` (histograms and the per-step trace) and `layout` (the column names of its tables).
Everything here works on arrays handed in by the serving layer above."""
