"""The per-step serving simulator: one jitted loop, one clock, every replica of a cluster.

Each replica runs engine steps in the manner of vLLM's v1 scheduler: a step has a token budget;
running requests are served first (a decode needs one token and maybe one more KV block; when no
block is free the newest running request is preempted and recomputed later, past its leading
blocks the prefix cache still holds), then waiting requests are admitted in arrival order while
the budget, the sequence slots and the free blocks allow. Prefill and decode are not separate
paths: a request is "computed" up to some number of its known tokens (prompt + generated so
far); a step processes some of the rest, and a request that reaches its known length samples its
next token. A decode is a request one token behind; a replica keeps all of those as one
aggregate, its decode cohort (cohort.py), so that a step costs O(1) for them however large the
batch.

The seven policies are rules on this loop:
  serial   one request at a time (max_seqs = 1), KV reserved for the maximum length
  static   a batch forms only when the replica is idle and runs until its last member finishes;
           finished members keep their slot and KV reservation until then
  orca     iteration-level batching, KV reserved for the maximum length at admission
  vllm     iteration-level batching, paged KV grown block by block, watermark, recompute
           preemption; waiting prompts are prefilled first, whole, in steps of their own
  sarathi  vllm with chunked prefill: decodes first, then prompt chunks fill the token budget
  sglang   prefill-first in chunks: a step runs prompts alone while any wait, else the decodes
  inflight in-flight batching (TensorRT-LLM): decodes first, then whole prompts fill the token
           budget beside them, a prompt that does not fit waiting for a later step

Admission on paged KV is one more rule (C_NO_EVICT): a request is admitted only while the pool holds
every admitted request at its whole length, prompt and output (TensorRT-LLM's GUARANTEED_NO_EVICT),
so the blocks in use never outgrow the pool and no request is preempted.

Clusters: arrivals are routed at the gateway (round robin, least outstanding requests, least KV
load). With disaggregation, replicas [0, n_prefill) only prefill; a request that has its first
token moves its KV to a decode replica (which must first have the blocks free) over a link, then
decodes there. An autoscaler can start replicas (after a start-up delay) and drain them.

Under light load most steps are a replica's decodes alone between two events; those run back to
back outside the loop (fastforward.py), with the loop's results to the last bit.

Tables and their columns are named in layout.py; simulate.py builds them and reads the results.
"""
import math

import numpy as np

from ..jit import engine_jit, step_jit
from ..physics import costmodel as cm
from . import clients, cohort
from .fastforward import decode_run, quiet
from .kvcache import (BUCKET, blocks_for, cached_after, cached_blocks, can_admit, keep, keep_cached, kept_blocks,
                      lookup, paged_growth, register, release_cached, sync, take_hits)
from . import pipeline
from .pipeline import replica_running, shared_row, through_stages
from .layout import *  # noqa: F403 (column names of the engine's tables)
from .queues import heap_top, finish_step, pop_front, push_back, push_front, run_append, run_remove
from .tally import integrate, itl_bin, itl_bin_near, record


@engine_jit
def known_tokens(RI, q):
    return RI[q, R_PROMPT] + RI[q, R_GENERATED]


# ---------------------------------------------------------------- routing

@engine_jit
def outstanding(PI, r, cfg):
    """Replica r's requests: waiting, running and coming in over a KV transfer or load."""
    return PI[r, P_NWAIT] + replica_running(PI, r, cfg) + PI[r, P_NXFER]


@engine_jit
def route(PI, cfg, lo, hi, rr_state):
    """Pick a replica in [lo, hi) that accepts work (state ON)."""
    router = cfg[C_ROUTER]
    best, best_load = -1, 1e300
    n = hi - lo
    for k in range(n):
        r = lo + (rr_state[0] + k) % n if router == 0 else lo + k
        if PI[r, P_STATE] != ON or PI[r, P_LANE] != 0:  # a pipeline's requests queue at its lane 0
            continue
        if router == 0:
            best = r
            break
        if router == 1 or router == 3:  # least outstanding requests (the prefix router's decode pool)
            load = outstanding(PI, r, cfg)
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


@engine_jit
def route_prefix(RI, KC, PI, cfg, cf, lo, hi, rr_state, q):
    """The replica in [lo, hi) with the best weighted score for request q (llm-d's scorers): the
    share of q's blocks it holds cached (a host-tier block counting G_ROUTE_HOST of one on the GPU),
    its queue against the others' ((most - its) / (most - least): 1 when all are equal), and its
    free KV share. Ties go to the first in round-robin order, so that an idle cluster spreads.
    A replica's blocks of q are walked a bucket past its system prompt at first, and further only
    while that could change the choice: a score only grows with the blocks found, so a replica whose
    score so far beats what every other could reach takes q, as it would with every walk finished."""
    n = hi - lo
    most, least = -1, 1 << 60
    for r in range(lo, hi):
        if PI[r, P_STATE] == ON and PI[r, P_LANE] == 0:
            load = outstanding(PI, r, cfg)
            most, least = max(most, load), min(least, load)
    if most < 0:
        return route(PI, cfg, lo, hi, rr_state)
    tokens = known_tokens(RI, q)
    limit = (tokens - 1) // cfg[C_BLOCK]
    blocks = max(1, limit)
    first = (RI[q, R_SHARED] // cfg[C_BLOCK] if RI[q, R_GROUP] >= 0 else 0) + BUCKET
    mark = q + 1  # the replicas an earlier turn of q's conversation was sent to: only they hold its blocks
    if RI[q, R_CONV] >= 0:
        p = RI[q, R_EARLIER]
        while p >= 0:
            if RI[p, R_GATE] >= 0:
                PI[RI[p, R_GATE], P_RT_MARK] = mark
            p = RI[p, R_EARLIER]
    for r in range(lo, hi):
        PI[r, P_RT_HITS], PI[r, P_RT_HOST], PI[r, P_RT_UPTO] = 0, 0, -1
        if PI[r, P_STATE] == ON and PI[r, P_LANE] == 0 and cfg[C_PREFIX] == 1 and caching(PI, r, cfg):
            sync(KC, PI, r, cfg)
            hits, host = cached_blocks(RI, KC, PI, r, q, tokens, first, cfg, PI[r, P_RT_MARK] == mark)
            PI[r, P_RT_HITS], PI[r, P_RT_HOST] = hits, host
            if hits == first and hits < limit:  # cut, not ended: more may follow
                PI[r, P_RT_UPTO] = first
    h = cf[G_ROUTE_HOST]
    while True:
        best, best_low, best_high = -1, -1e300, -1e300  # the highest score so far, the first in round-robin order
        reach, widest, widest_high = -1e300, -1, -1e300  # the most another could reach; the cut walk that could reach most
        best_base = 0.0
        for k in range(n):
            r = lo + (rr_state[0] + k) % n
            if PI[r, P_STATE] != ON or PI[r, P_LANE] != 0:
                continue
            load = outstanding(PI, r, cfg)
            queue = cf[G_ROUTE_W_QUEUE] * (1.0 if most == least else (most - load) / (most - least))
            free_kv = cf[G_ROUTE_W_KV] * (1.0 - PI[r, P_USED] / max(1, PI[r, P_BLOCKS]))
            hits, host = PI[r, P_RT_HITS], PI[r, P_RT_HOST]
            low = cf[G_ROUTE_W_PREFIX] * ((hits - host + h * host) / blocks) + queue + free_kv
            high = low
            if PI[r, P_RT_UPTO] >= 0:  # every block past the cut found, in the tier that counts most
                found = hits - host + h * host + max(1.0, h) * (limit - hits)
                high = cf[G_ROUTE_W_PREFIX] * (found / blocks) + queue + free_kv
                if high > widest_high:
                    widest, widest_high = r, high
            if low > best_low:
                reach = max(reach, best_high)
                best, best_low, best_high, best_base = r, low, high, queue + free_kv
            else:
                reach = max(reach, high)
        if widest < 0 or best_low > reach + 1e-9:
            break  # every walk finished, or the best so far beyond what any other could reach
        # the best so far is cut: walk it as far as its blocks, all found on the GPU, would take it
        # past every other's reach; another: to its end
        r, upto = widest, limit
        if widest == best:
            hits, host = PI[r, P_RT_HITS], PI[r, P_RT_HOST]
            need = (reach + 1e-9 - best_base) / cf[G_ROUTE_W_PREFIX] * blocks - (h * host - host)
            if need < limit:
                upto = max(hits + 1, int(need) + 1)
        hits, more = cached_after(RI, KC, PI, r, q, PI[r, P_RT_HITS], upto, cfg)
        PI[r, P_RT_HITS], PI[r, P_RT_HOST] = hits, PI[r, P_RT_HOST] + more
        PI[r, P_RT_UPTO] = upto if hits == upto and hits < limit else -1
    rr_state[0] = (rr_state[0] + 1) % n
    return best


@engine_jit
def enqueue(RI, PI, r, q):
    RI[q, R_STATE] = S_WAITING
    RI[q, R_REPLICA] = r
    push_back(RI, PI, r, q, P_HEAD, P_TAIL)
    PI[r, P_NWAIT] += 1
    PI[r, P_QTOKENS] += known_tokens(RI, q) - RI[q, R_COMPUTED]


# ---------------------------------------------------------------- running requests outside the cohort

@engine_jit
def pre_remove(SLOTS, PI, r, q):
    n = PI[r, P_NPRE]
    for i in range(n):
        if SLOTS[r, L_PRE, i] == q:
            for j in range(i, n - 1):
                SLOTS[r, L_PRE, j] = SLOTS[r, L_PRE, j + 1]
            PI[r, P_NPRE] = n - 1
            return


@engine_jit
def caching(PI, r, cfg):
    """Prefix caching on this replica (a decode-pool replica receives KV, it never looks it up)."""
    return cfg[C_PREFIX] == 1 and PI[r, P_POOL] != POOL_DECODE


@engine_jit
def reserved_blocks(RI, PI, r, q, bs):
    """Blocks no-evict admission holds for request q on replica r: its whole length, prompt and every
    output token, or on a prefill replica its prompt and first token, all that replica computes of it."""
    output = 1 if PI[r, P_POOL] == POOL_PREFILL else RI[q, R_OUTPUT]
    return blocks_for(RI[q, R_PROMPT] + output, bs)


@engine_jit
def release(RI, PI, KC, r, q, cfg):
    g = shared_row(PI, r)  # the KV block pool (and its prefix cache)
    if caching(PI, r, cfg):  # blocks shared with other requests stay theirs; cached ones stay in the queue
        PI[g, P_USED] -= release_cached(RI, KC, PI, g, q, cfg)
    else:
        PI[g, P_USED] -= RI[q, R_BLOCKS]
        PI[g, P_FREED] += RI[q, R_BLOCKS]
    PI[r, P_STORED] -= RI[q, R_COMPUTED]
    RI[q, R_BLOCKS] = 0
    if cfg[C_NO_EVICT] == 1:
        PI[g, P_RESERVED] -= reserved_blocks(RI, PI, r, q, cfg[C_BLOCK])


@engine_jit
def preempt_newest(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg):
    """Recompute preemption of the newest running request: free its blocks, queue it first."""
    v = PI[r, P_RTAIL]
    if RI[v, R_STATE] == S_DECODE:
        cohort.leave(RI, RF, PI, PF, SLOTS, BKT, r, v, cfg, True)
    else:
        pre_remove(SLOTS, PI, r, v)
        for k in range(PI[r, P_NSCHED]):  # drop it from this step's plan
            if SLOTS[r, L_SCH_REQ, k] == v:
                SLOTS[r, L_SCH_N, k] = 0
    run_remove(RI, PI, r, v)
    if caching(PI, r, cfg):  # its blocks stay cached until evicted or handed out
        keep_cached(RI, v)
    elif cfg[C_RESUME] == 1 and PI[r, P_POOL] != POOL_DECODE:
        keep(RI, PI, shared_row(PI, r), v, cfg[C_BLOCK])
    release(RI, PI, KC, r, v, cfg)
    RI[v, R_COMPUTED] = 0
    RI[v, R_PREEMPTS] += 1
    PI[r, P_PREEMPTS] += 1
    RI[v, R_STATE] = S_WAITING
    g = shared_row(PI, r)  # back to the front of the replica's waiting queue
    push_front(RI, PI, g, v, P_HEAD, P_TAIL)
    PI[g, P_NWAIT] += 1
    PI[g, P_QTOKENS] += known_tokens(RI, v)
    return v


@engine_jit
def add_explicit(RI, PI, SLOTS, r, q, n, p, mix, extend):
    """n tokens of request q in this step: one token after a cached context is a decode, unless
    the step is an extend batch (`extend`: SGLang runs every prompt's step as one, without CUDA
    graphs, however few of its tokens are left); anything else a prefill chunk."""
    c = RI[q, R_COMPUTED]
    mix[M_TOKENS] += n
    if n == 1 and c > 0 and not extend:
        mix[M_DECODES] += 1
        mix[M_SUM_CTX] += c + 1
        mix[M_CTAS] += cm.decode_ctas(p, c + 1)
    else:
        mix[M_CHUNKS] += 1
        mix[M_PREFILL_ATTN] += cm.prefill_attention_time(p, n, c)
    if c + n == known_tokens(RI, q):
        mix[M_ROWS] += 1  # completes its known tokens: samples a token this step


# ---------------------------------------------------------------- one step of one replica

@step_jit
def serve_running(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, budget, paged, chunked, p, mix, decodes=True):
    """The running requests' share of the step: the cohort decodes (one token each; not when
    `decodes` is False, a step of prompts alone), and prompt chunks in progress continue in
    admission order. When KV blocks run out, the newest running requests are preempted until the
    rest fit. Returns (budget left, preempted any)."""
    bs = cfg[C_BLOCK]
    g = shared_row(PI, r)  # the KV block pool
    k = int(p[cm.SPEC_K])  # draft tokens each decode verifies (speculative decoding)
    if decodes:
        budget -= PI[r, P_COH_N] * (k + 1)
    # plan the chunks in progress
    PI[r, P_NSCHED] = 0
    need = cohort.blocks_needed(PI, BKT, r, cfg, k) if paged and decodes else 0
    left = budget
    for i in range(PI[r, P_NPRE]):
        q = SLOTS[r, L_PRE, i]
        n = known_tokens(RI, q) - RI[q, R_COMPUTED]
        if chunked and n > cfg[C_CHUNK]:
            n = cfg[C_CHUNK]
        if n > left:
            if not chunked:
                break
            n = left
        if n <= 0:
            break
        k = PI[r, P_NSCHED]
        SLOTS[r, L_SCH_REQ, k] = q
        SLOTS[r, L_SCH_N, k] = n
        PI[r, P_NSCHED] = k + 1
        left -= n
        if paged:
            need += paged_growth(RI[q, R_COMPUTED] + n, RI[q, R_BLOCKS], bs)
    # not enough blocks: evict the newest until the rest fit
    preempted = False
    while paged and need > PI[g, P_BLOCKS] - PI[g, P_USED] and PI[r, P_NRUN] > 0:
        v = PI[r, P_RTAIL]
        if RI[v, R_STATE] == S_DECODE:
            if decodes:
                need -= cohort.step_blocks(RI, PI, r, v, cfg, k)
        else:
            for k in range(PI[r, P_NSCHED]):
                if SLOTS[r, L_SCH_REQ, k] == v and SLOTS[r, L_SCH_N, k] > 0:
                    need -= paged_growth(RI[v, R_COMPUTED] + SLOTS[r, L_SCH_N, k], RI[v, R_BLOCKS], bs)
        preempt_newest(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg)
        preempted = True
    # take the blocks and build the step's token mix
    if decodes:
        cohort.add_step(PI, BKT, r, cfg, p, paged, mix)
    for k in range(PI[r, P_NSCHED]):
        q, n = SLOTS[r, L_SCH_REQ, k], SLOTS[r, L_SCH_N, k]
        if n == 0:
            continue
        if paged:
            grow = paged_growth(RI[q, R_COMPUTED] + n, RI[q, R_BLOCKS], bs)
            RI[q, R_BLOCKS] += grow
            PI[g, P_USED] += grow
            if caching(PI, r, cfg):
                register(RI, KC, PI, g, q, RI[q, R_COMPUTED] + n, cfg)
        add_explicit(RI, PI, SLOTS, r, q, n, p, mix, cfg[C_POLICY] == SGLANG)
        budget -= n
    return budget, preempted


@step_jit
def admit_waiting(RI, RF, PI, PF, SLOTS, KC, r, cfg, cf, budget, paged, chunked, t, p, mix):
    """Admit waiting requests in arrival order while budget, slots and blocks allow; requests whose
    KV cache has landed from a prefill replica come first."""
    bs = cfg[C_BLOCK]
    g = shared_row(PI, r)  # the waiting queue, the KV block pool
    admitted = 0
    while PI[r, P_LHEAD] >= 0 and PI[r, P_NRUN] < PI[r, P_MAX_SEQS] and budget > 0:
        q = PI[r, P_LHEAD]
        if RI[q, R_HOME] >= 0:  # landed from a prefill replica: it decodes
            n = 1
            need = paged_growth(RI[q, R_COMPUTED] + 1, RI[q, R_BLOCKS], bs)
        else:  # loaded from the host tier: the rest of its prompt, in the blocks it took
            n = min(known_tokens(RI, q) - RI[q, R_COMPUTED], RI[q, R_BLOCKS] * bs - RI[q, R_COMPUTED])
            if chunked:
                n = min(n, cfg[C_CHUNK], budget)
            elif n > budget:
                break
            need = 0
            register(RI, KC, PI, g, q, RI[q, R_COMPUTED] + n, cfg)
            admitted += 1
        pop_front(RI, PI, r, P_LHEAD, P_LTAIL)
        PI[r, P_NWAIT] -= 1
        RI[q, R_BLOCKS] += need
        PI[r, P_USED] += need
        _admit(RI, PI, SLOTS, r, q, n, p, mix, False)
        budget -= n  # a landed decode is not a new prompt: not counted as admitted
    cache = paged and caching(PI, r, cfg)
    while PI[g, P_HEAD] >= 0 and replica_running(PI, r, cfg) < PI[r, P_MAX_SEQS] and budget > 0:
        q = PI[g, P_HEAD]
        hits, idle, host = 0, 0, 0  # leading blocks found cached, those no request holds, those in the host tier
        if cache and RI[q, R_BLOCKS] == 0:
            sync(KC, PI, g, cfg)
            hits, idle, host = lookup(RI, KC, PI, g, q, known_tokens(RI, q), cfg, True)
        elif RI[q, R_KEEP] > 0:  # preempted: its blocks not yet handed out since (kept_blocks)
            hits = idle = kept_blocks(RI, PI, g, q)
        c0 = RI[q, R_COMPUTED] + hits * bs
        n = known_tokens(RI, q) - c0
        if chunked:
            if n > cfg[C_CHUNK]:
                n = cfg[C_CHUNK]
            if n > budget:
                n = budget
        elif n > budget:
            break
        free = PI[g, P_BLOCKS] - PI[g, P_USED]
        if paged:  # cached blocks no request holds are free blocks: taking them counts
            need = paged_growth(c0 + n, RI[q, R_BLOCKS] + hits, bs)
            if not can_admit(free, need + idle, cfg[C_WATERMARK]):
                break
            if cfg[C_NO_EVICT] == 1:  # the pool must hold it whole beside every request admitted
                whole = reserved_blocks(RI, PI, r, q, bs)
                if PI[g, P_BLOCKS] - PI[g, P_RESERVED] < whole:
                    break
                PI[g, P_RESERVED] += whole
        else:  # contiguous reservation for the maximum model length
            need = blocks_for(cfg[C_MAX_LEN], bs) - RI[q, R_BLOCKS]
            if need > free:
                break
        pop_front(RI, PI, g, P_HEAD, P_TAIL)
        PI[g, P_NWAIT] -= 1
        PI[g, P_QTOKENS] -= known_tokens(RI, q) - RI[q, R_COMPUTED]
        RI[q, R_KEEP] = 0
        if hits > 0:
            if cache:
                take_hits(RI, KC, PI, g, q, hits, cfg)
            else:  # back out of the free queue
                RI[q, R_BLOCKS], RI[q, R_COMPUTED] = hits, hits * bs
                PI[g, P_USED] += hits
            PI[r, P_STORED] += RI[q, R_COMPUTED]
        RI[q, R_BLOCKS] += need
        PI[g, P_USED] += need
        if cache:
            PI[g, P_PC_QUERY] += known_tokens(RI, q)
            PI[g, P_PC_HIT] += hits * bs
        if RF[q, F_SCHED] < 0:
            RF[q, F_SCHED] = t
            RI[q, R_CACHED] = hits * bs
        if host > 0:  # its host-tier blocks load first; it computes nothing until they land
            load_from_host(RI, RF, PI, PF, g, q, host * bs, cf, t)
            continue
        if cache:
            register(RI, KC, PI, g, q, c0 + n, cfg)
        _admit(RI, PI, SLOTS, r, q, n, p, mix, cfg[C_POLICY] == SGLANG)
        budget -= n
        admitted += 1
    return budget, admitted


@engine_jit
def load_from_host(RI, RF, PI, PF, g, q, tokens, cf, t):
    """q waits while `tokens` of its prefix load from the host tier over the replica's host link,
    one load after another (vLLM's OffloadingConnector: the request is parked, with its GPU blocks
    taken, while other requests' steps run on), then joins the landed queue (finish_transfers)."""
    wire = tokens * cf[G_KV_BYTES_TOKEN] * cf[G_OFF_S_BYTE]
    start = max(t, PF[g, Q_INGRESS])
    PF[g, Q_INGRESS] = start + wire
    RF[q, F_XFER_START] = start
    RF[q, F_XFER_DONE] = start + wire
    RI[q, R_HOME] = -1
    RI[q, R_STATE] = S_XFER
    PI[g, P_NXFER] += 1
    push_back(RI, PI, g, q, P_FHEAD, P_FTAIL)


@engine_jit
def _admit(RI, PI, SLOTS, r, q, n, p, mix, extend):
    """q joins the running requests, with n tokens in this step (in an extend batch: add_explicit)."""
    RI[q, R_STATE] = S_PREFILL
    RI[q, R_REPLICA] = r  # its lane, in a pipeline
    run_append(RI, PI, r, q)
    SLOTS[r, L_PRE, PI[r, P_NPRE]] = q
    PI[r, P_NPRE] += 1
    k = PI[r, P_NSCHED]
    SLOTS[r, L_SCH_REQ, k] = q
    SLOTS[r, L_SCH_N, k] = n
    PI[r, P_NSCHED] = k + 1
    add_explicit(RI, PI, SLOTS, r, q, n, p, mix, extend)


@step_jit
def schedule_step(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, cf, t, p, mix):
    """Choose what replica r computes in its next step; returns the tokens it will process."""
    policy = cfg[C_POLICY]
    paged = policy >= VLLM
    chunked = policy == SARATHI
    PI[r, P_NSCHED] = 0
    PI[r, P_COH_STEPPED] = 0
    mix[:] = 0.0
    budget = PI[r, P_BUDGET]
    if policy == STATIC and PI[r, P_NRUN] == 0:  # the replica is idle: form a new batch
        admit_waiting(RI, RF, PI, PF, SLOTS, KC, r, cfg, cf, budget, False, False, t, p, mix)
    elif policy == STATIC:
        serve_running(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, budget, False, False, p, mix)
    elif policy == VLLM:  # prefill-first: a step admits new prompts, or else serves the running
        budget, admitted = admit_waiting(RI, RF, PI, PF, SLOTS, KC, r, cfg, cf, budget, True, False, t, p, mix)
        if admitted == 0:
            serve_running(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, budget, True, False, p, mix)
    elif policy == SGLANG:  # prefill-first in chunks: prompts in progress and new ones, no decodes; or else decodes
        budget, _ = serve_running(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, budget, True, True, p, mix, False)
        admit_waiting(RI, RF, PI, PF, SLOTS, KC, r, cfg, cf, budget, True, True, t, p, mix)
        if mix[M_TOKENS] == 0:  # no prompt to compute (or none that fits): the running decode
            serve_running(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, PI[r, P_BUDGET], True, True, p, mix)
    else:  # orca, sarathi and inflight: the running first, then what waits fills the budget beside them
        budget, preempted = serve_running(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, budget, paged, chunked, p, mix)
        if not preempted:
            admit_waiting(RI, RF, PI, PF, SLOTS, KC, r, cfg, cf, budget, paged, chunked, t, p, mix)
    return mix[M_TOKENS]


@step_jit
def step_duration(p, mix, scratch):
    """Cost-model time of the scheduled step's token mix."""
    return cm.step_breakdown(p, mix[M_TOKENS], mix[M_DECODES], mix[M_SUM_CTX], mix[M_CTAS], mix[M_PREFILL_ATTN],
                             mix[M_CHUNKS], mix[M_ROWS], scratch, mix[M_DRAFTS])


# ---------------------------------------------------------------- step completion

@engine_jit
def finish(RI, RF, PI, KC, r, q, t, static, cfg):
    RF[q, F_FINISH] = t
    if cfg[C_USERS] > 0:  # its user sees the last token: it goes back to them (clients.hand_back)
        push_back(RI, PI, r, q, P_DHEAD, P_DTAIL)
    if static:  # keeps its slot and reservation until the batch ends
        RI[q, R_STATE] = S_HELD
        PI[r, P_NHELD] += 1
    else:
        RI[q, R_STATE] = S_DONE
        run_remove(RI, PI, r, q)
        release(RI, PI, KC, r, q, cfg)


@step_jit
def complete_cohort(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, t, itl_hist, itl_edges, stream_t, stream_ids, of, static,
                    paged):
    """The cohort's tokens of a finished step: gaps, streamed samples, and the members done."""
    m = PI[r, P_COH_N]
    fresh = 0
    for i in range(PI[r, P_NFRESH]):  # members decoding for the first time: their own gap
        q = SLOTS[r, L_FRESH, i]
        if RI[q, R_FRESH] == 1 and RI[q, R_STATE] == S_DECODE and RI[q, R_REPLICA] == r:
            RI[q, R_FRESH] = 0
            gap = t - RF[q, F_LAST]
            itl_hist[itl_bin(gap)] += 1
            of[OF_MAX_ITL] = max(of[OF_MAX_ITL], gap)
            fresh += 1
    PI[r, P_NFRESH] = 0
    gap = t - PF[r, Q_LAST_DECODE]  # everyone else decoded in the cohort's previous step
    if m > fresh:
        b = itl_bin_near(gap, PI[r, P_ITL_BIN], itl_edges)
        PI[r, P_ITL_BIN] = b
        itl_hist[b] += m - fresh
        of[OF_MAX_ITL] = max(of[OF_MAX_ITL], gap)
    cohort.advance(PI, BKT, r, cfg)
    PF[r, Q_LAST_DECODE] = t
    S = PI[r, P_S]
    if PI[r, P_NSAMPLED] > 0:
        j = PI[r, P_SPEC_ADV]  # tokens each member gained in the step
        for s in range(len(stream_ids)):
            q = stream_ids[s]
            if RI[q, R_STATE] == S_DECODE and RI[q, R_REPLICA] == r:
                g = RI[q, R_W] + S
                for h in range(max(1, g - j + 1), min(g, RI[q, R_OUTPUT], stream_t.shape[1]) + 1):
                    stream_t[s, h - 1] = t
    finished = 0
    while True:
        q = heap_top(SLOTS, PI, r)
        if q < 0 or finish_step(RI, q) > S:
            break
        cohort.leave(RI, RF, PI, PF, SLOTS, BKT, r, q, cfg, paged)
        finish(RI, RF, PI, KC, r, q, t, static, cfg)
        finished += 1
    return finished


@step_jit
def complete_step(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, t, itl_hist, itl_edges, stream_t, stream_ids, of, rr_decode):
    """Apply replica r's finished step at time t; returns the number of requests that finished."""
    policy = cfg[C_POLICY]
    static = policy == STATIC
    paged = policy >= VLLM
    finished = 0
    if PI[r, P_COH_STEPPED] == 1:
        finished += complete_cohort(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, t, itl_hist, itl_edges, stream_t,
                                    stream_ids, of, static, paged)
        PI[r, P_COH_STEPPED] = 0
    leaving = 0
    for k in range(PI[r, P_NSCHED]):
        q, n = SLOTS[r, L_SCH_REQ, k], SLOTS[r, L_SCH_N, k]
        if n == 0:
            continue
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
            of[OF_MAX_ITL] = max(of[OF_MAX_ITL], gap)
        RF[q, F_LAST] = t
        s = RI[q, R_STREAM]
        if s >= 0 and g <= stream_t.shape[1]:
            stream_t[s, g - 1] = t
        leaving += 1
        if g == RI[q, R_OUTPUT]:
            finish(RI, RF, PI, KC, r, q, t, static, cfg)
            finished += 1
        elif PI[r, P_POOL] == POOL_PREFILL:  # first token out: the KV cache moves to a decode replica
            RI[q, R_STATE] = S_XFER_WAIT
            run_remove(RI, PI, r, q)
            d = route(PI, cfg, cfg[C_N_PREFILL], PI.shape[0], rr_decode)
            RI[q, R_HOME] = r
            RI[q, R_REPLICA] = d
            RF[q, F_XFER_READY] = t
            push_back(RI, PI, d, q, P_XHEAD, P_XTAIL)
            PI[d, P_NXFER] += 1
        else:
            cohort.join(RI, PI, SLOTS, BKT, r, q, cfg)
    if leaving > 0:  # keep only requests still computing their prompt
        j = 0
        for i in range(PI[r, P_NPRE]):
            q = SLOTS[r, L_PRE, i]
            if RI[q, R_STATE] == S_PREFILL:
                SLOTS[r, L_PRE, j] = q
                j += 1
        PI[r, P_NPRE] = j
    PI[r, P_NSCHED] = 0
    if static and PI[r, P_NRUN] > 0 and PI[r, P_NHELD] == PI[r, P_NRUN]:
        q = PI[r, P_RHEAD]  # the batch is over: every member leaves together
        while q >= 0:
            nxt = RI[q, R_RNEXT]
            RI[q, R_STATE] = S_DONE
            run_remove(RI, PI, r, q)
            release(RI, PI, KC, r, q, cfg)
            q = nxt
        PI[r, P_NHELD] = 0
    return finished


# ---------------------------------------------------------------- disaggregation: KV transfers

@engine_jit
def start_transfers(RI, RF, PI, PF, r, cfg, cf, t):
    """Decode replica r takes queued KV transfers in order while it has the blocks free; its
    ingress link carries one transfer at a time."""
    bs = cfg[C_BLOCK]
    while PI[r, P_XHEAD] >= 0:
        q = PI[r, P_XHEAD]
        need = blocks_for(RI[q, R_COMPUTED] + 1, bs)
        if not can_admit(PI[r, P_BLOCKS] - PI[r, P_USED], need, cfg[C_WATERMARK]):
            break
        if cfg[C_NO_EVICT] == 1:  # the decode pool reserves its whole length as it lands
            whole = reserved_blocks(RI, PI, r, q, bs)
            if PI[r, P_BLOCKS] - PI[r, P_RESERVED] < whole:
                break
            PI[r, P_RESERVED] += whole
        pop_front(RI, PI, r, P_XHEAD, P_XTAIL)
        PI[r, P_USED] += need
        wire = RI[q, R_COMPUTED] * cf[G_KV_BYTES_TOKEN] / cf[G_XFER_BW]
        start = max(t, PF[r, Q_INGRESS])
        PF[r, Q_INGRESS] = start + wire
        RF[q, F_XFER_START] = start
        RF[q, F_XFER_DONE] = start + wire + cf[G_XFER_LAT]
        RI[q, R_STATE] = S_XFER
        push_back(RI, PI, r, q, P_FHEAD, P_FTAIL)


@engine_jit
def finish_transfers(RI, RF, PI, KC, r, cfg, t):
    """Transfers into replica r that have landed: the source frees its copy, the request waits
    here for a decode slot with its KV already in place (admitted before any prompt, since the
    blocks it holds are what the replica needs back). A load from r's host tier lands the same way,
    to compute the rest of its prompt."""
    while PI[r, P_FHEAD] >= 0 and RF[PI[r, P_FHEAD], F_XFER_DONE] <= t:
        q = pop_front(RI, PI, r, P_FHEAD, P_FTAIL)
        if RI[q, R_HOME] >= 0:  # from a prefill replica, which frees its copy
            release(RI, PI, KC, RI[q, R_HOME], q, cfg)
            RI[q, R_BLOCKS] = blocks_for(RI[q, R_COMPUTED] + 1, cfg[C_BLOCK])
            PI[r, P_STORED] += RI[q, R_COMPUTED]
        PI[r, P_NXFER] -= 1
        RI[q, R_STATE] = S_WAITING
        RI[q, R_REPLICA] = r
        push_back(RI, PI, r, q, P_LHEAD, P_LTAIL)  # holds its blocks: it must not queue behind prompts
        PI[r, P_NWAIT] += 1


# ---------------------------------------------------------------- autoscaling

@engine_jit
def autoscale(PI, PF, cfg, cf, t):
    """One tick of a concurrency (or KV) autoscaler, in the manner of Knative's: the replicas
    wanted are the load over the per-replica target. Start the missing ones at once (they serve
    after the start-up delay); drain one when the load would fit one replica fewer at a fraction
    of the target (hysteresis, so that it does not flap)."""
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
            if cfg[C_SCALE_METRIC] == 0:  # requests in the replica, waiting or running
                load += PI[r, P_NWAIT] + PI[r, P_NRUN]
            else:  # share of its KV blocks in use
                load += PI[r, P_USED] / max(1, PI[r, P_BLOCKS])
    if n_on == 0:
        return
    target = cf[G_SCALE_TARGET]
    wanted = int(math.ceil(load / target))
    missing = wanted - n_on - starting
    for r in range(R):  # replicas still draining come back first, at once
        if missing <= 0:
            break
        if PI[r, P_STATE] == DRAINING:
            PI[r, P_STATE] = ON
            missing -= 1
    for r in range(R):
        if missing <= 0:
            break
        if PI[r, P_STATE] == OFF:
            PI[r, P_STATE] = STARTING
            PF[r, Q_READY_AT] = t + cf[G_STARTUP_S]
            PF[r, Q_ON_SINCE] = t
            missing -= 1
    if starting == 0 and n_on > cfg[C_MIN_REPLICAS] and load <= (n_on - 1) * target * cf[G_SCALE_DOWN_FRAC]:
        for r in range(R - 1, -1, -1):
            if PI[r, P_STATE] == ON:
                PI[r, P_STATE] = DRAINING
                return


# ---------------------------------------------------------------- the loop

@step_jit
def next_event(RF, PI, PF, t_arrival, next_tick, skip, skip_end):
    """The time of the next event other than the step ends of replicas [skip, skip_end): an
    arrival (t_arrival: clients.next_arrival), another replica's step end, a replica ready, a KV
    transfer landing, an autoscaler tick."""
    t_next = t_arrival
    for r in range(PI.shape[0]):
        if (r < skip or r >= skip_end) and PF[r, Q_BUSY] < t_next:
            t_next = PF[r, Q_BUSY]
        if PI[r, P_STATE] == STARTING and PF[r, Q_READY_AT] < t_next:
            t_next = PF[r, Q_READY_AT]
        if PI[r, P_FHEAD] >= 0 and RF[PI[r, P_FHEAD], F_XFER_DONE] < t_next:
            t_next = RF[PI[r, P_FHEAD], F_XFER_DONE]
    return min(t_next, next_tick)


@step_jit
def start_step(RI, RF, PI, PF, SLOTS, BKT, KC, params, r, cfg, cf, t, mix, scratch, trace, oi, of):
    """Schedule replica r's next step at time t and account for it; returns its duration, or -1
    when there is nothing it can run."""
    p = params[r]
    preempts = PI[r, P_PREEMPTS]
    tokens = schedule_step(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, cf, t, p, mix)
    if tokens == 0 and PI[r, P_PREEMPTS] > preempts:
        # every running request was preempted and the step admitted none (a step that preempts
        # admits nobody): the next step follows at once and admits into the blocks freed, as
        # vLLM's engine loop steps again while requests remain; else the replica would sit idle
        # with no event left to wake it
        tokens = schedule_step(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, cf, t, p, mix)
    if tokens == 0:
        return -1.0
    dt = step_duration(p, mix, scratch)
    g = shared_row(PI, r)
    if cfg[C_PP] > 1:  # the batch's trip through the stages (p is one stage's share); the engine's
        # host work of the step (scheduling, sampling) happens once, before the batch enters
        host = scratch[cm.B_SCHEDULER]
        dt = through_stages(PF, g, cfg, cf, t + host, dt - host, mix[M_TOKENS]) - t
    PF[r, Q_BUSY] = t + dt
    PF[r, Q_STEP_START] = t
    PI[r, P_STEPS] += 1
    oi[O_STEPS] += 1
    seqs = PI[r, P_COH_N] * PI[r, P_COH_STEPPED] + PI[r, P_NSCHED]
    oi[O_SEQS_SCHEDULED] += seqs
    if mix[M_DECODES] > 0:  # the sequences the step's passes carry: decodes and prompt chunks
        oi[O_DECODE_STEPS] += 1
        oi[O_SEQS_DECODE_STEPS] += int(mix[M_DECODES] + mix[M_CHUNKS])
    if mix[M_DRAFTS] > 0:
        oi[O_SPEC_SEQ_STEPS] += PI[r, P_COH_N]
        oi[O_SPEC_ACCEPTED] += PI[r, P_COH_N] * (PI[r, P_SPEC_ADV] - 1)
    explicit = mix[M_TOKENS] - mix[M_DRAFTS] - PI[r, P_COH_N] * PI[r, P_COH_STEPPED]
    # tokens of blocks several requests share are stored once (counted over the lanes' steps)
    stored_after = PI[r, P_STORED] + explicit + cohort.stored_after_step(PI, r) - PI[g, P_PC_SHARED] / cfg[C_PP]
    bs = cfg[C_BLOCK]
    of[OF_KV_DATA_S] += stored_after * dt
    of[OF_KV_ALLOC_S] += PI[g, P_USED] * bs * dt / cfg[C_PP]  # the pool's blocks, once over the lanes' steps
    if PI[g, P_USED] > PI[g, P_PEAK]:
        PI[g, P_PEAK] = PI[g, P_USED]
    free = PI[g, P_BLOCKS] - PI[g, P_USED]
    if free < oi[O_MIN_FREE]:
        oi[O_MIN_FREE] = free
    record(trace, oi, t, dt, mix, r, PI, bs)
    return dt


@engine_jit
def run(RI, RF, PI, PF, SLOTS, BKT, KC, params, cfg, cf, trace, stream_t, stream_ids, itl_hist, itl_edges, oi, of,
        work_i, work_f, stream, cl_t, cl_q):
    """Simulate until every request has finished. stream: the requests no earlier turn releases,
    in the order they fall due (clients.py); cl_t, cl_q: the clients' heap (room for one entry a
    user). itl_edges: the histogram's bin edges (ITL_BINS + 1, in s); work_i (NW ints) and work_f
    (NM + cm.N_SCRATCH floats) are scratch space."""
    n = RI.shape[0]
    R = PI.shape[0]
    n_pre = cfg[C_N_PREFILL]
    gate_hi = n_pre if n_pre > 0 else R
    rr = work_i[W_RR:W_RR + 1]  # round-robin positions at the gateway and in the decode pool
    rr_decode = work_i[W_RR_DECODE:W_RR_DECODE + 1]
    work_i[W_POS], work_i[W_FREE], work_i[W_HEAPN] = 0, cfg[C_USERS], 0
    closed = cfg[C_USERS] > 0
    mix = work_f[0:NM]
    scratch = work_f[NM:NM + cm.N_SCRATCH]
    inf = np.inf
    next_tick = cf[G_SCALE_INTERVAL] if cfg[C_AUTOSCALE] else inf
    oi[O_TRACE_STRIDE] = 1
    oi[O_MIN_FREE] = 1 << 62
    t = 0.0
    done = 0
    while done < n:
        if oi[O_STEPS] >= cfg[C_MAX_STEPS]:
            oi[O_STEP_LIMIT] = 1
            break
        t_arrival = clients.next_arrival(RF, stream, cl_t, work_i, cfg)
        t_next = next_event(RF, PI, PF, t_arrival, next_tick, -1, -1)
        if t_next == inf:
            oi[O_DEADLOCK] = 1
            break
        integrate(PI, of, t_next - t)
        t = t_next

        # ---- steps that end now
        for r in range(R):
            if PF[r, Q_BUSY] > t:
                continue
            PF[r, Q_BUSY] = inf
            PF[r, Q_BUSY_S] += t - PF[r, Q_STEP_START]
            done += complete_step(RI, RF, PI, PF, SLOTS, BKT, KC, r, cfg, t, itl_hist, itl_edges, stream_t, stream_ids,
                                  of, rr_decode)
            if closed:
                clients.hand_back(RI, RF, PI, r, cl_t, cl_q, work_i)

        # ---- replicas and transfers
        for r in range(R):
            if PI[r, P_STATE] == STARTING and PF[r, Q_READY_AT] <= t:
                PI[r, P_STATE] = ON
            if PI[r, P_FHEAD] >= 0:
                finish_transfers(RI, RF, PI, KC, r, cfg, t)

        # ---- arrivals, routed at the gateway
        while True:
            q = clients.arrive(RF, stream, cl_t, cl_q, work_i, cfg, t)
            if q < 0:
                break
            r = route_prefix(RI, KC, PI, cfg, cf, 0, gate_hi, rr, q) if cfg[C_ROUTER] == 3 else route(PI, cfg, 0, gate_hi, rr)
            RI[q, R_GATE] = r
            if cfg[C_ASYNC] and PF[r, Q_BUSY] != inf:
                RF[q, F_ASYNC] = PF[r, Q_BUSY] - PF[r, Q_STEP_START]
            enqueue(RI, PI, r, q)

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
            if PI[shared_row(PI, r), P_NWAIT] == 0 and PI[r, P_NRUN] == 0:
                continue
            start_step(RI, RF, PI, PF, SLOTS, BKT, KC, params, r, cfg, cf, t, mix, scratch, trace, oi, of)
        # the cluster's KV blocks in use peak when steps start (blocks are taken then)
        total_used = 0
        total_reserved = 0
        soonest = 0  # the replica whose step ends next
        for r in range(R):
            total_used += PI[r, P_USED]
            total_reserved += PI[r, P_RESERVED]
            if PF[r, Q_BUSY] < PF[soonest, Q_BUSY]:
                soonest = r
        if total_used > oi[O_PEAK_USED]:
            oi[O_PEAK_USED] = total_used
        if total_reserved > oi[O_PEAK_RESERVED]:
            oi[O_PEAK_RESERVED] = total_reserved

        # ---- its quiet decode steps, back to back, up to the next event elsewhere (until then
        # nothing else in the cluster changes); the next arrival is the cheap first test
        r = soonest
        t_arrival = clients.next_arrival(RF, stream, cl_t, work_i, cfg)
        if cfg[C_FAST_FORWARD] and PF[r, Q_BUSY] < t_arrival:
            if cfg[C_PP] == 1:
                if quiet(PI, SLOTS, r, cfg):
                    t = decode_run(RI, PI, PF, SLOTS, BKT, params[r], r, cfg, t,
                                   next_event(RF, PI, PF, t_arrival, next_tick, r, r + 1), total_used - PI[r, P_USED],
                                   itl_hist, itl_edges, trace, oi, of, mix, scratch)
            else:  # a pipeline's lanes: their quiet steps in the order they end
                g = shared_row(PI, r)
                until = pipeline.quiet_until(PI, PF, SLOTS, g, cfg)
                if until > PF[r, Q_BUSY]:
                    t = pipeline.decode_run(RI, RF, PI, PF, SLOTS, BKT, params[g], g, cfg, cf, t,
                                            min(until, next_event(RF, PI, PF, t_arrival, next_tick, g, g + cfg[C_PP])),
                                            total_used - PI[g, P_USED], itl_hist, itl_edges, trace, oi, of, mix,
                                            scratch)

    # ---- close the books
    for r in range(R):
        if PI[r, P_STATE] != OFF:
            PF[r, Q_GPU_S] += t - PF[r, Q_ON_SINCE]
        oi[O_PREEMPTS] += PI[r, P_PREEMPTS]
    of[OF_END] = t
