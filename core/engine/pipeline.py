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
import numpy as np

from ..jit import engine_jit, step_jit
from ..physics import costmodel as cm
from .layout import (B_BLOCK, B_SPLIT, C_BLOCK, C_MAX_STEPS, C_POLICY, C_PP, C_PP_NODE, C_SPLIT, G_PP_BYTES_TOKEN,
                     G_PP_LAT, G_PP_LAT_NET, G_PP_S_BYTE, G_PP_S_BYTE_NET, L_HEAP, M_CTAS, M_DECODES, M_ROWS,
                     M_SUM_CTX, M_TOKENS, O_DECODE_STEPS, O_MIN_FREE, O_PEAK_USED, O_QUIET_STEPS, O_SEQS_DECODE_STEPS,
                     O_SEQS_SCHEDULED, O_STEPS, O_TRACE_SKIP, OF_KV_ALLOC_S, OF_KV_DATA_S, OF_MAX_ITL, ON, P_BLOCKS,
                     P_COH_N, P_COH_PARTS, P_COH_V, P_ITL_BIN, P_LANE, P_NRUN, P_NWAIT, P_PC_SHARED, P_PEAK, P_S,
                     P_S_BLOCK, P_S_SPLIT, P_STATE, P_STEPS, P_STORED, P_USED, Q_BUSY, Q_BUSY_S, Q_LAST_DECODE,
                     Q_STAGE, Q_STEP_START, R_OUTPUT, R_W, VLLM, F_LAST, L_FRESH, P_COH_STEPPED, P_HEAPN,
                     P_LHEAD, P_NFRESH, P_NPRE, P_NSAMPLED, P_NSCHED, P_XHEAD, R_FRESH, R_REPLICA, R_STATE,
                     S_DECODE, STATIC)
from .tally import integrate, itl_bin, itl_bin_near, record


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


@step_jit
def through_stages(PF, g, cfg, cf, start, stage_s, tokens):
    """A batch that is ready at `start` and takes `stage_s` on every stage passes through the
    pipeline of replica row g, first come first served; returns when its last stage is done."""
    pp = cfg[C_PP]
    per_node = cfg[C_PP_NODE]
    wire = tokens * cf[G_PP_BYTES_TOKEN]
    t = start
    on_node = 0  # stages of this node passed so far (a boundary after the node's last crosses nodes)
    for j in range(pp):
        if PF[g, Q_STAGE + j] > t:
            t = PF[g, Q_STAGE + j]  # the stage is still busy with an earlier batch
        t += stage_s
        PF[g, Q_STAGE + j] = t
        if j < pp - 1:
            on_node += 1
            if on_node == per_node:  # the next stage is on another node
                on_node = 0
                t += cf[G_PP_LAT_NET] + wire * cf[G_PP_S_BYTE_NET]
            else:
                t += cf[G_PP_LAT] + wire * cf[G_PP_S_BYTE]
    return t


# ---------------------------------------------------------------- quiet decode steps of a pipeline

@engine_jit
def decoding_alone(PI, SLOTS, r, cfg):
    """fastforward.quiet, except that members decoding for the first time are allowed: their own
    inter-token gaps are taken here as complete_cohort takes them."""
    return (PI[r, P_STATE] == ON and PI[r, P_COH_STEPPED] == 1 and PI[r, P_NSCHED] == 0 and PI[r, P_NPRE] == 0
            and (PI[r, P_NWAIT] == 0 or cfg[C_POLICY] == STATIC) and PI[r, P_LHEAD] < 0 and PI[r, P_XHEAD] < 0
            and PI[r, P_NSAMPLED] == 0 and PI[r, P_HEAPN] > 0)


@engine_jit
def quiet_until(PI, PF, SLOTS, g, cfg):
    """Until when the lanes of replica row g that step their decode cohort alone
    (decoding_alone) can run on their own: the end of the first step of a lane
    that does more (inf when none does); -1 when none is quiet, something waits for the replica,
    or an idle lane has requests."""
    if PI[g, P_NWAIT] != 0 or PI[g, P_STATE] != ON:
        return -1.0
    quiet_lanes = 0
    until = np.inf
    for r in range(g, g + cfg[C_PP]):
        if PF[r, Q_BUSY] == np.inf:
            if PI[r, P_NRUN] != 0:
                return -1.0
        elif decoding_alone(PI, SLOTS, r, cfg):
            quiet_lanes += 1
        elif PF[r, Q_BUSY] < until:
            until = PF[r, Q_BUSY]
    return until if quiet_lanes > 0 else -1.0


@engine_jit
def decode_run(RI, RF, PI, PF, SLOTS, BKT, p, g, cfg, cf, t, t_other, others_used, itl_hist, itl_edges, trace, oi, of,
               mix, scratch):
    """The quiet steps of replica row g's lanes, in the order they end, each followed by the lane's
    next step, up to the next event elsewhere (t_other: another replica's, or the end of a step of
    a lane of g that is not quiet, quiet_until): what the loop would do event by event (each lane's
    step end is an event), the same operations on the same numbers, without its passes over every
    replica. Stops before a step whose end finishes a member or whose
    next step finds too few free blocks. Returns the time of the last step completed (t if none)."""
    bs = cfg[C_BLOCK]
    split = cfg[C_SPLIT]
    pp = cfg[C_PP]
    paged = cfg[C_POLICY] >= VLLM
    kv_heads = p[cm.KV_HEADS]
    # the replica's and the run's figures stay in local variables, written back at the end and
    # before a trace row (which reads the tables); each lane's stay in the tables
    blocks, used, peak, shared = PI[g, P_BLOCKS], PI[g, P_USED], PI[g, P_PEAK], PI[g, P_PC_SHARED]
    kv_data, kv_alloc, max_itl = of[OF_KV_DATA_S], of[OF_KV_ALLOC_S], of[OF_MAX_ITL]
    min_free, peak_used = oi[O_MIN_FREE], oi[O_PEAK_USED]
    steps, seqs, max_steps = 0, 0, cfg[C_MAX_STEPS] - oi[O_STEPS]
    while steps < max_steps:
        r = -1
        tb = np.inf
        for j in range(g, g + pp):
            if PF[j, Q_BUSY] < tb:
                r, tb = j, PF[j, Q_BUSY]
        if r < 0 or tb >= t_other:
            break
        S = PI[r, P_S]
        top = SLOTS[r, L_HEAP, 0]  # quiet lanes have members: the heap's top finishes first
        if S + 1 >= RI[top, R_OUTPUT] - RI[top, R_W]:
            break  # a member finishes with this step: the loop's path
        nb = PI[r, P_S_BLOCK] + 1
        if nb == bs:
            nb = 0
        need = BKT[r, B_BLOCK, nb] if paged else 0
        if need > blocks - used:
            break  # the loop preempts
        # ---- the lane's step completes: each member has one more token (complete_cohort)
        integrate(PI, of, tb - t)
        t = tb
        PF[r, Q_BUSY_S] += t - PF[r, Q_STEP_START]
        m = PI[r, P_COH_N]
        fresh = 0
        for i in range(PI[r, P_NFRESH]):  # members decoding for the first time: their own gap
            q = SLOTS[r, L_FRESH, i]
            if RI[q, R_FRESH] == 1 and RI[q, R_STATE] == S_DECODE and RI[q, R_REPLICA] == r:
                RI[q, R_FRESH] = 0
                first_gap = t - RF[q, F_LAST]
                itl_hist[itl_bin(first_gap)] += 1
                max_itl = max(max_itl, first_gap)
                fresh += 1
        PI[r, P_NFRESH] = 0
        gap = t - PF[r, Q_LAST_DECODE]
        if m > fresh:  # everyone else decoded in the lane's previous step
            b = itl_bin_near(gap, PI[r, P_ITL_BIN], itl_edges)
            PI[r, P_ITL_BIN] = b
            itl_hist[b] += m - fresh
            max_itl = max(max_itl, gap)
        S += 1  # cohort.advance
        PI[r, P_S] = S
        PI[r, P_S_BLOCK] = nb
        if split > 0:
            k = PI[r, P_S_SPLIT] + 1
            PI[r, P_S_SPLIT] = 0 if k == split else k
        PF[r, Q_LAST_DECODE] = t
        # ---- and its next step starts: the cohort takes its blocks and decodes again (start_step)
        used += need
        if split > 0:
            PI[r, P_COH_PARTS] += BKT[r, B_SPLIT, PI[r, P_S_SPLIT]]
            ctas = kv_heads * PI[r, P_COH_PARTS]
        else:
            ctas = kv_heads * m
        sum_ctx = PI[r, P_COH_V] + m * (S + 1)
        dt = cm.step_breakdown(p, float(m), float(m), float(sum_ctx), ctas, 0.0, 0.0, float(m), scratch)
        host = scratch[cm.B_SCHEDULER]
        dt = through_stages(PF, g, cfg, cf, t + host, dt - host, float(m)) - t
        PF[r, Q_BUSY] = t + dt
        PF[r, Q_STEP_START] = t
        PI[r, P_STEPS] += 1
        steps += 1
        seqs += m
        # as start_step counts them: tokens of blocks several requests share once, over the lanes
        kv_data += (PI[r, P_STORED] + 0.0 + sum_ctx - shared / pp) * dt
        kv_alloc += used * bs * dt / pp
        if used > peak:
            peak = used
        if blocks - used < min_free:
            min_free = blocks - used
        if others_used + used > peak_used:
            peak_used = others_used + used
        if oi[O_TRACE_SKIP] > 0:
            oi[O_TRACE_SKIP] -= 1
        else:  # a row of the trace: it reads the tables, so bring them up to date first
            PI[g, P_USED] = used
            mix[:] = 0.0
            mix[M_TOKENS] = mix[M_DECODES] = m
            mix[M_SUM_CTX] = sum_ctx
            mix[M_CTAS] = ctas
            mix[M_ROWS] = m
            record(trace, oi, t, dt, mix, r, PI, bs)
    PI[g, P_USED], PI[g, P_PEAK] = used, peak
    of[OF_KV_DATA_S], of[OF_KV_ALLOC_S], of[OF_MAX_ITL] = kv_data, kv_alloc, max_itl
    oi[O_MIN_FREE], oi[O_PEAK_USED] = min_free, peak_used
    oi[O_STEPS] += steps
    oi[O_QUIET_STEPS] += steps
    oi[O_SEQS_SCHEDULED] += seqs
    oi[O_DECODE_STEPS] += steps
    oi[O_SEQS_DECODE_STEPS] += seqs
    return t
