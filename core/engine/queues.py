"""Intrusive lists and a heap over the request table, for the jitted engine.

Requests are rows of RI; a queue is a head and a tail in the replica table PI, linked through a
column of RI, so no queue ever allocates. Three kinds:
  FIFO queues through R_NEXT (waiting requests; KV transfers), with a push to the front for
  preempted requests, which go back first;
  the running list, doubly linked through R_RPREV/R_RNEXT in admission order, whose tail is
  the newest request (the one preemption evicts);
  a min-heap per replica of decoding requests keyed on the step in which each finishes.
"""
from ..jit import engine_jit

from .layout import P_HEAPN, P_NRUN, P_RHEAD, P_RTAIL, R_HPOS, R_NEXT, R_OUTPUT, R_RNEXT, R_RPREV, R_W, L_HEAP


@engine_jit
def push_back(RI, PI, r, q, head, tail):
    RI[q, R_NEXT] = -1
    if PI[r, tail] < 0:
        PI[r, head] = q
    else:
        RI[PI[r, tail], R_NEXT] = q
    PI[r, tail] = q


@engine_jit
def push_front(RI, PI, r, q, head, tail):
    RI[q, R_NEXT] = PI[r, head]
    PI[r, head] = q
    if PI[r, tail] < 0:
        PI[r, tail] = q


@engine_jit
def pop_front(RI, PI, r, head, tail):
    q = PI[r, head]
    PI[r, head] = RI[q, R_NEXT]
    if PI[r, head] < 0:
        PI[r, tail] = -1
    RI[q, R_NEXT] = -1
    return q


@engine_jit
def run_append(RI, PI, r, q):
    t = PI[r, P_RTAIL]
    RI[q, R_RPREV] = t
    RI[q, R_RNEXT] = -1
    if t < 0:
        PI[r, P_RHEAD] = q
    else:
        RI[t, R_RNEXT] = q
    PI[r, P_RTAIL] = q
    PI[r, P_NRUN] += 1


@engine_jit
def run_remove(RI, PI, r, q):
    a, b = RI[q, R_RPREV], RI[q, R_RNEXT]
    if a < 0:
        PI[r, P_RHEAD] = b
    else:
        RI[a, R_RNEXT] = b
    if b < 0:
        PI[r, P_RTAIL] = a
    else:
        RI[b, R_RPREV] = a
    RI[q, R_RPREV] = -1
    RI[q, R_RNEXT] = -1
    PI[r, P_NRUN] -= 1


# ---- finishing-step heap: key(q) = the decode step after which q has all its tokens

@engine_jit
def finish_step(RI, q):
    return RI[q, R_OUTPUT] - RI[q, R_W]


@engine_jit
def _heap_set(RI, SLOTS, r, i, q):
    SLOTS[r, L_HEAP, i] = q
    RI[q, R_HPOS] = i


@engine_jit
def _sift_up(RI, SLOTS, r, i):
    q = SLOTS[r, L_HEAP, i]
    k = finish_step(RI, q)
    while i > 0:
        parent = (i - 1) // 2
        pq = SLOTS[r, L_HEAP, parent]
        if finish_step(RI, pq) <= k:
            break
        _heap_set(RI, SLOTS, r, i, pq)
        i = parent
    _heap_set(RI, SLOTS, r, i, q)


@engine_jit
def _sift_down(RI, SLOTS, PI, r, i):
    n = PI[r, P_HEAPN]
    q = SLOTS[r, L_HEAP, i]
    k = finish_step(RI, q)
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and finish_step(RI, SLOTS[r, L_HEAP, c + 1]) < finish_step(RI, SLOTS[r, L_HEAP, c]):
            c += 1
        cq = SLOTS[r, L_HEAP, c]
        if finish_step(RI, cq) >= k:
            break
        _heap_set(RI, SLOTS, r, i, cq)
        i = c
    _heap_set(RI, SLOTS, r, i, q)


@engine_jit
def heap_push(RI, SLOTS, PI, r, q):
    i = PI[r, P_HEAPN]
    PI[r, P_HEAPN] = i + 1
    _heap_set(RI, SLOTS, r, i, q)
    _sift_up(RI, SLOTS, r, i)


@engine_jit
def heap_top(SLOTS, PI, r):
    return SLOTS[r, L_HEAP, 0] if PI[r, P_HEAPN] > 0 else -1


@engine_jit
def heap_remove(RI, SLOTS, PI, r, q):
    i = RI[q, R_HPOS]
    last = PI[r, P_HEAPN] - 1
    PI[r, P_HEAPN] = last
    RI[q, R_HPOS] = -1
    if i == last:
        return
    moved = SLOTS[r, L_HEAP, last]
    _heap_set(RI, SLOTS, r, i, moved)
    _sift_down(RI, SLOTS, PI, r, i)
    _sift_up(RI, SLOTS, r, RI[moved, R_HPOS])
