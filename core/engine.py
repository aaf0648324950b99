"""The per-step serving simulator: one jitted loop, one clock, every replica of a cluster.

Each replica runs engine steps in the manner of vLLM's v1 scheduler: a step has a token budget;
running requests are served first (a decode needs one token and maybe one more KV block; when no
block is free the newest running request is preempted and recomputed later), then waiting
requests are admitted in arrival order while the budget, the sequence slots and the free blocks
allow. Prefill and decode are not separate paths: a request is "computed" up to some number of
its known tokens (prompt + generated so far); a step processes some of the rest, and a request
that reaches its known length samples its next token. A decode is simply a request one token
behind.

The five policies are rules on this loop:
  serial   one request at a time (max_seqs = 1), KV reserved for the maximum length
  static   a batch forms only when the replica is idle and runs until its last member finishes;
           finished members keep their slot and KV reservation until then
  orca     iteration-level batching, KV reserved for the maximum length at admission
  vllm     iteration-level batching, paged KV grown block by block, watermark, recompute
           preemption; waiting prompts are prefilled first, whole, in steps of their own
  sarathi  vllm with chunked prefill: decodes first, then prompt chunks fill the token budget

Clusters: arrivals are routed at the gateway (round robin, least outstanding requests, least KV
load). With disaggregation, replicas [0, n_prefill) only prefill; a request that has its first
token moves its KV to a decode replica (which must first have the blocks free) over a link, then
decodes there. An autoscaler can start replicas (after a start-up delay) and drain them.

Everything here is arrays and scalars (numba), laid out by the column constants below; the
Python side (simulate.py) builds the inputs and reads the results.
"""
import math

import numpy as np
from numba import njit

from . import costmodel as cm
from .kvcache import blocks_for, can_admit, paged_growth

# ---- policies
SERIAL, STATIC, ORCA, VLLM, SARATHI = 0, 1, 2, 3, 4
POLICIES = ("serial", "static", "orca", "vllm", "sarathi")
ROUTERS = ("rr", "lor", "kv")

# ---- request table, int columns
R_PROMPT, R_OUTPUT, R_STATE, R_REPLICA, R_COMPUTED, R_GENERATED, R_BLOCKS, R_NEXT, R_PREEMPTS, \
    R_HOME, R_STREAM, NRI = range(12)
# ---- request table, float columns
F_ARRIVAL, F_SCHED, F_FIRST, F_FINISH, F_LAST, F_XFER_START, F_XFER_DONE, F_XFER_READY, NRF = range(9)
# request states
S_PENDING, S_WAITING, S_RUNNING, S_XFER_WAIT, S_XFER, S_HELD, S_DONE = range(7)

# ---- replica table, int columns
P_HEAD, P_TAIL, P_NWAIT, P_NRUN, P_BLOCKS, P_USED, P_POOL, P_STATE, P_NSCHED, P_STORED, P_QTOKENS, \
    P_XHEAD, P_XTAIL, P_FHEAD, P_FTAIL, P_NXFER, P_PEAK, P_STEPS, P_PREEMPTS, P_NHELD, NPI = range(21)
# ---- replica table, float columns
Q_BUSY, Q_READY_AT, Q_ON_SINCE, Q_GPU_S, Q_INGRESS, Q_BUSY_S, Q_STEP_START, NPF = range(8)
# replica states and pools
OFF, STARTING, ON, DRAINING = range(4)
POOL_MIXED, POOL_PREFILL, POOL_DECODE = range(3)

# ---- integer configuration
C_POLICY, C_BLOCK, C_MAX_SEQS, C_BUDGET, C_CHUNK, C_MAX_LEN, C_WATERMARK, C_ROUTER, C_N_PREFILL, \
    C_AUTOSCALE, C_MIN_REPLICAS, C_INIT_REPLICAS, C_SCALE_METRIC, C_TRACE_CAP, C_STREAM_CAP, NCI = range(16)
# ---- float configuration
G_XFER_BW, G_XFER_LAT, G_KV_BYTES_TOKEN, G_SCALE_INTERVAL, G_SCALE_TARGET, G_SCALE_DOWN_FRAC, \
    G_STARTUP_S, G_TP, NCF = range(9)

# ---- step trace columns
T_TIME, T_STEP, T_PREFILL, T_DECODE, T_RUNNING, T_WAITING, T_USED, T_EMPTY_SLOTS, T_REPLICA, T_ACTIVE, \
    T_XFER, NT = range(12)

# ---- inter-token gap histogram: log-spaced bins from 10 us to 10^4 s
ITL_LO, ITL_PER_DECADE, ITL_BINS = -5.0, 200, 1800

# ---- scalar outputs
O_STEPS, O_PREEMPTS, O_PEAK_USED, O_MIN_FREE, O_TRACE_N, O_TRACE_STRIDE, O_DEADLOCK, O_SEQS_SCHEDULED, \
    O_MAX_ACTIVE, NOI = range(10)
OF_KV_DATA_S, OF_KV_ALLOC_S, OF_END, OF_MAX_ITL, OF_BATCH_S, OF_AREA_FRONT, OF_AREA_XFER, OF_AREA_DECODE, \
    NOF = range(9)  # areas: integral over time of requests in the gateway's pool, in transfer, in decode


@njit(cache=True)
def itl_bin(gap):
    if gap <= 0.0:
        return 0
    b = int((math.log10(gap) - ITL_LO) * ITL_PER_DECADE)
    if b < 0:
        return 0
    if b >= ITL_BINS:
        return ITL_BINS - 1
    return b


# ---------------------------------------------------------------- queues (linked lists through R_NEXT)

@njit(cache=True)
def push_back(RI, PI, r, q, head, tail):
    RI[q, R_NEXT] = -1
    if PI[r, tail] < 0:
        PI[r, head] = q
    else:
        RI[PI[r, tail], R_NEXT] = q
    PI[r, tail] = q


@njit(cache=True)
def push_front(RI, PI, r, q, head, tail):
    RI[q, R_NEXT] = PI[r, head]
    PI[r, head] = q
    if PI[r, tail] < 0:
        PI[r, tail] = q


@njit(cache=True)
def pop_front(RI, PI, r, head, tail):
    q = PI[r, head]
    PI[r, head] = RI[q, R_NEXT]
    if PI[r, head] < 0:
        PI[r, tail] = -1
    RI[q, R_NEXT] = -1
    return q


@njit(cache=True)
def known_tokens(RI, q):
    return RI[q, R_PROMPT] + RI[q, R_GENERATED]


# ---------------------------------------------------------------- routing

@njit(cache=True)
def route(RI, PI, cfg, lo, hi, rr_state):
    """Pick a replica in [lo, hi) that accepts work (state ON)."""
    router = cfg[C_ROUTER]
    best, best_load = -1, 1e300
    n = hi - lo
    for k in range(n):
        r = lo + (rr_state[0] + k) % n if router == 0 else lo + k
        if PI[r, P_STATE] != ON:
            continue
        if router == 0:
            best = r
            break
        if router == 1:  # least outstanding requests
            load = PI[r, P_NWAIT] + PI[r, P_NRUN] + PI[r, P_NXFER]
        else:  # least KV load: blocks in use plus the prompts waiting for blocks
            load = (PI[r, P_USED] * cfg[C_BLOCK] + PI[r, P_QTOKENS]) / max(1, PI[r, P_BLOCKS] * cfg[C_BLOCK])
        if load < best_load:
            best, best_load = r, load
    if router == 0 and best >= 0:
        rr_state[0] = (best - lo + 1) % n
    if best < 0:  # nothing accepts work yet: queue at a replica that is starting
        for r in range(lo, hi):
            if PI[r, P_STATE] == STARTING:
                return r
        best = lo
    return best


@njit(cache=True)
def enqueue(RI, PI, r, q):
    RI[q, R_STATE] = S_WAITING
    RI[q, R_REPLICA] = r
    push_back(RI, PI, r, q, P_HEAD, P_TAIL)
    PI[r, P_NWAIT] += 1
    PI[r, P_QTOKENS] += known_tokens(RI, q) - RI[q, R_COMPUTED]


# ---------------------------------------------------------------- one step of one replica

@njit(cache=True)
def preempt(RI, PI, RUN, r, cfg):
    """Recompute preemption of the newest running request: free its blocks, back to the queue front."""
    k = PI[r, P_NRUN] - 1
    v = RUN[r, k]
    PI[r, P_NRUN] = k
    PI[r, P_USED] -= RI[v, R_BLOCKS]
    PI[r, P_STORED] -= RI[v, R_COMPUTED]
    RI[v, R_BLOCKS] = 0
    RI[v, R_COMPUTED] = 0
    RI[v, R_PREEMPTS] += 1
    PI[r, P_PREEMPTS] += 1
    RI[v, R_STATE] = S_WAITING
    push_front(RI, PI, r, v, P_HEAD, P_TAIL)
    PI[r, P_NWAIT] += 1
    PI[r, P_QTOKENS] += known_tokens(RI, v)
    return v


@njit(cache=True)
def schedule_running(RI, PI, RUN, SCH_REQ, SCH_N, r, cfg, budget, paged, chunked):
    """Serve running requests in admission order; returns (budget left, preempted any)."""
    bs = cfg[C_BLOCK]
    preempted = False
    i = 0
    while i < PI[r, P_NRUN] and budget > 0:
        q = RUN[r, i]
        if RI[q, R_STATE] == S_HELD:  # static batching: finished, slot held until the batch ends
            i += 1
            continue
        n = known_tokens(RI, q) - RI[q, R_COMPUTED]
        if chunked and n > cfg[C_CHUNK]:
            n = cfg[C_CHUNK]
        if n > budget:
            if not chunked:
                break
            n = budget
        if paged:
            need = paged_growth(RI[q, R_COMPUTED] + n, RI[q, R_BLOCKS], bs)
            self_preempted = False
            while need > PI[r, P_BLOCKS] - PI[r, P_USED]:
                victim = preempt(RI, PI, RUN, r, cfg)
                preempted = True
                if victim == q:
                    self_preempted = True
                    break
            if self_preempted:
                break
            RI[q, R_BLOCKS] += need
            PI[r, P_USED] += need
        k = PI[r, P_NSCHED]
        SCH_REQ[r, k] = q
        SCH_N[r, k] = n
        PI[r, P_NSCHED] = k + 1
        budget -= n
        i += 1
    return budget, preempted


@njit(cache=True)
def admit_waiting(RI, RF, PI, RUN, SCH_REQ, SCH_N, r, cfg, budget, paged, chunked, t):
    """Admit waiting requests in arrival order while budget, slots and blocks allow."""
    bs = cfg[C_BLOCK]
    max_seqs = cfg[C_MAX_SEQS]
    admitted = 0
    while PI[r, P_HEAD] >= 0 and PI[r, P_NRUN] < max_seqs and budget > 0:
        q = PI[r, P_HEAD]
        n = known_tokens(RI, q) - RI[q, R_COMPUTED]
        if chunked:
            if n > cfg[C_CHUNK]:
                n = cfg[C_CHUNK]
            if n > budget:
                n = budget
        elif n > budget:
            break
        free = PI[r, P_BLOCKS] - PI[r, P_USED]
        if paged:
            need = paged_growth(RI[q, R_COMPUTED] + n, RI[q, R_BLOCKS], bs)
            if not can_admit(free, need, cfg[C_WATERMARK]):
                break
        else:  # contiguous reservation for the maximum model length
            need = blocks_for(cfg[C_MAX_LEN], bs) - RI[q, R_BLOCKS]
            if need > free:
                break
        pop_front(RI, PI, r, P_HEAD, P_TAIL)
        PI[r, P_NWAIT] -= 1
        PI[r, P_QTOKENS] -= known_tokens(RI, q) - RI[q, R_COMPUTED]
        RI[q, R_BLOCKS] += need
        PI[r, P_USED] += need
        RI[q, R_STATE] = S_RUNNING
        if RF[q, F_SCHED] < 0:
            RF[q, F_SCHED] = t
        RUN[r, PI[r, P_NRUN]] = q
        PI[r, P_NRUN] += 1
        k = PI[r, P_NSCHED]
        SCH_REQ[r, k] = q
        SCH_N[r, k] = n
        PI[r, P_NSCHED] = k + 1
        budget -= n
        admitted += 1
    return budget, admitted


@njit(cache=True)
def schedule_step(RI, RF, PI, RUN, SCH_REQ, SCH_N, r, cfg, t):
    """Choose what replica r computes in its next step (fills SCH_REQ/SCH_N)."""
    policy = cfg[C_POLICY]
    paged = policy >= VLLM
    chunked = policy == SARATHI
    PI[r, P_NSCHED] = 0
    budget = cfg[C_BUDGET]
    if policy == STATIC:
        if PI[r, P_NRUN] == 0:  # the replica is idle: form a new batch
            admit_waiting(RI, RF, PI, RUN, SCH_REQ, SCH_N, r, cfg, budget, False, False, t)
        else:
            schedule_running(RI, PI, RUN, SCH_REQ, SCH_N, r, cfg, budget, False, False)
        return
    if policy == VLLM:  # prefill-first: a step admits new prompts, or else serves the running
        budget, admitted = admit_waiting(RI, RF, PI, RUN, SCH_REQ, SCH_N, r, cfg, budget, True, False, t)
        if admitted == 0:
            schedule_running(RI, PI, RUN, SCH_REQ, SCH_N, r, cfg, budget, True, False)
        return
    budget, preempted = schedule_running(RI, PI, RUN, SCH_REQ, SCH_N, r, cfg, budget, paged, chunked)
    if not preempted:
        admit_waiting(RI, RF, PI, RUN, SCH_REQ, SCH_N, r, cfg, budget, paged, chunked, t)


@njit(cache=True)
def step_duration(RI, PI, SCH_REQ, SCH_N, r, p, mix):
    """Cost-model time of replica r's scheduled step; fills mix = (prefill tokens, decode tokens)."""
    tokens = 0
    n_dec = 0
    sum_ctx = 0.0
    ctas = 0.0
    pre_attn = 0.0
    n_chunks = 0
    rows = 0
    for k in range(PI[r, P_NSCHED]):
        q = SCH_REQ[r, k]
        n = SCH_N[r, k]
        c = RI[q, R_COMPUTED]
        tokens += n
        if n == 1 and c > 0:
            n_dec += 1
            sum_ctx += c + 1
            ctas += cm.decode_ctas(p, c + 1)
        else:
            n_chunks += 1
            pre_attn += cm.prefill_attention_time(p, n, c)
        if c + n == known_tokens(RI, q):
            rows += 1
    mix[0] = tokens - n_dec
    mix[1] = n_dec
    return cm.step_time(p, tokens, n_dec, sum_ctx, ctas, pre_attn, n_chunks, rows)


# ---------------------------------------------------------------- step completion

@njit(cache=True)
def release(RI, PI, r, q):
    PI[r, P_USED] -= RI[q, R_BLOCKS]
    PI[r, P_STORED] -= RI[q, R_COMPUTED]
    RI[q, R_BLOCKS] = 0


@njit(cache=True)
def complete_step(RI, RF, PI, RUN, SCH_REQ, SCH_N, r, cfg, t, itl_hist, stream_t, of):
    """Apply replica r's finished step at time t; returns the number of requests that finished."""
    policy = cfg[C_POLICY]
    finished = 0
    leaving = 0
    for k in range(PI[r, P_NSCHED]):
        q = SCH_REQ[r, k]
        n = SCH_N[r, k]
        RI[q, R_COMPUTED] += n
        PI[r, P_STORED] += n
        if RI[q, R_COMPUTED] < known_tokens(RI, q):
            continue  # a prompt chunk; the prompt is not complete yet
        g = RI[q, R_GENERATED] + 1
        RI[q, R_GENERATED] = g
        if g == 1:
            RF[q, F_FIRST] = t
        else:
            gap = t - RF[q, F_LAST]
            itl_hist[itl_bin(gap)] += 1
            if gap > of[OF_MAX_ITL]:
                of[OF_MAX_ITL] = gap
        RF[q, F_LAST] = t
        s = RI[q, R_STREAM]
        if s >= 0 and g <= stream_t.shape[1]:
            stream_t[s, g - 1] = t
        if g == RI[q, R_OUTPUT]:
            RF[q, F_FINISH] = t
            finished += 1
            if policy == STATIC:
                RI[q, R_STATE] = S_HELD  # keeps its slot and reservation until the batch ends
                PI[r, P_NHELD] += 1
            else:
                RI[q, R_STATE] = S_DONE
                release(RI, PI, r, q)
                leaving += 1
        elif PI[r, P_POOL] == POOL_PREFILL:
            RI[q, R_STATE] = S_XFER_WAIT  # first token out: the KV cache moves to a decode replica
            leaving += 1
    if policy == STATIC:
        all_held = PI[r, P_NRUN] > 0
        for i in range(PI[r, P_NRUN]):
            if RI[RUN[r, i], R_STATE] != S_HELD:
                all_held = False
                break
        if all_held:  # the batch is over: every member leaves together
            for i in range(PI[r, P_NRUN]):
                q = RUN[r, i]
                RI[q, R_STATE] = S_DONE
                release(RI, PI, r, q)
            PI[r, P_NRUN] = 0
            PI[r, P_NHELD] = 0
        return finished
    if leaving > 0:  # compact the running list, keeping admission order
        j = 0
        for i in range(PI[r, P_NRUN]):
            q = RUN[r, i]
            st = RI[q, R_STATE]
            if st == S_RUNNING:
                RUN[r, j] = q
                j += 1
        PI[r, P_NRUN] = j
    return finished


# ---------------------------------------------------------------- disaggregation: KV transfers

@njit(cache=True)
def start_transfers(RI, RF, PI, PF, r, cfg, cf, t):
    """Decode replica r takes queued KV transfers in order while it has the blocks free; its
    ingress link carries one transfer at a time."""
    bs = cfg[C_BLOCK]
    while PI[r, P_XHEAD] >= 0:
        q = PI[r, P_XHEAD]
        need = blocks_for(RI[q, R_COMPUTED] + 1, bs)
        if not can_admit(PI[r, P_BLOCKS] - PI[r, P_USED], need, cfg[C_WATERMARK]):
            break
        pop_front(RI, PI, r, P_XHEAD, P_XTAIL)
        PI[r, P_USED] += need
        wire = RI[q, R_COMPUTED] * cf[G_KV_BYTES_TOKEN] / cf[G_XFER_BW]
        start = max(t, PF[r, Q_INGRESS])
        PF[r, Q_INGRESS] = start + wire
        RF[q, F_XFER_START] = start
        RF[q, F_XFER_DONE] = start + wire + cf[G_XFER_LAT]
        RI[q, R_STATE] = S_XFER
        push_back(RI, PI, r, q, P_FHEAD, P_FTAIL)


@njit(cache=True)
def finish_transfers(RI, RF, PI, r, cfg, t):
    """Transfers into replica r that have landed: the source frees its copy, the request waits
    here for a decode slot with its KV already in place."""
    while PI[r, P_FHEAD] >= 0 and RF[PI[r, P_FHEAD], F_XFER_DONE] <= t:
        q = pop_front(RI, PI, r, P_FHEAD, P_FTAIL)
        src = RI[q, R_HOME]
        release(RI, PI, src, q)
        RI[q, R_BLOCKS] = blocks_for(RI[q, R_COMPUTED] + 1, cfg[C_BLOCK])
        PI[r, P_STORED] += RI[q, R_COMPUTED]
        PI[r, P_NXFER] -= 1
        enqueue(RI, PI, r, q)


# ---------------------------------------------------------------- autoscaling

@njit(cache=True)
def autoscale(PI, PF, cfg, cf, t):
    """One tick: start a replica when the load metric is above target, drain one when it is
    well below; one change at a time, none while a replica is still starting."""
    R = PI.shape[0]
    n_on = 0
    starting = 0
    load = 0.0
    for r in range(R):
        st = PI[r, P_STATE]
        if st == STARTING:
            starting += 1
        if st == ON:
            n_on += 1
            if cfg[C_SCALE_METRIC] == 0:
                load += PI[r, P_NWAIT]
            else:
                load += PI[r, P_USED] / max(1, PI[r, P_BLOCKS])
    if n_on == 0 or starting > 0:
        return
    load /= n_on
    if load > cf[G_SCALE_TARGET]:
        for r in range(R):  # a replica still draining comes back at once
            if PI[r, P_STATE] == DRAINING:
                PI[r, P_STATE] = ON
                return
        for r in range(R):
            if PI[r, P_STATE] == OFF:
                PI[r, P_STATE] = STARTING
                PF[r, Q_READY_AT] = t + cf[G_STARTUP_S]
                PF[r, Q_ON_SINCE] = t
                return
    elif load < cf[G_SCALE_TARGET] * cf[G_SCALE_DOWN_FRAC] and n_on > cfg[C_MIN_REPLICAS]:
        for r in range(R - 1, -1, -1):
            if PI[r, P_STATE] == ON:
                PI[r, P_STATE] = DRAINING
                return


# ---------------------------------------------------------------- step trace (bounded)

@njit(cache=True)
def record(trace, oi, t, dt, mix, r, PI, bs, events):
    """Keep every stride-th step; when full, drop every other row and double the stride, so a
    run of any length keeps at most trace.shape[0] evenly spread rows."""
    if events % oi[O_TRACE_STRIDE] != 0:
        return
    cap = trace.shape[0]
    k = oi[O_TRACE_N]
    running = 0
    waiting = 0
    used = 0
    empty = 0
    active = 0
    xfer = 0
    for j in range(PI.shape[0]):
        running += PI[j, P_NRUN]
        waiting += PI[j, P_NWAIT]
        used += PI[j, P_USED]
        empty += PI[j, P_USED] * bs - PI[j, P_STORED]
        xfer += PI[j, P_NXFER]
        if PI[j, P_STATE] != OFF:
            active += 1
    trace[k, T_TIME] = t
    trace[k, T_STEP] = dt
    trace[k, T_PREFILL] = mix[0]
    trace[k, T_DECODE] = mix[1]
    trace[k, T_RUNNING] = running
    trace[k, T_WAITING] = waiting
    trace[k, T_USED] = used
    trace[k, T_EMPTY_SLOTS] = empty
    trace[k, T_REPLICA] = r
    trace[k, T_ACTIVE] = active
    trace[k, T_XFER] = xfer
    k += 1
    if k == cap:
        half = cap // 2
        for i in range(half):
            trace[i, :] = trace[2 * i, :]
        k = half
        oi[O_TRACE_STRIDE] *= 2
    oi[O_TRACE_N] = k


# ---------------------------------------------------------------- the loop

@njit(cache=True)
def run(RI, RF, PI, PF, params, RUN, SCH_REQ, SCH_N, cfg, cf, trace, stream_t, itl_hist, oi, of):
    """Simulate until every request has finished. Requests must be sorted by arrival."""
    n = RI.shape[0]
    R = PI.shape[0]
    bs = cfg[C_BLOCK]
    n_pre = cfg[C_N_PREFILL]
    gate_hi = n_pre if n_pre > 0 else R
    rr = np.zeros(1, np.int64)
    rr_decode = np.zeros(1, np.int64)
    mix = np.zeros(2)
    inf = np.inf
    next_tick = cf[G_SCALE_INTERVAL] if cfg[C_AUTOSCALE] else inf
    oi[O_TRACE_STRIDE] = 1
    min_free = 1 << 62
    t = 0.0
    nxt = 0
    done = 0
    events = 0
    while done < n:
        # ---- the next event: an arrival, a step or transfer ending, a replica ready, a tick
        t_next = RF[nxt, F_ARRIVAL] if nxt < n else inf
        for r in range(R):
            if PF[r, Q_BUSY] < t_next:
                t_next = PF[r, Q_BUSY]
            if PI[r, P_STATE] == STARTING and PF[r, Q_READY_AT] < t_next:
                t_next = PF[r, Q_READY_AT]
            if PI[r, P_FHEAD] >= 0 and RF[PI[r, P_FHEAD], F_XFER_DONE] < t_next:
                t_next = RF[PI[r, P_FHEAD], F_XFER_DONE]
        if next_tick < t_next:
            t_next = next_tick
        if t_next == inf:
            oi[O_DEADLOCK] = 1
            break
        # ---- requests in each part of the system, integrated over time (Little's law)
        span = t_next - t
        for r in range(R):
            in_queues = PI[r, P_NWAIT] + PI[r, P_NRUN] - PI[r, P_NHELD]
            if PI[r, P_POOL] == POOL_DECODE:
                of[OF_AREA_DECODE] += in_queues * span
                of[OF_AREA_XFER] += PI[r, P_NXFER] * span
            else:
                of[OF_AREA_FRONT] += in_queues * span
        t = t_next

        # ---- steps that end now
        for r in range(R):
            if PF[r, Q_BUSY] <= t:
                PF[r, Q_BUSY] = inf
                PF[r, Q_BUSY_S] += t - PF[r, Q_STEP_START]
                done += complete_step(RI, RF, PI, RUN, SCH_REQ, SCH_N, r, cfg, t, itl_hist, stream_t, of)
                if PI[r, P_POOL] == POOL_PREFILL:
                    for k in range(PI[r, P_NSCHED]):
                        q = SCH_REQ[r, k]
                        if RI[q, R_STATE] == S_XFER_WAIT:
                            d = route(RI, PI, cfg, n_pre, R, rr_decode)
                            RI[q, R_HOME] = r
                            RI[q, R_REPLICA] = d
                            RF[q, F_XFER_READY] = t
                            push_back(RI, PI, d, q, P_XHEAD, P_XTAIL)
                            PI[d, P_NXFER] += 1
                PI[r, P_NSCHED] = 0

        # ---- replicas and transfers
        for r in range(R):
            if PI[r, P_STATE] == STARTING and PF[r, Q_READY_AT] <= t:
                PI[r, P_STATE] = ON
            if PI[r, P_FHEAD] >= 0:
                finish_transfers(RI, RF, PI, r, cfg, t)

        # ---- arrivals, routed at the gateway
        while nxt < n and RF[nxt, F_ARRIVAL] <= t:
            r = route(RI, PI, cfg, 0, gate_hi, rr)
            RI[nxt, R_HOME] = -1
            enqueue(RI, PI, r, nxt)
            nxt += 1

        if t >= next_tick:
            autoscale(PI, PF, cfg, cf, t)
            next_tick += cf[G_SCALE_INTERVAL]

        # ---- start what can start
        for r in range(R):
            st = PI[r, P_STATE]
            if st == DRAINING and PI[r, P_NWAIT] == 0 and PI[r, P_NRUN] == 0 and PF[r, Q_BUSY] == inf:
                PI[r, P_STATE] = OFF
                PF[r, Q_GPU_S] += t - PF[r, Q_ON_SINCE]
                continue
            if PI[r, P_XHEAD] >= 0:
                start_transfers(RI, RF, PI, PF, r, cfg, cf, t)
            if PF[r, Q_BUSY] != inf or (st != ON and st != DRAINING):
                continue
            if PI[r, P_NWAIT] == 0 and PI[r, P_NRUN] == 0:
                continue
            schedule_step(RI, RF, PI, RUN, SCH_REQ, SCH_N, r, cfg, t)
            if PI[r, P_NSCHED] == 0:
                continue
            dt = step_duration(RI, PI, SCH_REQ, SCH_N, r, params[r], mix)
            PF[r, Q_BUSY] = t + dt
            PF[r, Q_STEP_START] = t
            PI[r, P_STEPS] += 1
            oi[O_STEPS] += 1
            oi[O_SEQS_SCHEDULED] += PI[r, P_NSCHED]
            stored_after = PI[r, P_STORED] + mix[0] + mix[1]
            of[OF_KV_DATA_S] += stored_after * dt
            of[OF_KV_ALLOC_S] += PI[r, P_USED] * bs * dt
            of[OF_BATCH_S] += PI[r, P_NSCHED] * dt
            if PI[r, P_USED] > PI[r, P_PEAK]:
                PI[r, P_PEAK] = PI[r, P_USED]
            free = PI[r, P_BLOCKS] - PI[r, P_USED]
            if free < min_free:
                min_free = free
            total_used = 0
            for j in range(R):
                total_used += PI[j, P_USED]
            if total_used > oi[O_PEAK_USED]:
                oi[O_PEAK_USED] = total_used
            record(trace, oi, t, dt, mix, r, PI, bs, events)
            events += 1

    # ---- close the books
    end = t
    for r in range(R):
        if PI[r, P_STATE] != OFF:
            PF[r, Q_GPU_S] += end - PF[r, Q_ON_SINCE]
        oi[O_PREEMPTS] += PI[r, P_PREEMPTS]
    oi[O_MIN_FREE] = min_free
    of[OF_END] = end
