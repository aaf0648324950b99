"""Table layouts shared by the jitted engine and its Python driver (simulate.py).

The engine keeps its state in a few numpy tables (structure of arrays, one row per request or
replica); these constants name their columns. Numba freezes module-level integers into the
compiled code, so they cost nothing at run time.
"""
# ---- policies and routers, in the order the engine numbers them
SERIAL, STATIC, ORCA, VLLM, SARATHI, SGLANG, INFLIGHT = 0, 1, 2, 3, 4, 5, 6
POLICIES = ("serial", "static", "orca", "vllm", "sarathi", "sglang", "inflight")
PAGED_POLICIES = POLICIES[VLLM:]  # over paged KV blocks (the engine's `policy >= VLLM`): a prefix cache, a host tier
ROUTERS = ("rr", "lor", "kv", "prefix")

# ---- requests: int table RI
(R_PROMPT, R_OUTPUT, R_STATE, R_REPLICA, R_COMPUTED, R_GENERATED, R_BLOCKS, R_NEXT, R_PREEMPTS, R_HOME,
 R_STREAM, R_RPREV, R_RNEXT, R_V, R_W, R_HPOS, R_FRESH, R_GROUP, R_CONV, R_SHARED, R_REF, R_CACHED, R_LATER,
 NRI) = range(24)
# Prefix caching (kvcache.py): R_GROUP, the system prompt the request starts with (-1: none, or one
# no other request shares), R_SHARED its length in tokens; R_CONV, the conversation whose token
# stream the request's tokens are a prefix of (-1: none that another request continues); R_REF, the
# leading blocks it holds as entries of the prefix cache; R_CACHED, prompt tokens found cached at
# its first admission; R_LATER, 1 if a later turn of its conversation follows (only then are the
# blocks past its system prompt worth caching: nothing else can ask for them).
# R_COMPUTED: tokens whose KV is cached; R_GENERATED: tokens sampled so far. A decoding request
# keeps them implicitly: computed = R_V + (its replica's decode-step counter), generated = R_W + it.

# ---- requests: float table RF (seconds; -1 = not yet)
F_ARRIVAL, F_SCHED, F_FIRST, F_FINISH, F_LAST, F_XFER_START, F_XFER_DONE, F_XFER_READY, NRF = range(9)

# ---- request states
S_PENDING, S_WAITING, S_PREFILL, S_DECODE, S_XFER_WAIT, S_XFER, S_HELD, S_DONE = range(8)
# S_PREFILL: running, computing its prompt (or recomputing it, or landing after a KV transfer)
# S_DECODE: running, one token behind its known length: part of the replica's decode cohort
# S_HELD: static batching: finished, but its slot and KV are held until the batch ends

# ---- replicas: int table PI
(P_HEAD, P_TAIL, P_NWAIT, P_NRUN, P_BLOCKS, P_USED, P_POOL, P_STATE, P_NSCHED, P_STORED, P_QTOKENS,
 P_XHEAD, P_XTAIL, P_FHEAD, P_FTAIL, P_NXFER, P_PEAK, P_STEPS, P_PREEMPTS, P_NHELD, P_RHEAD, P_RTAIL,
 P_NPRE, P_S, P_COH_N, P_COH_V, P_COH_PARTS, P_NFRESH, P_HEAPN, P_NSAMPLED, P_COH_STEPPED, P_LHEAD, P_LTAIL,
 P_S_BLOCK, P_S_SPLIT, P_ITL_BIN, P_PC_ANON, P_PC_CACHED, P_PC_ENTRIES, P_PC_QHEAD, P_PC_QTAIL, P_PC_SPARE,
 P_PC_QUERY, P_PC_HIT, P_PC_EVICTED, P_PC_SHARED, NPI) = range(47)
# P_PC_*: the prefix cache's free queue (kvcache.py): blocks in it that hold no cached prefix, cached
# blocks no request holds, hashed entries in all, the queue's first and last node, the first spare node;
# prompt tokens looked up at admissions and found cached (vLLM's PrefixCacheStats queries and hits),
# cached blocks evicted to make room; tokens of blocks more than one request holds, counted once per
# extra holder (every request counts its own cached tokens, the pool holds them once)
# P_S_BLOCK, P_S_SPLIT: the decode-step counter P_S modulo the block size and the split-KV
# partition, kept as counters because an integer division per step would cost more than the step;
# P_ITL_BIN: the histogram bin of the cohort's last inter-token gap (the next is usually the same)
# waiting queue (P_HEAD/P_TAIL), running list in admission order (P_RHEAD/P_RTAIL, through
# R_RPREV/R_RNEXT), KV transfers waiting for blocks (P_XHEAD/P_XTAIL) and in flight
# (P_FHEAD/P_FTAIL), and landed with their KV in place, waiting for a decode slot (P_LHEAD/P_LTAIL);
# P_STORED counts cached tokens of requests outside the decode cohort.

# ---- replicas: float table PF
Q_BUSY, Q_READY_AT, Q_ON_SINCE, Q_GPU_S, Q_INGRESS, Q_BUSY_S, Q_STEP_START, Q_LAST_DECODE, NPF = range(9)

# ---- replica states and pools
OFF, STARTING, ON, DRAINING = range(4)
POOL_MIXED, POOL_PREFILL, POOL_DECODE = range(3)

# ---- per-replica slot lists: SLOTS[r, list, i]
L_PRE, L_SCH_REQ, L_SCH_N, L_FRESH, L_HEAP, NL = range(6)
# L_PRE: running requests outside the cohort; L_SCH_*: this step's explicit entries;
# L_FRESH: cohort members yet to decode with it; L_HEAP: cohort min-heap on finishing step

# ---- the prefix cache's tables: KC[r, row, i] (kvcache.py); N_* rows describe node i (a cached
# block, or a run of blocks that hold no cached prefix; N_SLOT: where the hash table holds it),
# rows N_HASH and N_HKEY are the hash table (each slot's value and key: kvcache.py), N_FOUND what
# the last lookup found
N_KEY, N_REF, N_PREV, N_NEXT, N_COUNT, N_SLOT, N_HASH, N_HKEY, N_FOUND, NKC = range(10)

# ---- per-replica cohort buckets: BKT[r, kind, phase]
B_BLOCK, B_SPLIT, NB = range(3)

# ---- integer configuration
(C_POLICY, C_BLOCK, C_CHUNK, C_MAX_LEN, C_WATERMARK, C_ROUTER, C_N_PREFILL,
 C_AUTOSCALE, C_MIN_REPLICAS, C_SCALE_METRIC, C_SPLIT, C_MAX_STEPS, C_FAST_FORWARD, C_PREFIX, C_PC_BITS,
 C_PC_ENTRIES, NCI) = range(17)
# C_PREFIX: prefix caching on (and some prefix reused); C_PC_BITS: log2 of the GPU hash table's size;
# C_PC_ENTRIES: the most hashed blocks a replica keeps (on its GPUs and in its host tier)
# ---- float configuration
(G_XFER_BW, G_XFER_LAT, G_KV_BYTES_TOKEN, G_SCALE_INTERVAL, G_SCALE_TARGET, G_SCALE_DOWN_FRAC, G_STARTUP_S,
 NCF) = range(8)

# ---- step trace columns
(T_TIME, T_STEP, T_PREFILL, T_DECODE, T_RUNNING, T_WAITING, T_USED, T_EMPTY_SLOTS, T_REPLICA, T_ACTIVE,
 T_XFER, NT) = range(12)
TRACE_COLUMNS = ("time_s", "step_s", "prefill_tokens", "decode_tokens", "running", "waiting", "kv_blocks_used",
                 "kv_slots_empty", "replica", "active_replicas", "kv_transfers")

# ---- inter-token gap histogram: log-spaced bins from 10 us to 10^4 s
ITL_LO, ITL_PER_DECADE, ITL_BINS = -5.0, 200, 1800

# ---- the token mix of the step being scheduled
M_TOKENS, M_DECODES, M_SUM_CTX, M_CTAS, M_PREFILL_ATTN, M_CHUNKS, M_ROWS, NM = range(8)

# ---- scalar outputs
# (steps that decode, and the sequences in them: the running batch leaves out prefill-only steps)
(O_STEPS, O_PREEMPTS, O_PEAK_USED, O_MIN_FREE, O_TRACE_N, O_TRACE_STRIDE, O_DEADLOCK, O_SEQS_SCHEDULED,
 O_TRACE_SKIP, O_STEP_LIMIT, O_QUIET_STEPS, O_DECODE_STEPS, O_SEQS_DECODE_STEPS, NOI) = range(14)
(OF_KV_DATA_S, OF_KV_ALLOC_S, OF_END, OF_MAX_ITL, OF_AREA_FRONT, OF_AREA_XFER, OF_AREA_DECODE,
 NOF) = range(8)
# areas: requests in the gateway's pool, in KV transfer, and in the decode pool, integrated over time

# ---- pipeline parallelism (pipeline.py): a replica of pp stages is pp lanes, one per batch in flight.
# Lanes are consecutive replica rows; the first (lane 0) holds what they share: the waiting queue
# and the KV block pool. P_LANE: a row's lane (0 for every row without pipeline parallelism).
P_LANE = NPI
NPI = NPI + 1
# a replica's max batch and token budget, its attention ranks' together: a split's two pools differ when
# their replicas are of different widths under data-parallel attention
P_MAX_SEQS, P_BUDGET = NPI, NPI + 1
NPI = NPI + 2
C_PP, C_PP_NODE = NCI, NCI + 1  # stages per replica; stages per node (a boundary after each crosses nodes)
NCI = NCI + 2
# activation bytes each token sends to the next stage; seconds per byte and latency within a node
# and across nodes
G_PP_BYTES_TOKEN, G_PP_S_BYTE, G_PP_LAT, G_PP_S_BYTE_NET, G_PP_LAT_NET = range(NCF, NCF + 5)
NCF = NCF + 5
Q_STAGE = NPF  # PF[lane 0, Q_STAGE + j]: when stage j is done with the batches it has been given

# ---- clients (clients.py): open loop, closed loop, or a rate with at most N requests in flight.
# R_FOLLOW: the request its user sends next, after this one (a conversation's next turn; -1: the
# stream's next); F_THINK: seconds its user waits after its last token before sending that;
# P_DHEAD/P_DTAIL: requests the replica finished, yet to go back to their users (through R_NEXT);
# C_USERS: users of a closed loop (0: open loop)
R_FOLLOW = NRI
NRI = NRI + 1
F_THINK = NRF
NRF = NRF + 1
# F_ASYNC: with async scheduling (C_ASYNC), the step in flight on its replica when the request
# arrived: the engine has planned the next step already, so the request waits that long more
# before it is scheduled (physics/vllm_host.py), and its client sees every token that much later
F_ASYNC = NRF
NRF = NRF + 1
P_DHEAD, P_DTAIL = NPI, NPI + 1
NPI = NPI + 2
C_USERS, C_ASYNC = NCI, NCI + 1
NCI = NCI + 2
# the loop's integer scratch (work_i): round-robin positions at the gateway and in the decode pool;
# the stream's next request, users free, entries in the clients' heap
W_RR, W_RR_DECODE, W_POS, W_FREE, W_HEAPN, NW = range(6)
# ---- speculative decoding (cohort.py): each member of a decode cohort verifies costmodel.SPEC_K
# draft tokens with its pending token in one step. P_SPEC_DRAWS: the replica's draws so far;
# P_SPEC_ADV: the tokens every member gains in the step in flight (1 + the drafts accepted);
# P_SPEC_FREE: the blocks its rejected drafts took, given back when it completes; M_DRAFTS: the step's draft tokens verified; O_SPEC_SEQ_STEPS / O_SPEC_ACCEPTED: sequences that
# speculated, summed over steps, and the drafts they had accepted
P_SPEC_DRAWS, P_SPEC_ADV, P_SPEC_FREE = NPI, NPI + 1, NPI + 2
NPI = NPI + 3
M_DRAFTS = NM
NM = NM + 1
O_SPEC_SEQ_STEPS, O_SPEC_ACCEPTED = NOI, NOI + 1
NOI = NOI + 2
# ---- KV offload (kvcache.py): a host-memory tier under each replica's prefix cache, as vLLM's
# OffloadingConnector (CPU backend) and LMCache's local CPU store keep one. Cached blocks the GPU
# evicts move there, up to P_OFF_CAP blocks, dropping the least recently stored: they give up their
# node and their GPU table entry for a bit in the tier's own table (a slot a group of blocks) and a
# place in the ring of keys in the order stored (2 ** C_OFF_BITS places; P_OFF_HEAD / P_OFF_TAIL,
# P_OFF_GHOSTS, the table's P_OFF_GROUPS in 2 ** P_OFF_TBITS slots: kvcache.py), both in the rows
# after the fixed ones (N_TIER, below). A lookup that meets them loads
# them back over the host link (G_OFF_S_BYTE seconds a byte, all the replica's GPUs together), one
# load after another (PF Q_INGRESS, the link into a replica that never receives a prefill's KV: a
# caching replica), while the request waits with its blocks taken (S_XFER, in the F list, R_HOME
# -1) and then joins the landed queue (P_LHEAD) to compute the rest of its prompt.
# P_OFF_N: blocks in the tier; P_OFF_STORED / P_OFF_LOADED / P_OFF_DROPPED: blocks stored to it,
# loaded back from it, and dropped from it to make room
C_OFF_BITS = NCI
NCI = NCI + 1
(P_OFF_CAP, P_OFF_N, P_OFF_HEAD, P_OFF_TAIL, P_OFF_STORED, P_OFF_LOADED, P_OFF_DROPPED, P_OFF_GHOSTS, P_OFF_TBITS,
 P_OFF_GROUPS) = range(NPI, NPI + 10)
NPI = NPI + 10
G_OFF_S_BYTE = NCF
NCF = NCF + 1
# ---- prefix-aware routing (loop.py route_prefix; router 3, "prefix"): each replica's score is
# G_ROUTE_W_PREFIX x the share of the request's blocks it holds cached + G_ROUTE_W_QUEUE x its
# queue score + G_ROUTE_W_KV x its free KV share (llm-d's weighted scorers); the highest takes it
# (G_ROUTE_HOST: what a block in the host tier counts for, against one on the GPU)
G_ROUTE_W_PREFIX, G_ROUTE_W_QUEUE, G_ROUTE_W_KV, G_ROUTE_HOST = range(NCF, NCF + 4)
NCF = NCF + 4
# what the router found of each system prompt's blocks on a replica (row N_GMEMO, four words a
# group: kvcache.cached_blocks), good while P_PC_GEPOCH, bumped whenever a system prompt's block
# enters or leaves one of the replica's tiers, has not moved
N_GMEMO = NKC
NKC = NKC + 1
P_PC_GEPOCH = NPI
NPI = NPI + 1
# the host tier's words (kvcache.py: its ring, its table, room to grow the table): the rows from
# N_TIER on, read as one run of words, so that a large tier adds rows of the GPU tables' width
# instead of widening every row to its own size
N_TIER = NKC
# ---- recompute preemption with prefix caching on and no cache tables (nothing is shared: kvcache.py
# keep / kept_blocks). vLLM hashes every full block it computes, so a preempted request's blocks stay
# cached in the free queue, behind the blocks free before them, last block first, until allocations
# from the queue's head reach them; its recompute takes back those left. Without tables the engine
# keeps that order by counts: P_FREED, blocks the pool ever got back (so blocks ever taken are
# P_USED + P_FREED); R_KEEP, the request's full computed blocks when preempted; R_KEEP_AT, blocks ever
# taken when the first of them (its last) is handed out; C_RESUME, 1 where this applies
R_KEEP, R_KEEP_AT = NRI, NRI + 1
NRI = NRI + 2
P_FREED = NPI
NPI = NPI + 1
C_RESUME = NCI
NCI = NCI + 1
# ---- a finished conversation's blocks (kvcache.py release_cached): R_EARLIER, the turn before the
# request in its conversation (-1: none). When the last turn lets go of its conversation's blocks and
# every turn before it is done, no request can ask for them again: they leave the hash table at once
# and wait in the free queue as one run of dead blocks (node key DEAD_RUN), evicted in bulk, and
# enter the host tier as one run too, taking room there as vLLM's blocks do without an entry of
# their own
R_EARLIER = NRI
NRI = NRI + 1
# ---- prefix-aware routing's scratch (loop.route_prefix): a replica's blocks of the request found
# so far (on the GPU and in the host tier), and the block its walk was cut at (-1: the walk ended at
# a miss or the prompt's end, so the count is final)
P_RT_HITS, P_RT_HOST, P_RT_UPTO = NPI, NPI + 1, NPI + 2
NPI = NPI + 3
# ---- R_GATE, the replica the gateway sent the request to (-1: not yet). A conversation's blocks are
# cached only where one of its turns ran, so the prefix router walks a replica for them only if an
# earlier turn was sent there (P_RT_MARK: stamped q + 1 for request q's walk); elsewhere it reads the
# system prompt's share alone, which is all that replica can hold of q
R_GATE = NRI
NRI = NRI + 1
P_RT_MARK = NPI
NPI = NPI + 1
# ---- admission that reserves each request's whole length (TensorRT-LLM's GUARANTEED_NO_EVICT
# capacity scheduler): C_NO_EVICT, 1 where it rules; P_RESERVED, on a KV pool's row, the blocks its
# admitted requests take at their full length (prompt and every output token). Admission keeps it
# within the pool, so the blocks in use never outgrow the pool and no request is preempted
C_NO_EVICT = NCI
NCI = NCI + 1
P_RESERVED = NPI
NPI = NPI + 1
O_PEAK_RESERVED = NOI  # the cluster's reserved blocks at their peak (as O_PEAK_USED, when steps start)
NOI = NOI + 1
