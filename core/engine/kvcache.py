"""KV-cache block accounting of one replica, callable from the jitted engine.

Two ways to hold a sequence's KV cache:
  paged     blocks of `block_size` tokens allocated one at a time as the sequence grows
            (vLLM's PagedAttention); a request holds ceil(tokens / block_size) blocks;
  reserved  one contiguous region for the longest the sequence may become (max model length),
            taken when the request is admitted (Orca, FasterTransformer).
Replica columns live in the engine's replica table; this module only does the arithmetic, and,
with prefix caching, keeps the cached blocks and the free queue (below).
"""
import numpy as np

from ..jit import engine_jit
from .layout import (C_BLOCK, C_PC_BITS, C_PC_ENTRIES, N_COUNT, N_FOUND, N_HASH, N_HKEY, N_KEY, N_NEXT, N_PREV,
                     N_REF, N_RING, N_SLOT, P_OFF_CAP, P_OFF_DROPPED, P_OFF_SWEEP, P_OFF_HEAD, P_OFF_LOADED, P_OFF_N, P_OFF_STORED,
                     P_OFF_TAIL,
                     P_BLOCKS, P_PC_EVICTED, P_PC_SHARED, P_PC_ANON, P_PC_CACHED, P_PC_ENTRIES, P_PC_QHEAD, P_PC_QTAIL, P_PC_SPARE, P_USED,
                     R_BLOCKS, R_COMPUTED, R_CONV, R_GROUP, R_LATER, R_REF, R_SHARED)


@engine_jit
def blocks_for(tokens, block_size):
    return (tokens + block_size - 1) // block_size


@engine_jit
def paged_growth(tokens_after, blocks_held, block_size):
    """Blocks a paged sequence must add to hold `tokens_after` tokens."""
    need = blocks_for(tokens_after, block_size) - blocks_held
    return need if need > 0 else 0


@engine_jit
def can_admit(free_blocks, need, watermark):
    """Admission keeps `watermark` blocks free for running sequences to grow into (vLLM's
    watermark avoids preempting right after admitting)."""
    return free_blocks - need >= watermark


@engine_jit
def watermark_blocks(total_blocks, fraction):
    return int(total_blocks * fraction)


# ---------------------------------------------------------------- prefix caching
#
# vLLM v1's automatic prefix caching (vllm/v1/core/kv_cache_manager.py, block_pool.py,
# kv_cache_utils.py), on block counts. A full block is known by a hash of its tokens and of every
# token before it (a chain hash); a prompt whose leading full blocks are in the cache takes them
# (their reference count goes up) and skips their prefill. The pool's blocks that no request
# holds sit in one free queue (FreeKVCacheBlockQueue): a request's blocks join its tail when it
# finishes or is preempted, last block first, so that its prefix stays longest; a cached block
# taken by a hit leaves the queue; a new block is taken from the head, and if the block there
# holds a cached prefix that prefix is evicted (least recently used first). Free blocks in the
# queue count as free: the cache uses memory no request needs, and gives it back on demand.
#
# Tokens are not simulated, so a block's hash is its position and the stream its tokens come from:
# the first R_SHARED tokens of a request are its system prompt's (group R_GROUP), the rest its
# conversation's (R_CONV): a later turn's prompt holds the earlier turns, so every request of a
# conversation is a prefix of one token stream. Only blocks some other request can reuse are
# hashed; the rest are counted, as runs of plain free blocks in the queue (one node each run).
#
# The engine takes blocks by count (the decode cohort takes them in bulk), so evictions are
# applied lazily: before the cache is read or added to, as many blocks as were taken since are
# popped from the queue's head (`sync`). Nothing is added to the queue in between, so the blocks
# popped are the ones vLLM would have handed out.

HASH_MUL = -7046029254386353131  # 0x9E3779B97F4A7C15 (Fibonacci hashing), as a signed 64-bit integer
KEY_BLOCK_BITS = 24  # a key is (stream << 24) | block index: up to 16M blocks of one stream
BUCKET_BITS = 3  # 8 slots of the table (one 64-byte cache line of each of its rows) hold 8 blocks of a stream
BUCKET = 1 << BUCKET_BITS


@engine_jit
def block_key(RI, q, i, bs):
    """The hash of request q's block i, or -1 when no other request can hold the same block."""
    g = RI[q, R_GROUP]
    if g >= 0 and (i + 1) * bs <= RI[q, R_SHARED]:
        return ((g << 1) << KEY_BLOCK_BITS) | i
    c = RI[q, R_CONV]
    if c >= 0:
        return (((c << 1) | 1) << KEY_BLOCK_BITS) | i
    return -1


@engine_jit
def reused_blocks(RI, q, bs):
    """How many of q's leading blocks another request may ask for: its system prompt's full blocks
    (if another request shares it), every block if a later turn continues its conversation."""
    if RI[q, R_CONV] >= 0 and RI[q, R_LATER] == 1:
        return 1 << 40
    return RI[q, R_SHARED] // bs if RI[q, R_GROUP] >= 0 else 0


@engine_jit
def _slot(key, bits):
    """A key's home slot: its group of BUCKET consecutive blocks of one stream hashed to a bucket of
    BUCKET slots, the block's place in the group its slot there, so that a prompt's look-up walks
    one cache line of the table's rows for every BUCKET blocks instead of missing on every block."""
    group = ((key >> BUCKET_BITS) * HASH_MUL) >> (64 - bits + BUCKET_BITS)
    return ((group << BUCKET_BITS) | (key & (BUCKET - 1))) & ((1 << bits) - 1)


# A slot's value (row N_HASH) is node + 1 for a block on the GPU, minus one minus its place in the
# host tier's order for a block there (below), 0 for an empty slot; its key is in row N_HKEY.


@engine_jit
def probe(KC, PI, r, key, bits):
    """The slot holding `key`, or minus one minus the slot where it would go: an empty one, or its
    own left behind when the host tier dropped it (open addressing, linear probing)."""
    mask, head = (1 << bits) - 1, PI[r, P_OFF_HEAD]
    i = _slot(key, bits)
    while True:
        v = KC[r, N_HASH, i]
        if v == 0:
            return -1 - i
        if KC[r, N_HKEY, i] == key:
            return i if v > 0 or -1 - v >= head else -1 - i
        i = (i + 1) & mask


@engine_jit
def find(KC, PI, r, key, bits):
    """The GPU node holding `key`, or -1 (also when the block is only in the host tier)."""
    i = probe(KC, PI, r, key, bits)
    return max(-1, KC[r, N_HASH, i] - 1) if i >= 0 else -1


@engine_jit
def _put(KC, r, i, key, value):
    KC[r, N_HKEY, i] = key
    KC[r, N_HASH, i] = value
    if value > 0:
        KC[r, N_SLOT, value - 1] = i


@engine_jit
def _delete(KC, r, i, bits):
    """Empty slot i, shifting later entries of its probe run back (no tombstones)."""
    mask = (1 << bits) - 1
    j = i
    while True:
        j = (j + 1) & mask
        v = KC[r, N_HASH, j]
        if v == 0:
            break
        key = KC[r, N_HKEY, j]
        k = _slot(key, bits)
        # the entry at j may move to i unless its home slot k lies cyclically in (i, j]
        if (i < j and (k <= i or k > j)) or (i > j and k <= i and k > j):
            _put(KC, r, i, key, v)
            i = j
    KC[r, N_HASH, i] = 0


@engine_jit
def _spare(KC, PI, r):
    node = PI[r, P_PC_SPARE]
    PI[r, P_PC_SPARE] = KC[r, N_NEXT, node]
    return node


@engine_jit
def _unspare(KC, PI, r, node):
    KC[r, N_NEXT, node] = PI[r, P_PC_SPARE]
    PI[r, P_PC_SPARE] = node


@engine_jit
def _push(KC, PI, r, node, head, tail):
    """Node to the tail of the list whose ends are PI columns head and tail (the free queue, the
    host tier), through N_PREV/N_NEXT."""
    t = PI[r, tail]
    KC[r, N_PREV, node] = t
    KC[r, N_NEXT, node] = -1
    if t < 0:
        PI[r, head] = node
    else:
        KC[r, N_NEXT, t] = node
    PI[r, tail] = node


@engine_jit
def _take_out(KC, PI, r, node, head, tail):
    """Node out of the list whose ends are PI columns head and tail."""
    p, n = KC[r, N_PREV, node], KC[r, N_NEXT, node]
    if p < 0:
        PI[r, head] = n
    else:
        KC[r, N_NEXT, p] = n
    if n < 0:
        PI[r, tail] = p
    else:
        KC[r, N_PREV, n] = p


@engine_jit
def _append(KC, PI, r, node):
    _push(KC, PI, r, node, P_PC_QHEAD, P_PC_QTAIL)


@engine_jit
def _append_plain(KC, PI, r, count):
    """`count` freed blocks that hold no cached prefix join the queue's tail (one run)."""
    if count <= 0:
        return
    PI[r, P_PC_ANON] += count
    t = PI[r, P_PC_QTAIL]
    if t >= 0 and KC[r, N_KEY, t] < 0:
        KC[r, N_COUNT, t] += count
        return
    node = _spare(KC, PI, r)
    KC[r, N_KEY, node] = -1
    KC[r, N_COUNT, node] = count
    _append(KC, PI, r, node)


@engine_jit
def _cut(KC, PI, r, node):
    _take_out(KC, PI, r, node, P_PC_QHEAD, P_PC_QTAIL)


@engine_jit
def _unlink(KC, PI, r, node):
    """Take a node out of the queue; two runs of plain blocks that meet become one (so plain runs
    never outnumber the cached blocks between them, and the node table never overflows)."""
    p, n = KC[r, N_PREV, node], KC[r, N_NEXT, node]
    _cut(KC, PI, r, node)
    if p >= 0 and n >= 0 and KC[r, N_KEY, p] < 0 and KC[r, N_KEY, n] < 0:
        KC[r, N_COUNT, p] += KC[r, N_COUNT, n]
        _cut(KC, PI, r, n)
        _unspare(KC, PI, r, n)


@engine_jit
def sync(KC, PI, r, bits):
    """Pop the blocks taken since the last look from the queue's head; a cached block popped is
    evicted. Afterwards the queue holds exactly the pool's free blocks."""
    over = PI[r, P_PC_ANON] + PI[r, P_PC_CACHED] - (PI[r, P_BLOCKS] - PI[r, P_USED])
    while over > 0:
        h = PI[r, P_PC_QHEAD]
        if KC[r, N_KEY, h] < 0:
            k = min(KC[r, N_COUNT, h], over)
            KC[r, N_COUNT, h] -= k
            PI[r, P_PC_ANON] -= k
            over -= k
            if KC[r, N_COUNT, h] > 0:
                continue
        else:
            PI[r, P_PC_CACHED] -= 1
            PI[r, P_PC_EVICTED] += 1
            over -= 1
            if PI[r, P_OFF_CAP] > 0:  # evicted to the host tier, not forgotten
                offload(KC, PI, r, h, bits)
            else:
                _delete(KC, r, KC[r, N_SLOT, h], bits)
                PI[r, P_PC_ENTRIES] -= 1
        _unlink(KC, PI, r, h)
        _unspare(KC, PI, r, h)


# ---------------------------------------------------------------- the host tier (KV offload)
#
# A victim tier: the cached blocks the GPU evicts, kept in host memory, least recently stored
# dropped first. They stay entries of the same hash table, so one lookup walks both tiers, but
# hold no node: the slot's value is minus one minus the block's place in the order stored (P_OFF_TAIL
# places so far), its key kept at that place in a ring (row N_RING), where a block loaded back
# leaves a hole (-1). Dropping the oldest moves the ring's head (P_OFF_HEAD) past it and leaves
# its slot alone: a slot whose place lies behind the head is empty to a probe, taken again by the
# same key, and cleared in one pass over the table once drops since the last (P_OFF_SWEEP) reach a
# quarter of its slots. So storing a block and later dropping it touch one slot, once, and the ring
# in order: a tier holds several times the GPU's blocks, and a node or a probe per block dropped
# would not stay in the processor's cache. A hit there takes a free GPU block and a node again
# (loop.py loads it over the host link).


@engine_jit
def offload(KC, PI, r, node, bits):
    """A cached block the GPU evicts (its node, freed by the caller) moves to the host tier's tail; a
    full tier drops the least recently stored block for good."""
    mask = (1 << bits) - 1
    if PI[r, P_OFF_TAIL] - PI[r, P_OFF_HEAD] > mask:
        _compact(KC, PI, r, bits)
    KC[r, N_RING, PI[r, P_OFF_TAIL] & mask] = KC[r, N_KEY, node]
    KC[r, N_HASH, KC[r, N_SLOT, node]] = -1 - PI[r, P_OFF_TAIL]
    PI[r, P_OFF_TAIL] += 1
    PI[r, P_OFF_N] += 1
    PI[r, P_OFF_STORED] += 1
    if PI[r, P_OFF_N] > PI[r, P_OFF_CAP]:
        while KC[r, N_RING, PI[r, P_OFF_HEAD] & mask] < 0:
            PI[r, P_OFF_HEAD] += 1
        PI[r, P_OFF_HEAD] += 1
        PI[r, P_OFF_N] -= 1
        PI[r, P_PC_ENTRIES] -= 1
        PI[r, P_OFF_DROPPED] += 1
        PI[r, P_OFF_SWEEP] += 1
        if PI[r, P_OFF_SWEEP] > mask >> 2:
            _sweep(KC, PI, r, bits)


@engine_jit
def _sweep(KC, PI, r, bits):
    """Clear the slots of the blocks the tier dropped, in one pass round the table from an empty
    slot: each entry kept moves to the first empty slot from its home on (its run's entries met in
    order, as if the run were filled again), so probes stay valid without a shift per slot cleared."""
    mask, head = (1 << bits) - 1, PI[r, P_OFF_HEAD]
    start = 0
    while KC[r, N_HASH, start] != 0:
        start += 1
    for k in range(1, mask + 1):
        j = (start + k) & mask
        v = KC[r, N_HASH, j]
        if v == 0:
            continue
        if v < 0 and -1 - v < head:  # dropped
            KC[r, N_HASH, j] = 0
            continue
        key = KC[r, N_HKEY, j]
        i = _slot(key, bits)  # its home: in its run, so between the pass's start and j
        while i != j and KC[r, N_HASH, i] != 0:
            i = (i + 1) & mask
        if i != j:
            _put(KC, r, i, key, v)
            KC[r, N_HASH, j] = 0
    PI[r, P_OFF_SWEEP] = 0


@engine_jit
def _compact(KC, PI, r, bits):
    """The ring is full of blocks and holes: move its blocks up against its head, in order. (The
    blocks never exceed half the ring, the most entries the table holds, so this runs at most once
    every half ring of loads.)"""
    mask = (1 << bits) - 1
    to = PI[r, P_OFF_HEAD]
    for at in range(PI[r, P_OFF_HEAD], PI[r, P_OFF_TAIL]):
        key = KC[r, N_RING, at & mask]
        if key >= 0:
            KC[r, N_RING, to & mask] = key
            KC[r, N_HASH, probe(KC, PI, r, key, bits)] = -1 - to
            to += 1
    PI[r, P_OFF_TAIL] = to


@engine_jit
def lookup(RI, KC, PI, r, q, tokens, cfg, nodes):
    """Request q's leading full blocks found in the cache (at most tokens - 1 tokens' worth: the
    last token is always computed, to sample from), how many of them no request holds (taking
    those uses free blocks), and how many of those are in the host tier. Call after `sync`.
    nodes: also count the blocks no request holds and keep what was found for take_hits (a router
    weighing replicas needs neither, and reading each block's node costs a cache miss)."""
    bs, bits = cfg[C_BLOCK], cfg[C_PC_BITS]
    limit = (tokens - 1) // bs
    hits, idle, host = 0, 0, 0
    while hits < limit:
        key = block_key(RI, q, hits, bs)
        if key < 0:
            break
        slot = probe(KC, PI, r, key, bits)
        if slot < 0:
            break
        node = KC[r, N_HASH, slot] - 1
        if node < 0:  # in the host tier: it needs a free GPU block to load into
            host += 1
            idle += 1
            node = -1 - slot
        elif nodes and KC[r, N_REF, node] == 0:
            idle += 1
        if nodes:
            KC[r, N_FOUND, hits] = node  # for take_hits (hits never exceed the entries, nor the row)
        hits += 1
    return hits, idle, host


@engine_jit
def take_hits(RI, KC, PI, r, q, hits, cfg):
    """q holds its first `hits` blocks from the cache (what `lookup` found just before: a node, or
    minus one minus the slot of a block in the host tier): they leave the free queue if no one held
    them, or the tier into a node of their own."""
    bs, bits = cfg[C_BLOCK], cfg[C_PC_BITS]
    for i in range(hits):
        node = KC[r, N_FOUND, i]
        if node < 0:  # back from the host tier into a free GPU block
            slot = -1 - node
            KC[r, N_RING, (-1 - KC[r, N_HASH, slot]) & ((1 << bits) - 1)] = -1
            node = _spare(KC, PI, r)
            KC[r, N_KEY, node] = KC[r, N_HKEY, slot]
            KC[r, N_REF, node] = 0
            KC[r, N_COUNT, node] = 0
            _put(KC, r, slot, KC[r, N_KEY, node], node + 1)
            PI[r, P_OFF_N] -= 1
            PI[r, P_OFF_LOADED] += 1
            PI[r, P_USED] += 1
        elif KC[r, N_REF, node] == 0:
            _unlink(KC, PI, r, node)
            PI[r, P_PC_CACHED] -= 1
            PI[r, P_USED] += 1
        else:
            PI[r, P_PC_SHARED] += bs
        KC[r, N_REF, node] += 1
    RI[q, R_REF] = hits
    RI[q, R_BLOCKS] = hits
    RI[q, R_COMPUTED] = hits * bs


@engine_jit
def register(RI, KC, PI, r, q, upto, cfg):
    """q's blocks are allocated up to token `upto`: its full blocks that others may reuse become
    cache entries at once (vLLM caches blocks when it allocates them, so a request scheduled in
    the same step can hit them). A block some other request registered first stays q's own."""
    bs, bits = cfg[C_BLOCK], cfg[C_PC_BITS]
    i, end = RI[q, R_REF], min(upto // bs, reused_blocks(RI, q, bs))
    if i >= end:
        return
    sync(KC, PI, r, bits)
    while i < end and PI[r, P_PC_ENTRIES] < cfg[C_PC_ENTRIES]:
        key = block_key(RI, q, i, bs)
        if key < 0:
            break
        slot = probe(KC, PI, r, key, bits)
        if slot >= 0:
            break
        node = _spare(KC, PI, r)
        KC[r, N_KEY, node] = key
        KC[r, N_REF, node] = 1
        KC[r, N_COUNT, node] = 0
        _put(KC, r, -1 - slot, key, node + 1)
        PI[r, P_PC_ENTRIES] += 1
        i += 1
    RI[q, R_REF] = i


@engine_jit
def release_cached(RI, KC, PI, r, q, cfg):
    """q lets go of its blocks (finished or preempted), last block first. Its full blocks that
    others may reuse stay cached at the queue's tail; the rest join it as plain free blocks; the
    blocks it shared with other requests stay with them. Returns the blocks freed."""
    bs, bits = cfg[C_BLOCK], cfg[C_PC_BITS]
    sync(KC, PI, r, bits)
    nb, nref = RI[q, R_BLOCKS], RI[q, R_REF]
    own_end = min(RI[q, R_COMPUTED] // bs, nb, reused_blocks(RI, q, bs))  # full blocks another may reuse
    if own_end < nref:
        own_end = nref
    _append_plain(KC, PI, r, nb - own_end)
    freed = nb - own_end
    for i in range(own_end - 1, nref - 1, -1):
        key = block_key(RI, q, i, bs)
        slot = probe(KC, PI, r, key, bits) if key >= 0 and PI[r, P_PC_ENTRIES] < cfg[C_PC_ENTRIES] else 0
        if slot < 0:
            node = _spare(KC, PI, r)
            KC[r, N_KEY, node] = key
            KC[r, N_REF, node] = 0
            KC[r, N_COUNT, node] = 0
            _put(KC, r, -1 - slot, key, node + 1)
            PI[r, P_PC_ENTRIES] += 1
            PI[r, P_PC_CACHED] += 1
            _append(KC, PI, r, node)
        else:
            _append_plain(KC, PI, r, 1)
        freed += 1
    for i in range(nref - 1, -1, -1):
        node = find(KC, PI, r, block_key(RI, q, i, bs), bits)
        KC[r, N_REF, node] -= 1
        if KC[r, N_REF, node] == 0:
            PI[r, P_PC_CACHED] += 1
            _append(KC, PI, r, node)
            freed += 1
        else:
            PI[r, P_PC_SHARED] -= bs
    RI[q, R_REF] = 0
    return freed


def books(PI, KC, r: int) -> dict:
    """The block pool of replica r, counted from its tables (plain Python, for tests and reports):
    blocks held by requests, plain free blocks and cached blocks no request holds, and the blocks
    in its host tier, with the queue and the tier walked node by node and the hash table read slot
    by slot, not taken from the counters."""
    if KC.shape[2] == 1:
        raise ValueError("prefix caching was off in this run (or nothing in its workload could be reused)")
    sync(KC, PI, r, int(KC.shape[2]).bit_length() - 1)
    plain = cached = nodes = 0
    node = PI[r, P_PC_QHEAD]
    while node >= 0:
        if KC[r, N_KEY, node] < 0:
            plain += int(KC[r, N_COUNT, node])
        else:
            cached += 1
            assert KC[r, N_REF, node] == 0, "a block in the free queue is held by a request"
        nodes += 1
        node = KC[r, N_NEXT, node]
    keys, values = KC[r, N_HKEY], KC[r, N_HASH]
    gpu = (values > 0).nonzero()[0]
    tier = ((values < 0) & (-1 - values >= PI[r, P_OFF_HEAD])).nonzero()[0]  # the rest were dropped
    slots = np.concatenate([gpu, tier])
    held = values[gpu] - 1
    assert (KC[r, N_SLOT, held] == gpu).all() and (KC[r, N_KEY, held] == keys[gpu]).all(), \
        "the hash table and its nodes disagree"
    mask = KC.shape[2] - 1
    ring = [int(KC[r, N_RING, at & mask]) for at in range(PI[r, P_OFF_HEAD], PI[r, P_OFF_TAIL])]
    host = [key for key in ring if key >= 0]
    assert sorted(host) == sorted(int(k) for k in keys[tier]) and \
        (KC[r, N_RING, (-1 - values[tier]) & mask] == keys[tier]).all(), \
        "a block in the host tier is not in its ring, or twice"
    entries = len(slots)
    return dict(pool=int(PI[r, P_BLOCKS]), used=int(PI[r, P_USED]), free=plain, cached=cached, entries=entries,
                host=len(host), host_capacity=int(PI[r, P_OFF_CAP]),
                counted=dict(free=int(PI[r, P_PC_ANON]), cached=int(PI[r, P_PC_CACHED]),
                             entries=int(PI[r, P_PC_ENTRIES]), host=int(PI[r, P_OFF_N])))
