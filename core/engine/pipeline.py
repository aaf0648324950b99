"""Pipeline parallelism as rules on the one loop.

A replica of pp stages (each GPU of a stage holds layers/pp of the model and their share of the KV
cache) keeps pp batches in flight, as vLLM V1 does: its executor reports max_concurrent_batches =
pipeline_parallel_size (vllm/v1/executor/multiproc_executor.py, ray_distributed_executor.py) and
EngineCore.step_with_batch_queue (vllm/v1/engine/core.py) schedules a new batch whenever fewer are
in flight, then waits for the oldest. One scheduler serves every batch: one waiting queue, one KV
block pool, one limit on running sequences (max_num_seqs counts them all), while a request whose
token is still in flight is not scheduled again (vllm/v1/core/sched/scheduler.py).

Here each batch in flight is a lane: a row of the replica table with its own running requests and
decode cohort, stepping through the same scheduler rules as any replica. The lanes of a replica are
consecutive rows; lane 0 holds what they share (the waiting queue and the block pool), so a row's
shared state is at row r - P_LANE, and without pipeline parallelism that is r itself.

A lane's step is one batch's trip through the stages: each stage takes the batch when it is free
(FIFO), runs its layers, and sends the activations (hidden states and residual, as vLLM's
IntermediateTensors) to the next stage: each GPU of a stage sends its 1/tp share and the receiving
stage all-gathers it (send_tensor_dict / recv_tensor_dict with all_gather_group=get_tp_group() in
vllm/v1/worker/gpu_worker.py), over NVLink within a node or the network between nodes. With fewer
batches ready than stages, stages wait: the bubble.
"""
from ..jit import engine_jit
from .layout import (C_PP, C_PP_NODE, G_PP_BYTES_TOKEN, G_PP_LAT, G_PP_LAT_NET, G_PP_S_BYTE, G_PP_S_BYTE_NET,
                     P_LANE, P_NRUN, Q_STAGE)


@engine_jit
def shared_row(PI, r):
    """The row holding what lane r shares with the other lanes of its replica."""
    return r - PI[r, P_LANE]


@engine_jit
def replica_running(PI, r, cfg):
    """Running requests of lane r's whole replica (every batch in flight)."""
    if cfg[C_PP] == 1:
        return PI[r, P_NRUN]
    g = r - PI[r, P_LANE]
    n = 0
    for j in range(g, g + cfg[C_PP]):
        n += PI[j, P_NRUN]
    return n


@engine_jit
def stage_handoff(cfg, cf, j, tokens):
    """Seconds to move `tokens` tokens' activations from stage j to stage j + 1."""
    wire = tokens * cf[G_PP_BYTES_TOKEN]
    if (j + 1) % cfg[C_PP_NODE] == 0:  # the next stage is on another node
        return cf[G_PP_LAT_NET] + wire * cf[G_PP_S_BYTE_NET]
    return cf[G_PP_LAT] + wire * cf[G_PP_S_BYTE]


@engine_jit
def through_stages(PF, g, cfg, cf, start, stage_s, tokens):
    """A batch that is ready at `start` and takes `stage_s` on every stage passes through the
    pipeline of replica row g, first come first served; returns when its last stage is done."""
    pp = cfg[C_PP]
    t = start
    for j in range(pp):
        if PF[g, Q_STAGE + j] > t:
            t = PF[g, Q_STAGE + j]  # the stage is still busy with an earlier batch
        t += stage_s
        PF[g, Q_STAGE + j] = t
        if j < pp - 1:
            t += stage_handoff(cfg, cf, j, tokens)
    return t
