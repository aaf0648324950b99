"""KV-cache block accounting of one replica, callable from the jitted engine.

Two ways to hold a sequence's KV cache:
  paged     blocks of `block_size` tokens allocated one at a time as the sequence grows
            (vLLM's PagedAttention); a request holds ceil(tokens / block_size) blocks; admission
            takes what the prompt needs now (vLLM), or, under no-evict admission (TensorRT-LLM),
            only while the pool holds every admitted request at its whole length;
  reserved  one contiguous region for the longest the sequence may become (max model length),
            taken when the request is admitted (Orca, FasterTransformer).
Replica columns live in the engine's replica table; this module only does the arithmetic, and,
with prefix caching, keeps the cached blocks and the free queue (below).
"""
import numpy as np
from numba.extending import overload

from ..jit import engine_jit, prefetch, rows_from, step_jit
from .layout import (C_BLOCK, C_OFF_BITS, C_PC_BITS, C_PC_ENTRIES, N_COUNT, N_FOUND, N_GMEMO, N_HASH, N_HKEY,
                     N_KEY, N_NEXT, N_PREV, N_REF, N_SLOT, N_TIER, P_BLOCKS, P_OFF_CAP, P_OFF_DROPPED, P_OFF_GHOSTS,
                     P_OFF_GROUPS, P_OFF_HEAD, P_OFF_LOADED, P_OFF_N, P_OFF_STORED, P_OFF_TAIL, P_OFF_TBITS,
                     P_PC_ANON, P_PC_CACHED, P_PC_ENTRIES, P_PC_EVICTED, P_PC_GEPOCH, P_PC_QHEAD, P_PC_QTAIL, P_PC_SHARED,
                     P_FREED, P_PC_SPARE, P_USED, R_BLOCKS, R_COMPUTED, R_CONV, R_EARLIER, R_GROUP, R_KEEP, R_KEEP_AT,
                     R_LATER, R_REF, R_SHARED, R_STATE, S_DONE)


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


# ---------------------------------------------------------------- a preempted request's own blocks
#
# vLLM caches every full block a request computes (kv_cache_utils.py: request.block_hashes), shared
# or not, and a preempted request's blocks join the free queue's tail like a finished one's
# (kv_cache_manager.free, last block first), so its recompute finds the leading blocks no allocation
# has reached since (scheduler.py: a preempted request is scheduled again with its computed blocks
# looked up). With cache tables the request's blocks become entries like any reusable block
# (keep_cached); where no request shares a block the engine keeps no tables, and follows the free
# queue by counts instead (keep, kept_blocks): blocks taken since the preemption leave the queue
# from its head, and the request's blocks sit behind the blocks that were free before them.


@engine_jit
def keep_cached(RI, q):
    """Before q's blocks go back (recompute preemption) on a replica with cache tables: its full
    blocks stay entries, as a conversation's do while a later turn follows, under a stream of its
    own where it has none (past every conversation's: a conversation holds at least one request)."""
    if RI[q, R_CONV] < 0:
        RI[q, R_CONV] = RI.shape[0] + q
    RI[q, R_LATER] = 1


@engine_jit
def keep(RI, PI, g, q, bs):
    """Before q's blocks go back (recompute preemption): where its full blocks land in the free
    queue of pool row g, as blocks ever taken when the first of them is handed out."""
    nb = RI[q, R_BLOCKS]
    k = min(RI[q, R_COMPUTED] // bs, nb)
    RI[q, R_KEEP] = k
    RI[q, R_KEEP_AT] = PI[g, P_USED] + PI[g, P_FREED] + (PI[g, P_BLOCKS] - PI[g, P_USED]) + (nb - k)


@engine_jit
def kept_blocks(RI, PI, g, q):
    """q's leading blocks still cached since its preemption (keep): the queue's head has handed out
    its blocks from the last one on, one per block taken past R_KEEP_AT."""
    k = RI[q, R_KEEP]
    gone = PI[g, P_USED] + PI[g, P_FREED] - RI[q, R_KEEP_AT]
    if gone <= 0:
        return k
    return k - gone if gone < k else 0


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
# hashed; the rest are counted, as runs of plain free blocks in the queue (one node each run). So
# are a finished conversation's blocks (dead_blocks): cached, but gone from the table, since no
# request can ask for them again, they wait in the queue as one run of dead blocks, evicted (and
# stored to the host tier) in bulk: the room they take is vLLM's, the work per block is not.
#
# The engine takes blocks by count (the decode cohort takes them in bulk), so evictions are
# applied lazily: before the cache is read or added to, as many blocks as were taken since are
# popped from the queue's head (`sync`). Nothing is added to the queue in between, so the blocks
# popped are the ones vLLM would have handed out.

HASH_MUL = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / the golden ratio (Fibonacci hashing)
KEY_BLOCK_BITS = 24  # a key is (stream << 24) | block index: up to 16M blocks of one stream
BUCKET_BITS = 3  # 8 slots of the table (one 64-byte cache line of each of its rows) hold 8 blocks of a stream
BUCKET = 1 << BUCKET_BITS
PLAIN_RUN, DEAD_RUN = -1, -2  # a queue node's key for a run of blocks (N_COUNT of them) with no entry


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
def _fib_hash(x, bits):
    """The top `bits` bits of x * HASH_MUL, wrapping. Unsigned: a signed product that overflows is
    undefined to the compiler, which may then fold away a probe whose key it knows is not negative."""
    return np.int64((np.uint64(x) * HASH_MUL) >> np.uint64(64 - bits))


@engine_jit
def _slot(key, bits):
    """A key's home slot: its group of BUCKET consecutive blocks of one stream hashed to a bucket of
    BUCKET slots, the block's place in the group its slot there, so that a prompt's look-up walks
    one cache line of the table's rows for every BUCKET blocks instead of missing on every block."""
    return (_fib_hash(key >> BUCKET_BITS, bits - BUCKET_BITS) << BUCKET_BITS) | (key & (BUCKET - 1))


# The GPU table (rows N_HASH, N_HKEY; 2 ** C_PC_BITS slots, sized for the replica's GPU blocks): a
# slot's value is node + 1 (0: empty), its key the block's. The host tier keeps a table of its own
# (below), so that the GPU's, which every look-up, registration and release walks, stays as small as
# the GPU's blocks make it and in the processor's cache however large the tier. Both tables are
# probed by the same code: on the GPU's rows, or on the tier's words (a slot's key and value side
# by side, so every other word).


@engine_jit
def _home(key, bits, host):
    """A key's home slot: in the GPU table a block's (_slot), in the tier's a group of blocks'."""
    return _fib_hash(key, bits) if host else _slot(key, bits)


def _item(a, r, row, i):
    """a[r, row, i] of a replica's 3-d tables, or a[row + i] of a run of words (a 1-d array)."""
    return a[r, row, i] if a.ndim == 3 else a[row + i]


def _set_item(a, r, row, i, value):
    if a.ndim == 3:
        a[r, row, i] = value
    else:
        a[row + i] = value


@overload(_item)
def _item_jit(a, r, row, i):
    if a.ndim == 3:
        return lambda a, r, row, i: a[r, row, i]
    return lambda a, r, row, i: a[row + i]


@overload(_set_item)
def _set_item_jit(a, r, row, i, value):
    if a.ndim == 3:
        def set3(a, r, row, i, value):
            a[r, row, i] = value
        return set3

    def set1(a, r, row, i, value):
        a[row + i] = value
    return set1


@engine_jit
def _probe(T, r, vrow, krow, key, bits, host):
    """The slot of a table holding `key`, or minus one minus the empty slot where it would go (open
    addressing, linear probing). Slot i's value (0: empty) is _item(T, r, vrow, s i), its key
    _item(T, r, krow, s i): the GPU's rows N_HASH and N_HKEY of the replica's tables (s = 1), or
    the tier's words from vrow and krow on (s = 2: key and value side by side)."""
    step = 2 if host else 1
    mask = (1 << bits) - 1
    i = _home(key, bits, host)
    while True:
        if _item(T, r, vrow, step * i) == 0:
            return -1 - i
        if _item(T, r, krow, step * i) == key:
            return i
        i = (i + 1) & mask


@engine_jit
def _shift_back(T, r, vrow, krow, i, bits, host):
    """Empty slot i of a table (as _probe's), shifting later entries of its probe run back (no
    tombstones); a GPU block moved keeps its node's back-pointer (row N_SLOT)."""
    step = 2 if host else 1
    mask = (1 << bits) - 1
    j = i
    while True:
        j = (j + 1) & mask
        v = _item(T, r, vrow, step * j)
        if v == 0:
            break
        key = _item(T, r, krow, step * j)
        k = _home(key, bits, host)
        # the entry at j may move to i unless its home slot k lies cyclically in (i, j]
        if (i < j and (k <= i or k > j)) or (i > j and k <= i and k > j):
            _set_item(T, r, krow, step * i, key)
            _set_item(T, r, vrow, step * i, v)
            if not host:
                _set_item(T, r, N_SLOT, v - 1, i)
            i = j
    _set_item(T, r, vrow, step * i, 0)


@engine_jit
def probe(KC, r, key, bits):
    """The GPU table's slot holding `key`, or minus one minus the empty slot where it would go."""
    return _probe(KC, r, N_HASH, N_HKEY, key, bits, False)


@engine_jit
def _put(KC, r, i, key, node):
    KC[r, N_HKEY, i] = key
    KC[r, N_HASH, i] = node + 1
    KC[r, N_SLOT, node] = i


@engine_jit
def _delete(KC, r, i, bits):
    """Empty GPU slot i."""
    _shift_back(KC, r, N_HASH, N_HKEY, i, bits, False)


@step_jit
def absent(KC, PI, r, key, cfg, group, held):
    """The GPU slot where `key` goes when neither tier holds it, else -1 (a block another request
    registered first, on the GPU or in the host tier, stays this request's own). A request's keys
    come a group at a time, so the host tier's blocks of the last group asked for (`group`, `held`:
    a bit a block) come back with the slot, to be passed to the next call (-1, 0 at first)."""
    slot = probe(KC, r, key, cfg[C_PC_BITS])
    if slot >= 0:
        return -1, group, held
    if PI[r, P_OFF_CAP] > 0:
        if key >> BUCKET_BITS != group:
            group, held = key >> BUCKET_BITS, host_blocks(KC, PI, r, key >> BUCKET_BITS, cfg)
        if (held >> (key & (BUCKET - 1))) & 1 == 1:
            return -1, group, held
    return -1 - slot, group, held


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
    """Node to the tail of the list whose ends are PI columns head and tail, through N_PREV/N_NEXT."""
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
def _append_run(KC, PI, r, count, kind):
    """`count` freed blocks join the queue's tail as one run: plain (PLAIN_RUN: they hold no cached
    prefix) or dead (DEAD_RUN: cached, but no request can ask for them again)."""
    if count <= 0:
        return
    if kind == PLAIN_RUN:
        PI[r, P_PC_ANON] += count
    else:
        PI[r, P_PC_CACHED] += count
    t = PI[r, P_PC_QTAIL]
    if t >= 0 and KC[r, N_KEY, t] == kind:
        KC[r, N_COUNT, t] += count
        return
    node = _spare(KC, PI, r)
    KC[r, N_KEY, node] = kind
    KC[r, N_COUNT, node] = count
    _append(KC, PI, r, node)


@engine_jit
def _cut(KC, PI, r, node):
    _take_out(KC, PI, r, node, P_PC_QHEAD, P_PC_QTAIL)


@engine_jit
def _unlink(KC, PI, r, node):
    """Take a node out of the queue; two runs of the same kind that meet become one (every node
    holds a block at least, so the node table never overflows)."""
    p, n = KC[r, N_PREV, node], KC[r, N_NEXT, node]
    _cut(KC, PI, r, node)
    if p >= 0 and n >= 0 and KC[r, N_KEY, p] < 0 and KC[r, N_KEY, p] == KC[r, N_KEY, n]:
        KC[r, N_COUNT, p] += KC[r, N_COUNT, n]
        _cut(KC, PI, r, n)
        _unspare(KC, PI, r, n)


@step_jit
def sync(KC, PI, r, cfg):
    """Pop the blocks taken since the last look from the queue's head; a cached block popped is
    evicted (to the host tier, if there is one). Afterwards the queue holds exactly the pool's free
    blocks. Inlined where it is called, so that a look that finds nothing taken costs a comparison,
    not a call (the prefix router looks at every replica for every arrival)."""
    if PI[r, P_PC_ANON] + PI[r, P_PC_CACHED] > PI[r, P_BLOCKS] - PI[r, P_USED]:
        _sync(KC, PI, r, cfg)


@engine_jit
def _sync(KC, PI, r, cfg):
    if PI[r, P_OFF_CAP] > 0:
        _evict(KC, PI, r, cfg, True)
    else:
        _evict(KC, PI, r, cfg, False)


@step_jit
def _evict(KC, PI, r, cfg, tier):
    """sync's loop, compiled once with the tier's store inlined and once without it (`tier` is a
    constant in each), so that a replica without a tier runs no line of it. Blocks evicted one after
    another are mostly one request's, of a few groups (BUCKET consecutive blocks of a stream): the
    tier stores a group's run at once (store: group, mask and order of the blocks in waiting)."""
    bits = cfg[C_PC_BITS]
    over = PI[r, P_PC_ANON] + PI[r, P_PC_CACHED] - (PI[r, P_BLOCKS] - PI[r, P_USED])
    group, mask, order, count = -1, 0, 0, 0
    while over > 0:
        h = PI[r, P_PC_QHEAD]
        kind = KC[r, N_KEY, h]
        if kind < 0:
            k = min(KC[r, N_COUNT, h], over)
            KC[r, N_COUNT, h] -= k
            over -= k
            if kind == PLAIN_RUN:
                PI[r, P_PC_ANON] -= k
            else:  # dead blocks: evicted as cached ones are, in one go
                PI[r, P_PC_CACHED] -= k
                PI[r, P_PC_EVICTED] += k
                if tier:
                    if count > 0:
                        store(KC, PI, r, group, mask, order, count, cfg)
                        count = 0
                    offload_dead(KC, PI, r, k, cfg)
            if KC[r, N_COUNT, h] > 0:
                continue
        else:
            PI[r, P_PC_CACHED] -= 1
            PI[r, P_PC_EVICTED] += 1
            over -= 1
            key = KC[r, N_KEY, h]
            _moved(PI, r, key)
            if tier:  # evicted to the host tier, not forgotten
                if count > 0 and key >> BUCKET_BITS != group:
                    store(KC, PI, r, group, mask, order, count, cfg)
                    count = 0
                if count == 0:
                    group, mask, order = key >> BUCKET_BITS, 0, 0
                    # the group's slot in the tier's table, cold: in cache by the time it is stored
                    words, n = _tier(KC, r, cfg)
                    prefetch(words, n + 2 * _home(group, PI[r, P_OFF_TBITS], True))
                mask |= 1 << (key & (BUCKET - 1))
                order |= (key & (BUCKET - 1)) << (BUCKET_BITS * count)
                count += 1
            else:
                PI[r, P_PC_ENTRIES] -= 1
            _delete(KC, r, KC[r, N_SLOT, h], bits)
        _unlink(KC, PI, r, h)
        _unspare(KC, PI, r, h)
    if tier and count > 0:
        store(KC, PI, r, group, mask, order, count, cfg)


# ---------------------------------------------------------------- the host tier (KV offload)
#
# A victim tier: the cached blocks the GPU evicts, kept in host memory, least recently stored
# dropped first; a block is in one tier or the other, never both. Its words (_tier) hold a ring of
# 2 ** C_OFF_BITS keys in the order stored, from P_OFF_HEAD (the oldest) to P_OFF_TAIL; after it
# the tier's table, a slot a group of BUCKET consecutive blocks of a stream, not a slot a block:
# the group's key and a state word side by side (four slots a cache line), the state's low BUCKET
# bits saying which of the group's blocks are in the tier; after that, room to stage the table's
# groups when it grows. The table grows (P_OFF_TBITS) to stay at most half full of the groups it
# holds (P_OFF_GROUPS), no larger: a stream is stored and dropped in runs of consecutive blocks, so
# the groups are about an eighth of the blocks, and a table that small stays in the processor's
# cache where a slot a block, or a table sized for the worst case, would miss on every block
# evicted and dropped.
#
# A block loaded back leaves its ring entry behind, a ghost, counted in its group's state word (a
# nibble a block above the low bits; P_OFF_GHOSTS in all): a key's ghosts are always older than its
# copy in the tier, if any, so the head meeting a key whose ghost count is not zero drops a ghost,
# not the block. Ghosts leave the ring in one pass once they reach a quarter of it (_compact).
#
# Dead blocks (a finished conversation's: dead_blocks) take room in the tier as in the GPU's queue,
# and nothing else: a run of them is one word of the ring, minus their count, with no group in the
# table; stored and dropped by the run.

GHOST_BITS = 4  # a block's ghost count in its group's state word
GHOST_MAX = (1 << GHOST_BITS) - 1
HOST_TABLE_BITS = 10  # the tier table's first size


def tier_words(off_bits: int) -> int:
    """The words a tier of 2 ** off_bits ring places takes: the ring, the table at its largest
    (2 ** off_bits slots of two words) and the staging of a growth (at most half of the slots
    before it, of two words)."""
    return (1 << off_bits) + (2 << off_bits) + (1 << max(off_bits - 1, 0))


@engine_jit
def _tier(KC, r, cfg):
    """Replica r's host tier: its words (layout.N_TIER) and n, its ring's size. Word `at & (n - 1)`
    is a place in the ring; the table's slot i is a group's key at word n + 2 i and its state at
    n + 2 i + 1; a growth is staged from word 3 n on. (Offsets, not slices: a slice costs a dozen
    instructions, and the tier is read on every block evicted.)"""
    return rows_from(KC, r, N_TIER, (KC.shape[1] - N_TIER) * KC.shape[2]), 1 << cfg[C_OFF_BITS]


@engine_jit
def host_slot(words, n, PI, r, group):
    """The tier table's slot of a group of blocks, or minus one minus the empty slot where it would go."""
    return _probe(words, 0, n + 1, n, group, PI[r, P_OFF_TBITS], True)


@engine_jit
def in_host(KC, PI, r, key, cfg):
    """Whether the block is in the host tier."""
    return (host_blocks(KC, PI, r, key >> BUCKET_BITS, cfg) >> (key & (BUCKET - 1))) & 1 == 1


@engine_jit
def host_blocks(KC, PI, r, group, cfg):
    """The group's blocks in the host tier, a bit a block (its state word's low BUCKET bits)."""
    words, n = _tier(KC, r, cfg)
    i = host_slot(words, n, PI, r, group)
    return words[n + 2 * i + 1] & ((1 << BUCKET) - 1) if i >= 0 else 0


@engine_jit
def _set_state(words, n, PI, r, i, state):
    """A group's new state; a group with no block in the tier and no ghost leaves the table, later
    entries of its probe run shifting back (no tombstones)."""
    if state != 0:
        words[n + 2 * i + 1] = state
        return
    PI[r, P_OFF_GROUPS] -= 1
    _shift_back(words, 0, n + 1, n, i, PI[r, P_OFF_TBITS], True)


@engine_jit
def _grow(words, n, PI, r):
    """Double the tier table, its groups staged past its largest size and placed again."""
    stage = 3 * n
    count = 0
    for i in range(1 << PI[r, P_OFF_TBITS]):
        if words[n + 2 * i + 1] != 0:
            words[stage + 2 * count] = words[n + 2 * i]
            words[stage + 2 * count + 1] = words[n + 2 * i + 1]
            words[n + 2 * i + 1] = 0
            count += 1
    PI[r, P_OFF_TBITS] += 1
    for k in range(count):
        group = words[stage + 2 * k]
        i = -1 - host_slot(words, n, PI, r, group)
        words[n + 2 * i] = group
        words[n + 2 * i + 1] = words[stage + 2 * k + 1]


@engine_jit
def _ghost_shift(key):
    return BUCKET + GHOST_BITS * (key & (BUCKET - 1))


@engine_jit
def store(KC, PI, r, group, mask, order, count, cfg):
    """`count` cached blocks of one group, which the GPU evicted one after another, move to the host
    tier's tail: block `(order >> 3 j) & 7` of the group j-th (`mask`: all of them), with one look-up
    of the group's slot for them all; a full tier drops the least recently stored blocks for good.
    (The drops after the stores, not between them, drop the same blocks: both take from the head.)"""
    words, n = _tier(KC, r, cfg)
    if PI[r, P_OFF_TAIL] - PI[r, P_OFF_HEAD] + count > n:
        _compact(words, n, PI, r)
    tail = PI[r, P_OFF_TAIL]
    for j in range(count):
        words[tail & (n - 1)] = (group << BUCKET_BITS) | ((order >> (BUCKET_BITS * j)) & (BUCKET - 1))
        tail += 1
    PI[r, P_OFF_TAIL] = tail
    i = host_slot(words, n, PI, r, group)
    if i < 0:
        if 2 * (PI[r, P_OFF_GROUPS] + 1) > 1 << PI[r, P_OFF_TBITS] and PI[r, P_OFF_TBITS] < cfg[C_OFF_BITS]:
            _grow(words, n, PI, r)
            i = host_slot(words, n, PI, r, group)
        i = -1 - i
        words[n + 2 * i] = group
        PI[r, P_OFF_GROUPS] += 1
    words[n + 2 * i + 1] |= mask
    PI[r, P_OFF_N] += count
    PI[r, P_OFF_STORED] += count
    _drop_over(words, n, PI, r)


@engine_jit
def offload_dead(KC, PI, r, count, cfg):
    """`count` dead blocks the GPU evicts move to the host tier's tail as one run of the ring; a full
    tier drops the least recently stored blocks for good."""
    words, n = _tier(KC, r, cfg)
    last = (PI[r, P_OFF_TAIL] - 1) & (n - 1)
    if PI[r, P_OFF_TAIL] > PI[r, P_OFF_HEAD] and words[last] < 0:
        words[last] -= count
    else:
        if PI[r, P_OFF_TAIL] - PI[r, P_OFF_HEAD] >= n:
            _compact(words, n, PI, r)
        words[PI[r, P_OFF_TAIL] & (n - 1)] = -count
        PI[r, P_OFF_TAIL] += 1
    PI[r, P_OFF_N] += count
    PI[r, P_OFF_STORED] += count
    _drop_over(words, n, PI, r)


@step_jit
def _drop_over(words, n, PI, r):
    """Blocks leave the tier from the ring's head until it holds no more than its capacity (the
    ghosts met on the way just leave the ring; a run of dead blocks gives up as many as it must).
    The ring's blocks come in runs of one group, so a group's slot is looked up, and its state word
    read and written, once for its run; the counts are kept in locals and written once (the words
    and the replica table might alias to the compiler, which would otherwise store them every block)."""
    over, head = PI[r, P_OFF_N] - PI[r, P_OFF_CAP], PI[r, P_OFF_HEAD]
    dropped, entries, ghosts = 0, 0, 0
    group, i, state = -1, 0, 0
    while over > 0:
        at = head & (n - 1)
        key = words[at]
        if key < 0:
            k = min(-key, over)
            words[at] = key + k
            if key + k == 0:
                head += 1
            over -= k
            dropped += k
            continue
        head += 1
        if key >> BUCKET_BITS != group:
            if group >= 0:
                _set_state(words, n, PI, r, i, state)
            group = key >> BUCKET_BITS
            i = host_slot(words, n, PI, r, group)
            state = words[n + 2 * i + 1]
            # a group's run is at most BUCKET places: the slot of the group after it, in cache by then
            prefetch(words, n + 2 * _home(words[(at + BUCKET) & (n - 1)] >> BUCKET_BITS, PI[r, P_OFF_TBITS], True))
        shift = _ghost_shift(key)
        if (state >> shift) & GHOST_MAX > 0:
            state -= 1 << shift
            ghosts += 1
        else:
            state &= ~(1 << (key & (BUCKET - 1)))
            over -= 1
            dropped += 1
            entries += 1
            _moved(PI, r, key)
        if state == 0:  # the group leaves the table, and later slots of its probe run may move
            _set_state(words, n, PI, r, i, state)
            group = -1
    if group >= 0:
        _set_state(words, n, PI, r, i, state)
    PI[r, P_OFF_HEAD] = head
    PI[r, P_OFF_N] -= dropped
    PI[r, P_OFF_DROPPED] += dropped
    PI[r, P_PC_ENTRIES] -= entries
    PI[r, P_OFF_GHOSTS] -= ghosts
    # the next drop's slot and the ring ahead, cold since stored: in cache by the next eviction
    ahead = words[head & (n - 1)]
    prefetch(words, n + 2 * _home(ahead >> BUCKET_BITS, PI[r, P_OFF_TBITS], True))
    prefetch(words, (head + 2 * BUCKET) & (n - 1))


@engine_jit
def unload(KC, PI, r, key, cfg):
    """A block in the tier loads back to the GPU: it leaves the tier, its ring entry a ghost."""
    words, n = _tier(KC, r, cfg)
    if PI[r, P_OFF_GHOSTS] > (n - 1) >> 2:
        _compact(words, n, PI, r)
    i = host_slot(words, n, PI, r, key >> BUCKET_BITS)
    shift = _ghost_shift(key)
    if (words[n + 2 * i + 1] >> shift) & GHOST_MAX == GHOST_MAX:
        _compact(words, n, PI, r)
        i = host_slot(words, n, PI, r, key >> BUCKET_BITS)
    words[n + 2 * i + 1] = (words[n + 2 * i + 1] & ~(1 << (key & (BUCKET - 1)))) + (1 << shift)
    PI[r, P_OFF_GHOSTS] += 1
    PI[r, P_OFF_N] -= 1
    PI[r, P_OFF_LOADED] += 1


@engine_jit
def _compact(words, n, PI, r):
    """The ring without its ghosts, its blocks moved up against its head in order: walked from the
    head, a key whose ghost count is not zero is a ghost (older than its block in the tier)."""
    to = PI[r, P_OFF_HEAD]
    for at in range(PI[r, P_OFF_HEAD], PI[r, P_OFF_TAIL]):
        key = words[at & (n - 1)]
        if key < 0:  # a run of dead blocks
            words[to & (n - 1)] = key
            to += 1
            continue
        i = host_slot(words, n, PI, r, key >> BUCKET_BITS)
        state, shift = words[n + 2 * i + 1], _ghost_shift(key)
        if (state >> shift) & GHOST_MAX > 0:
            _set_state(words, n, PI, r, i, state - (1 << shift))
        else:
            words[to & (n - 1)] = key
            to += 1
    PI[r, P_OFF_TAIL] = to
    PI[r, P_OFF_GHOSTS] = 0


@engine_jit
def lookup(RI, KC, PI, r, q, tokens, cfg, nodes):
    """Request q's leading full blocks found in the cache (at most tokens - 1 tokens' worth: the
    last token is always computed, to sample from), how many of them no request holds (taking
    those uses free blocks), and how many of those are in the host tier. Call after `sync`.
    nodes: also count the blocks no request holds and keep what was found for take_hits (a router
    weighing replicas needs neither, and reading each block's node costs a cache miss)."""
    return _walk(RI, KC, PI, r, q, 0, (tokens - 1) // cfg[C_BLOCK], cfg, nodes)


@engine_jit
def _walk(RI, KC, PI, r, q, start, limit, cfg, nodes):
    """lookup from block `start` (those before it found) up to block `limit`."""
    bs, bits, tier = cfg[C_BLOCK], cfg[C_PC_BITS], PI[r, P_OFF_CAP] > 0
    hits, idle, host = start, 0, 0
    while hits < limit:
        key = block_key(RI, q, hits, bs)
        if key < 0:
            break
        slot = probe(KC, r, key, bits)
        if slot >= 0:
            node = KC[r, N_HASH, slot] - 1
            if nodes and KC[r, N_REF, node] == 0:
                idle += 1
        else:
            if not (tier and in_host(KC, PI, r, key, cfg)):
                break
            host += 1  # in the host tier: it needs a free GPU block to load into
            idle += 1
            node = -1
        if nodes:
            KC[r, N_FOUND, hits] = node  # for take_hits (hits never exceed the entries, nor the row)
        hits += 1
    return hits, idle, host


@step_jit
def cached_blocks(RI, KC, PI, r, q, tokens, upto, cfg, conv):
    """lookup's blocks found, up to block `upto` at most, and those of them in the host tier, for a
    router weighing replicas: the system prompt's share read from what the last request of its
    group found on this replica while none of the group's blocks has entered or left a tier since
    (P_PC_GEPOCH), so that a request is weighed by walking its own conversation's blocks only, and
    those only where a turn of it ran (`conv`: elsewhere none of them can be cached)."""
    bs = cfg[C_BLOCK]
    limit, g, shared = min((tokens - 1) // bs, upto), RI[q, R_GROUP], RI[q, R_SHARED] // bs
    if not conv:
        limit = min(limit, shared if g >= 0 else 0)
    if g < 0 or shared == 0 or limit < shared:
        hits, _, host = _walk(RI, KC, PI, r, q, 0, limit, cfg, False)
        return hits, host
    at = 4 * g
    if KC[r, N_GMEMO, at] != PI[r, P_PC_GEPOCH] + 1 or KC[r, N_GMEMO, at + 1] != shared:
        hits, _, host = _walk(RI, KC, PI, r, q, 0, shared, cfg, False)
        KC[r, N_GMEMO, at] = PI[r, P_PC_GEPOCH] + 1
        KC[r, N_GMEMO, at + 1] = shared
        KC[r, N_GMEMO, at + 2] = hits
        KC[r, N_GMEMO, at + 3] = host
    hits, host = KC[r, N_GMEMO, at + 2], KC[r, N_GMEMO, at + 3]
    if hits < shared:
        return hits, host
    hits, _, more = _walk(RI, KC, PI, r, q, shared, limit, cfg, False)
    return hits, host + more


@engine_jit
def cached_after(RI, KC, PI, r, q, start, upto, cfg):
    """cached_blocks' walk carried on from block `start` (every block before it found) up to block
    `upto`: the blocks found in all, and how many more of them are in the host tier."""
    hits, _, host = _walk(RI, KC, PI, r, q, start, upto, cfg, False)
    return hits, host


@engine_jit
def _moved(PI, r, key):
    """A block entered or left one of replica r's tiers: a system prompt's ends the router's memo."""
    if (key >> KEY_BLOCK_BITS) & 1 == 0:
        PI[r, P_PC_GEPOCH] += 1


@engine_jit
def take_hits(RI, KC, PI, r, q, hits, cfg):
    """q holds its first `hits` blocks from the cache (what `lookup` found just before: a node, or
    -1 for a block in the host tier): they leave the free queue if no one held them, or the tier
    into a node and a GPU slot of their own."""
    bs, bits = cfg[C_BLOCK], cfg[C_PC_BITS]
    for i in range(hits):
        node = KC[r, N_FOUND, i]
        if node < 0:  # back from the host tier into a free GPU block
            key = block_key(RI, q, i, bs)
            unload(KC, PI, r, key, cfg)
            node = _spare(KC, PI, r)
            KC[r, N_KEY, node] = key
            KC[r, N_REF, node] = 0
            KC[r, N_COUNT, node] = 0
            _put(KC, r, -1 - probe(KC, r, key, bits), key, node)
            _moved(PI, r, key)
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
    bs = cfg[C_BLOCK]
    i, end = RI[q, R_REF], min(upto // bs, reused_blocks(RI, q, bs))
    if i >= end:
        return
    sync(KC, PI, r, cfg)
    group, held = -1, 0
    while i < end and PI[r, P_PC_ENTRIES] < cfg[C_PC_ENTRIES]:
        key = block_key(RI, q, i, bs)
        if key < 0:
            break
        slot, group, held = absent(KC, PI, r, key, cfg, group, held)
        if slot < 0:
            break
        node = _spare(KC, PI, r)
        KC[r, N_KEY, node] = key
        KC[r, N_REF, node] = 1
        KC[r, N_COUNT, node] = 0
        _put(KC, r, slot, key, node)
        _moved(PI, r, key)
        PI[r, P_PC_ENTRIES] += 1
        i += 1
    RI[q, R_REF] = i


@engine_jit
def release_cached(RI, KC, PI, r, q, cfg):
    """q lets go of its blocks (finished or preempted), last block first. Its full blocks that
    others may reuse stay cached at the queue's tail; the rest join it as plain free blocks; the
    blocks it shared with other requests stay with them. Returns the blocks freed."""
    bs, bits = cfg[C_BLOCK], cfg[C_PC_BITS]
    sync(KC, PI, r, cfg)
    nb, nref = RI[q, R_BLOCKS], RI[q, R_REF]
    own_end = min(RI[q, R_COMPUTED] // bs, nb, reused_blocks(RI, q, bs))  # full blocks another may reuse
    if own_end < nref:
        own_end = nref
    _append_run(KC, PI, r, nb - own_end, PLAIN_RUN)
    freed, group, held = nb - own_end, -1, 0
    for i in range(own_end - 1, nref - 1, -1):
        key = block_key(RI, q, i, bs)
        slot = -1
        if key >= 0 and PI[r, P_PC_ENTRIES] < cfg[C_PC_ENTRIES]:
            slot, group, held = absent(KC, PI, r, key, cfg, group, held)
        if slot >= 0:
            node = _spare(KC, PI, r)
            KC[r, N_KEY, node] = key
            KC[r, N_REF, node] = 0
            KC[r, N_COUNT, node] = 0
            _put(KC, r, slot, key, node)
            _moved(PI, r, key)
            PI[r, P_PC_ENTRIES] += 1
            PI[r, P_PC_CACHED] += 1
            _append(KC, PI, r, node)
        else:
            _append_run(KC, PI, r, 1, PLAIN_RUN)
        freed += 1
    dead, run = dead_blocks(RI, q), 0
    for i in range(nref - 1, -1, -1):
        key = block_key(RI, q, i, bs)
        slot = probe(KC, r, key, bits)
        node = KC[r, N_HASH, slot] - 1
        KC[r, N_REF, node] -= 1
        if KC[r, N_REF, node] > 0:
            PI[r, P_PC_SHARED] -= bs
            continue
        freed += 1
        if dead and (key >> KEY_BLOCK_BITS) & 1 == 1:  # the finished conversation's own block
            _delete(KC, r, slot, bits)
            _unspare(KC, PI, r, node)
            PI[r, P_PC_ENTRIES] -= 1
            run += 1
            continue
        _append_run(KC, PI, r, run, DEAD_RUN)
        run = 0
        PI[r, P_PC_CACHED] += 1
        _append(KC, PI, r, node)
    _append_run(KC, PI, r, run, DEAD_RUN)
    RI[q, R_REF] = 0
    return freed


@engine_jit
def dead_blocks(RI, q):
    """Whether no request can ask for q's conversation's blocks once q lets go of them: q is its
    conversation's last turn, and every turn before it is done (one queued, running or preempted
    may still look them up)."""
    if RI[q, R_CONV] < 0 or RI[q, R_LATER] != 0:
        return False
    p = RI[q, R_EARLIER]
    while p >= 0:
        if RI[p, R_STATE] != S_DONE:
            return False
        p = RI[p, R_EARLIER]
    return True


def books(PI, KC, cfg, r: int) -> dict:
    """The block pool of replica r, counted from its tables (plain Python, for tests and reports):
    blocks held by requests, plain free blocks and cached blocks no request holds (a finished
    conversation's dead blocks among them), and the blocks in its host tier, with the queue and the
    tier walked node by node and the hash tables read slot by slot, not taken from the counters."""
    if KC.shape[2] == 1:
        raise ValueError("prefix caching was off in this run (or nothing in its workload could be reused)")
    sync(KC, PI, r, cfg)
    plain = cached = nodes = 0
    node = PI[r, P_PC_QHEAD]
    while node >= 0:
        if KC[r, N_KEY, node] == PLAIN_RUN:
            plain += int(KC[r, N_COUNT, node])
        elif KC[r, N_KEY, node] == DEAD_RUN:
            cached += int(KC[r, N_COUNT, node])
        else:
            cached += 1
            assert KC[r, N_REF, node] == 0, "a block in the free queue is held by a request"
        nodes += 1
        node = KC[r, N_NEXT, node]
    keys, values = KC[r, N_HKEY, :1 << cfg[C_PC_BITS]], KC[r, N_HASH, :1 << cfg[C_PC_BITS]]
    gpu = (values > 0).nonzero()[0]
    held = values[gpu] - 1
    assert (KC[r, N_SLOT, held] == gpu).all() and (KC[r, N_KEY, held] == keys[gpu]).all(), \
        "the hash table and its nodes disagree"
    tier = PI[r, P_OFF_CAP] > 0
    ring_size = 1 << cfg[C_OFF_BITS] if tier else 0
    words = KC[r, N_TIER:].ravel()  # the tier's words in order
    table = words[ring_size:3 * ring_size].reshape(-1, 2)  # the table at its largest: (key, state) a slot
    size = 1 << PI[r, P_OFF_TBITS] if tier else 0
    groups, states = table[:size, 0], table[:size, 1]
    used = (states != 0).nonzero()[0]
    assert len(used) == PI[r, P_OFF_GROUPS] and not table[size:].any(), "the tier's groups miscounted"
    host = sorted(int(groups[i]) << BUCKET_BITS | j for i in used for j in range(BUCKET) if states[i] >> j & 1)
    ghosts = {int(groups[i]) << BUCKET_BITS | j: int(states[i]) >> int(_ghost_shift(j)) & GHOST_MAX
              for i in used for j in range(BUCKET)}
    assert sum(ghosts.values()) == PI[r, P_OFF_GHOSTS], "the ghosts counted and those in the table disagree"
    ring, dead = [], 0  # the ring's blocks: walked from the head, a key's ghosts come first
    for at in range(PI[r, P_OFF_HEAD], PI[r, P_OFF_TAIL]):
        key = int(words[at & (ring_size - 1)])
        if key < 0:
            dead -= key
        elif ghosts.get(key, 0) > 0:
            ghosts[key] -= 1
        else:
            ring.append(key)
    assert sorted(ring) == host and not any(ghosts.values()), "a block in the host tier is not in its ring, or twice"
    assert not set(host) & set(int(k) for k in keys[gpu]), "a block is in both tiers"
    entries = len(gpu) + len(host)
    return dict(pool=int(PI[r, P_BLOCKS]), used=int(PI[r, P_USED]), free=plain, cached=cached, entries=entries,
                host=len(host) + dead, host_capacity=int(PI[r, P_OFF_CAP]),
                counted=dict(free=int(PI[r, P_PC_ANON]), cached=int(PI[r, P_PC_CACHED]),
                             entries=int(PI[r, P_PC_ENTRIES]), host=int(PI[r, P_OFF_N])))
