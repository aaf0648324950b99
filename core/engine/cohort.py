"""A replica's decode cohort: its running requests that are one token behind, as one aggregate.

Every step, each decoding sequence adds one token, reads its whole KV cache, and maybe takes one
more KV block. Doing that request by request makes a step cost O(batch); instead each replica
keeps a decode-step counter S and each member an offset, so that at any time

    computed tokens = R_V + S        generated tokens = R_W + S

and the step's aggregates follow from sums kept as members join and leave:

    summed context      = sum(R_V) + members * (S + 1)
    new KV blocks       = members whose next token starts a block: a bucket count by
                          (-R_V) mod block_size, read at S mod block_size
    attention partitions of a split-KV kernel: likewise by (-R_V) mod the partition size
    finishing members   = the top of a min-heap on R_OUTPUT - R_W (the S at which they are done)

A step then costs O(1) for the whole cohort, plus O(log n) when a request joins or leaves;
a member's own columns are written back ("materialised") when it leaves.

Speculative decoding (physics/speculative.py) is a rule on the same counter: each member verifies
its pending token and k draft tokens in a step, so the step takes the blocks of k + 1 more tokens,
and S moves on by the tokens accepted, the same for every member: one draw a step for the whole
cohort (drawing per member would make a step cost O(batch)). The batch's tokens a step then have
the acceptance model's mean; what is lost is only the spread between sequences of one step, which
each request's time per output token averages out over its many steps. The rejected drafts' blocks
go back when the step completes. A member that a jump takes past its last token stops at it.
"""
from ..jit import engine_jit, step_jit
from ..physics.costmodel import KV_HEADS, SPEC_BINS, SPEC_K, SPEC_SURV, SPEC_TABLE
from ..physics.speculative import SPEC_MAX

from .kvcache import blocks_for
from .layout import (B_BLOCK, B_SPLIT, C_BLOCK, C_SPLIT, F_LAST, L_FRESH, M_CTAS, M_DECODES, M_DRAFTS, M_ROWS,
                     P_LANE, M_SUM_CTX, M_TOKENS, P_COH_N, P_COH_PARTS, P_COH_STEPPED, P_COH_V, P_NFRESH, P_NSAMPLED,
                     P_FREED, P_S, P_S_BLOCK, P_S_SPLIT, P_SPEC_ADV, P_SPEC_DRAWS, P_SPEC_FREE, P_STORED, P_USED,
                     Q_LAST_DECODE,
                     R_BLOCKS, R_COMPUTED, R_FRESH, R_GENERATED, R_OUTPUT, R_STATE, R_STREAM, R_V, R_W, S_DECODE)
from .queues import heap_push, heap_remove


@engine_jit
def split_parts(tokens, split):
    return (tokens + split - 1) // split


@engine_jit
def bucket(BKT, r, kind, phase, period, n):
    """Count n more members at `phase` of a bucket row. A row repeats its period as far as SPEC_MAX
    phases past its end, so that the window of a speculative step's next phases is one contiguous
    run of it, wherever it starts (no wrap-around to test in the step's loops)."""
    for c in range(1 + (SPEC_MAX + period - 1) // period):
        BKT[r, kind, phase + c * period] += n


@engine_jit
def join(RI, PI, SLOTS, BKT, r, q, cfg):
    """Request q (KV cached up to R_COMPUTED, one token behind) starts decoding with the cohort."""
    S = PI[r, P_S]
    c = RI[q, R_COMPUTED]
    v = c - S
    RI[q, R_V] = v
    RI[q, R_W] = RI[q, R_GENERATED] - S
    RI[q, R_STATE] = S_DECODE
    PI[r, P_COH_N] += 1
    PI[r, P_COH_V] += v
    PI[r, P_STORED] -= c  # now counted by the cohort's sums
    bucket(BKT, r, B_BLOCK, (-v) % cfg[C_BLOCK], cfg[C_BLOCK], 1)
    split = cfg[C_SPLIT]
    if split > 0:
        bucket(BKT, r, B_SPLIT, (-v) % split, split, 1)
        PI[r, P_COH_PARTS] += split_parts(c, split)
    heap_push(RI, SLOTS, PI, r, q)
    RI[q, R_FRESH] = 1  # its first cohort step has its own inter-token gap
    SLOTS[r, L_FRESH, PI[r, P_NFRESH]] = q
    PI[r, P_NFRESH] += 1
    if RI[q, R_STREAM] >= 0:
        PI[r, P_NSAMPLED] += 1


@engine_jit
def leave(RI, RF, PI, PF, SLOTS, BKT, r, q, cfg, paged):
    """Request q leaves the cohort (finished or preempted): write its own columns back."""
    S = PI[r, P_S]
    v = RI[q, R_V]
    c = v + S
    RI[q, R_COMPUTED] = c
    RI[q, R_GENERATED] = min(RI[q, R_W] + S, RI[q, R_OUTPUT])  # a speculative jump stops at the last token
    if paged:
        RI[q, R_BLOCKS] = blocks_for(c, cfg[C_BLOCK])
    if RI[q, R_FRESH] == 1:
        RI[q, R_FRESH] = 0  # never decoded with the cohort: its last token time stands
    else:
        RF[q, F_LAST] = PF[r, Q_LAST_DECODE]
    PI[r, P_COH_N] -= 1
    PI[r, P_COH_V] -= v
    PI[r, P_STORED] += c
    bucket(BKT, r, B_BLOCK, (-v) % cfg[C_BLOCK], cfg[C_BLOCK], -1)
    split = cfg[C_SPLIT]
    if split > 0:
        bucket(BKT, r, B_SPLIT, (-v) % split, split, -1)
        PI[r, P_COH_PARTS] -= split_parts(c, split)
    heap_remove(RI, SLOTS, PI, r, q)
    if RI[q, R_STREAM] >= 0:
        PI[r, P_NSAMPLED] -= 1


@engine_jit
def blocks_needed(PI, BKT, r, cfg, k):
    """New KV blocks the cohort takes this step (paged KV): members whose next token, or one of
    the k draft tokens after it, starts a block."""
    phase = PI[r, P_S_BLOCK]
    need = 0
    for i in range(k + 1):  # a contiguous run of the row (bucket)
        need += BKT[r, B_BLOCK, phase + i]
    return need


@engine_jit
def step_blocks(RI, PI, r, q, cfg, k):
    """Blocks member q takes in this step (its next token and k draft tokens)."""
    bs = cfg[C_BLOCK]
    c = RI[q, R_V] + PI[r, P_S]
    n = 0
    for i in range(k + 1):
        if (c + i) % bs == 0:
            n += 1
    return n


# The draws u are a Weyl sequence (x += golden ratio x 2^32, mod 2^32; u = x / 2^32): it is
# equidistributed, so the draws' mean converges at O(1/n), faster than random numbers'
# O(1/sqrt(n)), a run is reproducible without a seed, and a draw is an add and a mask
WEYL_STEP = 2654435769  # round(2^32 / golden ratio)
WEYL_MASK = (1 << 32) - 1
WEYL_SCALE = 4294967296.0
SPEC_BIN_BITS = SPEC_BINS.bit_length() - 1  # a draw's bin in the cost model's table: its top bits
WEYL_START = 1779033703  # replica r starts at r x this (the fraction of sqrt(2) x 2^32), so that
# replicas stepping together do not draw alike


@step_jit
def next_draw(x):
    return (x + WEYL_STEP) & WEYL_MASK


@engine_jit
def add_step(PI, BKT, r, cfg, p, paged, mix):
    """The cohort decodes in this step: take its blocks and add it to the step's token mix."""
    m = PI[r, P_COH_N]
    if m == 0:
        return
    S = PI[r, P_S]
    k = int(p[SPEC_K])
    if k == 0:
        PI[r, P_SPEC_ADV] = 1
        if paged:  # from the replica's pool (a pipeline's lanes share lane 0's)
            PI[r - PI[r, P_LANE], P_USED] += BKT[r, B_BLOCK, PI[r, P_S_BLOCK]]
    else:  # the step's draw, and the blocks of its pending token and drafts
        x = next_draw(PI[r, P_SPEC_DRAWS])
        PI[r, P_SPEC_DRAWS] = x
        j, taken, keep, _ = speculative_step(p, BKT, r, x, k, PI[r, P_S_BLOCK], 0, 1)
        PI[r, P_SPEC_ADV] = j
        if paged:
            PI[r - PI[r, P_LANE], P_USED] += taken
            PI[r, P_SPEC_FREE] = taken - keep  # blocks only rejected drafts start: back when the step completes
    kv_heads = p[KV_HEADS]
    split = cfg[C_SPLIT]
    if split > 0:  # split-KV kernel: one thread block per partition of each context
        PI[r, P_COH_PARTS] += BKT[r, B_SPLIT, PI[r, P_S_SPLIT]]  # contexts entering a new partition
        mix[M_CTAS] += kv_heads * PI[r, P_COH_PARTS]
    else:  # one thread block per sequence and KV head
        mix[M_CTAS] += kv_heads * m
    mix[M_TOKENS] += m * (k + 1)  # every member's pending token and its drafts
    mix[M_DECODES] += m
    mix[M_DRAFTS] += m * k
    mix[M_SUM_CTX] += PI[r, P_COH_V] + m * (S + 1)
    mix[M_ROWS] += m * (k + 1)  # the target's logits at every position it verifies
    PI[r, P_COH_STEPPED] = 1


@engine_jit
def advance(PI, BKT, r, cfg):
    """The cohort has decoded one step: S and its phases move on by the tokens each member gained
    (one, or under speculative decoding 1 + the drafts accepted)."""
    j = PI[r, P_SPEC_ADV]
    if j == 1:
        PI[r, P_S] += 1
        b = PI[r, P_S_BLOCK] + 1
        PI[r, P_S_BLOCK] = 0 if b == cfg[C_BLOCK] else b
        if cfg[C_SPLIT] > 0:
            k = PI[r, P_S_SPLIT] + 1
            PI[r, P_S_SPLIT] = 0 if k == cfg[C_SPLIT] else k
    else:
        PI[r, P_S] += j
        b = PI[r, P_S_BLOCK] + j
        while b >= cfg[C_BLOCK]:  # j is at most SPEC_MAX + 1: a subtraction or two, not a division
            b -= cfg[C_BLOCK]
        PI[r, P_S_BLOCK] = b
        if cfg[C_SPLIT] > 0:
            PI[r, P_COH_PARTS], PI[r, P_S_SPLIT] = enter_partitions(BKT, r, PI[r, P_COH_PARTS], PI[r, P_S_SPLIT], j,
                                                                    j - 1, cfg[C_SPLIT])
    if PI[r, P_SPEC_FREE] > 0:
        PI[r - PI[r, P_LANE], P_USED] -= PI[r, P_SPEC_FREE]
        PI[r - PI[r, P_LANE], P_FREED] += PI[r, P_SPEC_FREE]
        PI[r, P_SPEC_FREE] = 0


@engine_jit
def enter_partitions(BKT, r, parts, phase, j, k, split):
    """(partitions, split phase) after a jump of j <= k + 1 tokens: contexts that enter a partition
    at the accepted tokens past the first (the first's were counted when the step started).
    Branch-free in j, as speculative_step."""
    for i in range(k):  # a contiguous run of the doubled row (bucket)
        parts += BKT[r, B_SPLIT, phase + 1 + i] * (i < j - 1)
    phase += j
    while phase >= split:
        phase -= split
    return parts, phase


@step_jit
def speculative_step(p, BKT, r, x, k, phase, split_phase, j):
    """A speculative step of draw x over its k + 1 positions from the block phase: (tokens each
    member gains, 1 plus the drafts accepted: the most a with u = x / 2^32 below the chance that at
    least a are accepted; the blocks the step takes; those of them its accepted tokens keep; the
    partitions that the step completing before it, of j tokens, enters past its first token from
    split_phase: enter_partitions, which a quiet run folds in here). The tokens gained come from the
    draw's bin of the cost model's table, then the survival chances inside that bin (rarely any);
    the sums over positions are branch-free in the draw, which is random: a branch on it would
    mispredict, and a loop that stops at the draw is such a branch."""
    u = x / WEYL_SCALE
    gained = int(p[SPEC_TABLE + (x >> (32 - SPEC_BIN_BITS))])
    while gained <= k and u < p[SPEC_SURV + gained - 1]:
        gained += 1
    need, keep, parts = 0, 0, 0
    for i in range(k + 1):
        n = BKT[r, B_BLOCK, phase + i]
        need += n
        keep += n * (i < gained)
    for i in range(k):
        parts += BKT[r, B_SPLIT, split_phase + 1 + i] * (i < j - 1)
    return gained, need, keep, parts


@engine_jit
def stored_after_step(PI, r):
    """Tokens the cohort holds once its scheduled step completes."""
    S = PI[r, P_S] + PI[r, P_COH_STEPPED] * PI[r, P_SPEC_ADV]
    return PI[r, P_COH_V] + PI[r, P_COH_N] * S
