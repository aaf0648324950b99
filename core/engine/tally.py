"""What the engine tallies as it runs, besides each request's own times: the histogram of
inter-token gaps, the bounded step trace, and the number of requests in each part of the system
integrated over time (for Little's law)."""
import math

from ..jit import engine_jit, step_jit
from .layout import (ITL_BINS, ITL_LO, ITL_PER_DECADE, M_DECODES, M_DRAFTS, M_TOKENS, NT, O_TRACE_N, O_TRACE_SKIP,
                     O_TRACE_STRIDE, OF_AREA_DECODE, OF_AREA_FRONT, OF_AREA_XFER, OFF, P_COH_N, P_COH_V, P_NHELD,
                     P_NRUN, P_NWAIT, P_NXFER, P_PC_SHARED, P_POOL, P_S, P_STATE, P_STORED, P_USED, POOL_DECODE, T_ACTIVE,
                     T_DECODE, T_EMPTY_SLOTS, T_PREFILL, T_REPLICA, T_RUNNING, T_STEP, T_TIME, T_USED, T_WAITING,
                     T_XFER)


@engine_jit
def itl_bin(gap):
    if gap <= 0.0:
        return 0
    b = int((math.log10(gap) - ITL_LO) * ITL_PER_DECADE)
    if b < 0:
        return 0
    if b >= ITL_BINS:
        return ITL_BINS - 1
    return b


@engine_jit
def itl_bin_near(gap, b, edges):
    """itl_bin(gap), checking bin b first: successive steps of a replica mostly fall in one bin,
    and a comparison costs far less than a logarithm."""
    if edges[b] <= gap < edges[b + 1]:
        return b
    return itl_bin(gap)


@engine_jit
def stored_tokens(PI, r):
    # tokens of a block several requests share (prefix caching) are stored once
    return PI[r, P_STORED] + PI[r, P_COH_V] + PI[r, P_COH_N] * PI[r, P_S] - PI[r, P_PC_SHARED]


@step_jit
def record(trace, oi, t, dt, mix, r, PI, bs):
    """Keep every stride-th step; when full, drop every other row and double the stride, so a
    run of any length keeps at most trace.shape[0] evenly spread rows."""
    if oi[O_TRACE_SKIP] > 0:
        oi[O_TRACE_SKIP] -= 1
        return
    oi[O_TRACE_SKIP] = oi[O_TRACE_STRIDE] - 1
    k = oi[O_TRACE_N]
    running = waiting = used = empty = active = xfer = 0
    for j in range(PI.shape[0]):
        running += PI[j, P_NRUN]
        waiting += PI[j, P_NWAIT]
        used += PI[j, P_USED]
        empty += PI[j, P_USED] * bs - stored_tokens(PI, j)
        xfer += PI[j, P_NXFER]
        if PI[j, P_STATE] != OFF:
            active += 1
    trace[k, T_TIME] = t
    trace[k, T_STEP] = dt
    trace[k, T_PREFILL] = mix[M_TOKENS] - mix[M_DECODES] - mix[M_DRAFTS]
    trace[k, T_DECODE] = mix[M_DECODES]
    trace[k, T_RUNNING] = running
    trace[k, T_WAITING] = waiting
    trace[k, T_USED] = used
    trace[k, T_EMPTY_SLOTS] = empty
    trace[k, T_REPLICA] = r
    trace[k, T_ACTIVE] = active
    trace[k, T_XFER] = xfer
    k += 1
    if k == trace.shape[0]:
        half = k // 2
        for i in range(half):
            for c in range(NT):
                trace[i, c] = trace[2 * i, c]
        k = half
        oi[O_TRACE_STRIDE] *= 2
        oi[O_TRACE_SKIP] = oi[O_TRACE_STRIDE] - 1
    oi[O_TRACE_N] = k


@step_jit
def integrate(PI, of, span):
    """Requests in each part of the system, integrated over time (for Little's law)."""
    for r in range(PI.shape[0]):
        in_queues = PI[r, P_NWAIT] + PI[r, P_NRUN] - PI[r, P_NHELD]
        if PI[r, P_POOL] == POOL_DECODE:
            of[OF_AREA_DECODE] += in_queues * span
            of[OF_AREA_XFER] += PI[r, P_NXFER] * span
        else:
            of[OF_AREA_FRONT] += in_queues * span
