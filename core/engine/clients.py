"""Clients: when requests arrive. Three rules on one stream of requests and one heap.

  open loop     each request arrives when it is due (a rate, a schedule, a trace's times),
                whatever the server does
  closed loop   N users (C_USERS); each sends a request, waits for its last token, thinks for a
                while (the request's F_THINK), then sends the next: the next turn of its
                conversation (R_FOLLOW) or else the stream's next request
  both          vLLM's `--request-rate R --max-concurrency N`: requests fall due at rate R, and a
                due request is sent as soon as one of the N users (a slot of the client's
                semaphore) is free; the time it is sent is its arrival, as the client times it

The stream holds the requests no earlier turn releases, in the order they fall due; a position
in it (W_POS) is the next to send. The heap holds, for each user who is thinking, when it has
done: the conversation's next turn arrives then, or (-1) the user is free to take the stream's
next request. A closed loop cannot overload the server: at most N requests are ever in it.

A finished request is handed back to its user through its replica's done list (P_DHEAD), which
the loop drains after the replica's step; so the engine's finish rule needs no client state.
"""
import numpy as np

from ..jit import engine_jit
from .layout import C_USERS, F_ARRIVAL, F_ASYNC, F_FINISH, F_THINK, P_DHEAD, P_DTAIL, R_FOLLOW, W_FREE, W_HEAPN, W_POS
from .queues import pop_front


@engine_jit
def _push(cl_t, cl_q, w, at, q):
    """Add (at, q) to the min-heap on time."""
    i = w[W_HEAPN]
    w[W_HEAPN] = i + 1
    while i > 0:
        up = (i - 1) // 2
        if cl_t[up] <= at:
            break
        cl_t[i], cl_q[i] = cl_t[up], cl_q[up]
        i = up
    cl_t[i], cl_q[i] = at, q


@engine_jit
def _pop(cl_t, cl_q, w):
    """Remove the heap's earliest entry (the caller has read it at index 0)."""
    n = w[W_HEAPN] - 1
    w[W_HEAPN] = n
    at, q = cl_t[n], cl_q[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and cl_t[c + 1] < cl_t[c]:
            c += 1
        if at <= cl_t[c]:
            break
        cl_t[i], cl_q[i] = cl_t[c], cl_q[c]
        i = c
    if n > 0:
        cl_t[i], cl_q[i] = at, q


@engine_jit
def next_arrival(RF, stream, cl_t, w, cfg):
    """When the next request arrives, as far as is known now (inf: none until a request finishes)."""
    t = cl_t[0] if w[W_HEAPN] > 0 else np.inf
    pos = w[W_POS]
    if pos < len(stream) and (cfg[C_USERS] == 0 or w[W_FREE] > 0):
        t = min(t, RF[stream[pos], F_ARRIVAL])
    return t


@engine_jit
def arrive(RF, stream, cl_t, cl_q, w, cfg, t):
    """The next request that arrives by time t (its arrival time set), or -1."""
    while w[W_HEAPN] > 0 and cl_t[0] <= t:
        at, q = cl_t[0], cl_q[0]
        _pop(cl_t, cl_q, w)
        if q >= 0:  # a conversation's next turn
            RF[q, F_ARRIVAL] = at
            return q
        w[W_FREE] += 1
    pos = w[W_POS]
    if pos >= len(stream) or RF[stream[pos], F_ARRIVAL] > t:
        return -1
    q = stream[pos]
    if cfg[C_USERS] > 0:
        if w[W_FREE] == 0:
            return -1
        w[W_FREE] -= 1
        # due while every user was busy: sent the moment one was free (now, an event's time)
        RF[q, F_ARRIVAL] = max(RF[q, F_ARRIVAL], t)
    w[W_POS] = pos + 1
    return q


@engine_jit
def hand_back(RI, RF, PI, r, cl_t, cl_q, w):
    """Requests replica r finished: each one's user thinks, then sends its next."""
    while PI[r, P_DHEAD] >= 0:
        q = pop_front(RI, PI, r, P_DHEAD, P_DTAIL)
        # its client sees the last token F_ASYNC later than the engine emits it (0 without async scheduling)
        _push(cl_t, cl_q, w, RF[q, F_FINISH] + RF[q, F_ASYNC] + RF[q, F_THINK], RI[q, R_FOLLOW])
