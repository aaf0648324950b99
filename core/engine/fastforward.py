"""Quiet decode steps, run back to back.

Under light load most engine steps are alike: a replica whose only running requests are its
decode cohort, with nothing waiting, steps again and again until a request arrives or a member
finishes. Each such step changes a handful of numbers (the cohort's step counter, the blocks it
takes, the clock) and tallies a few more. The general path re-reads and re-writes all of them in
the replica table every step, through every rule of the scheduler; here they stay in local
variables for the whole run and are written back once, which makes a step several times cheaper.

A step is quiet when:
  the replica serves (not starting or draining); the step in flight is the cohort's alone; the
  replica has no prompt running, none waiting (except under static batching, where a running
  batch admits nobody), no KV transfer waiting to come in, and no member decoding for the first
  time or streamed;
  it completes before `t_other`, the next event anywhere else in the cluster;
  no member finishes when it completes (the heap's top says when the first one will);
  with paged KV, the blocks the next step takes are free (else the general path preempts).
Its results are the general path's to the last bit: the same operations on the same numbers in
the same order (tests/test_engine.py runs both and compares).
"""
from ..jit import engine_jit, step_jit
from ..physics import costmodel as cm
from ..physics.speculative import SPEC_MAX
from .cohort import next_draw, speculative_step
from .layout import (B_BLOCK, B_SPLIT, C_BLOCK, C_MAX_STEPS, C_POLICY, C_SPLIT, M_DECODES, M_DRAFTS, M_TOKENS,
                     O_SPEC_ACCEPTED, O_SPEC_SEQ_STEPS, OF_KV_ALLOC_S, P_FREED, P_SPEC_ADV, P_SPEC_DRAWS, P_SPEC_FREE,
                     OF_KV_DATA_S, OF_MAX_ITL, ON, O_MIN_FREE, O_PEAK_USED, O_QUIET_STEPS, O_SEQS_SCHEDULED, O_STEPS,
                     O_DECODE_STEPS, O_SEQS_DECODE_STEPS,
                     O_TRACE_SKIP, P_BLOCKS, P_COH_N, P_COH_PARTS, P_COH_STEPPED, P_COH_V, P_ITL_BIN, P_LHEAD,
                     P_NFRESH, P_NPRE, P_NSAMPLED, P_NSCHED, P_NWAIT, P_PC_SHARED, P_PEAK, P_S, P_STATE, P_STEPS, P_STORED,
                     P_S_BLOCK, P_S_SPLIT, P_USED, P_XHEAD, Q_BUSY, Q_BUSY_S, Q_LAST_DECODE, Q_STEP_START, STATIC,
                     VLLM)
from .queues import finish_step, heap_top
from .tally import integrate, itl_bin_near, record


@engine_jit
def quiet(PI, SLOTS, r, cfg):
    """Whether replica r's step in flight and its next step are the cohort's alone, with nothing
    else for the replica to do in between. Under static batching a running batch admits nobody,
    so requests may wait meanwhile."""
    return (PI[r, P_STATE] == ON and PI[r, P_COH_STEPPED] == 1 and PI[r, P_NSCHED] == 0 and PI[r, P_NPRE] == 0
            and (PI[r, P_NWAIT] == 0 or cfg[C_POLICY] == STATIC) and PI[r, P_LHEAD] < 0 and PI[r, P_XHEAD] < 0
            and PI[r, P_NFRESH] == 0 and PI[r, P_NSAMPLED] == 0 and heap_top(SLOTS, PI, r) >= 0)


@step_jit
def decode_run(RI, PI, PF, SLOTS, BKT, p, r, cfg, t, t_other, others_used, itl_hist, itl_edges, trace, oi, of, mix,
               scratch):
    """Complete replica r's quiet steps and start the next ones while they stay quiet (see the
    module's docstring; the caller checks `quiet` first). Returns the time of the last step
    completed (t if none was)."""
    bs = cfg[C_BLOCK]
    split = cfg[C_SPLIT]
    paged = cfg[C_POLICY] >= VLLM
    kv_heads = p[cm.KV_HEADS]
    m = PI[r, P_COH_N]
    coh_v = PI[r, P_COH_V]
    stored = PI[r, P_STORED] - PI[r, P_PC_SHARED]  # tokens of blocks several requests share, once
    blocks = PI[r, P_BLOCKS]
    # completions that finish no member: the cohort's counter may reach last - 1
    last = finish_step(RI, heap_top(SLOTS, PI, r))
    S, s_block, s_split = PI[r, P_S], PI[r, P_S_BLOCK], PI[r, P_S_SPLIT]
    used, parts, peak, b = PI[r, P_USED], PI[r, P_COH_PARTS], PI[r, P_PEAK], PI[r, P_ITL_BIN]
    busy, busy_s, step_start, last_decode = PF[r, Q_BUSY], PF[r, Q_BUSY_S], PF[r, Q_STEP_START], PF[r, Q_LAST_DECODE]
    kv_data, kv_alloc, max_itl = of[OF_KV_DATA_S], of[OF_KV_ALLOC_S], of[OF_MAX_ITL]
    steps = 0
    min_free, peak_used, max_steps = oi[O_MIN_FREE], oi[O_PEAK_USED], cfg[C_MAX_STEPS] - oi[O_STEPS]
    # speculative decoding (cohort.py): the step in flight gains j tokens a member and gives back
    # the blocks of its rejected drafts when it completes; each next step draws its own j
    k = int(p[cm.SPEC_K])
    j, spec_free, draws = PI[r, P_SPEC_ADV], PI[r, P_SPEC_FREE], PI[r, P_SPEC_DRAWS]
    accepted, freed = 0, 0
    # the step's operators that the batch alone sets: the same every step of the run
    cm.step_fixed(p, float(m * (k + 1)), float(m), 0.0, float(m * (k + 1)), float(m * k), scratch)
    while busy < t_other and S + j < last and steps < max_steps:
        if k == 0:
            nb = s_block + 1 if s_block + 1 < bs else 0
            need = BKT[r, B_BLOCK, nb] if paged else 0
            j_next, keep = 1, 0
        else:
            nb = s_block + j  # j <= SPEC_MAX + 1: past a block of at least that many, one subtraction, no branch
            nb = nb - bs * (nb >= bs) if bs > SPEC_MAX else nb % bs
            x = next_draw(draws)
            j_next, need, keep, entered = speculative_step(p, BKT, r, x, k, nb, s_split, j)
            if not paged:
                need = keep = 0
        if need > blocks - used + spec_free:
            break
        # ---- the step in flight completes: each member has j more tokens
        integrate(PI, of, busy - t)
        t = busy
        busy_s += t - step_start
        gap = t - last_decode
        b = itl_bin_near(gap, b, itl_edges)
        itl_hist[b] += m
        max_itl = max(max_itl, gap)
        if k == 0:
            S += 1
            if split > 0:
                s_split = s_split + 1 if s_split + 1 < split else 0
        else:  # not a branch on j: the draws are random, and a branch on them mispredicts
            S += j
            if split > 0:
                parts += entered
                s_split += j
                s_split = s_split - split * (s_split >= split) if split > SPEC_MAX else s_split % split
        s_block = nb
        used -= spec_free
        freed += spec_free
        last_decode = t
        # ---- the next step starts: the cohort takes its blocks and decodes again
        used += need
        if k > 0:
            draws = x
            j, spec_free = j_next, need - keep
            accepted += m * (j - 1)
        if split > 0:
            parts += BKT[r, B_SPLIT, s_split]
            ctas = kv_heads * parts
        else:
            ctas = kv_heads * m
        sum_ctx = coh_v + m * (S + 1)
        dt = cm.step_time(p, float(m * (k + 1)), float(m), float(sum_ctx), ctas, 0.0, scratch, float(m * k))
        busy = t + dt
        step_start = t
        steps += 1
        kv_data += (stored + sum_ctx + m * (j - 1)) * dt
        kv_alloc += used * bs * dt
        if used > peak:
            peak = used
        if blocks - used < min_free:
            min_free = blocks - used
        if others_used + used > peak_used:
            peak_used = others_used + used
        if oi[O_TRACE_SKIP] > 0:
            oi[O_TRACE_SKIP] -= 1
        else:  # a row of the trace: it reads the replica table, so bring that up to date first
            PI[r, P_S], PI[r, P_USED] = S, used
            mix[:] = 0.0
            mix[M_TOKENS] = m * (k + 1)
            mix[M_DECODES] = m
            mix[M_DRAFTS] = m * k
            record(trace, oi, t, dt, mix, r, PI, bs)
    PI[r, P_SPEC_ADV], PI[r, P_SPEC_FREE], PI[r, P_SPEC_DRAWS] = j, spec_free, draws
    PI[r, P_FREED] += freed
    if k > 0:
        oi[O_SPEC_SEQ_STEPS] += steps * m
        oi[O_SPEC_ACCEPTED] += accepted
    PI[r, P_S], PI[r, P_S_BLOCK], PI[r, P_S_SPLIT] = S, s_block, s_split
    PI[r, P_USED], PI[r, P_COH_PARTS], PI[r, P_PEAK], PI[r, P_ITL_BIN] = used, parts, peak, b
    PI[r, P_STEPS] += steps
    PF[r, Q_BUSY], PF[r, Q_BUSY_S], PF[r, Q_STEP_START], PF[r, Q_LAST_DECODE] = busy, busy_s, step_start, last_decode
    of[OF_KV_DATA_S], of[OF_KV_ALLOC_S], of[OF_MAX_ITL] = kv_data, kv_alloc, max_itl
    oi[O_STEPS] += steps
    oi[O_QUIET_STEPS] += steps
    oi[O_SEQS_SCHEDULED] += steps * m
    oi[O_DECODE_STEPS] += steps
    oi[O_SEQS_DECODE_STEPS] += steps * m
    oi[O_MIN_FREE], oi[O_PEAK_USED] = min_free, peak_used
    return t
