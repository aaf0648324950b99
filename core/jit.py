"""Compilation settings of the engine's jitted functions."""
from numba import njit

from .jitcache import caching_on

# Compiled once and kept on disk (jitcache.py: where, and when it may be reused; with no writable
# folder anywhere, every process compiles again). No reference counting: these functions never
# allocate (their callers pass every array in), and counting references to the arrays handed from
# one function to the next would cost about a third of a simulation's run time. nogil: a
# simulation releases Python's lock while it runs, so one session's long run never stalls the
# server's other sessions, its health check or its event loop.
engine_jit = njit(cache=caching_on(), nogil=True, _nrt=False)
# Functions that run once or more per engine step: inlined into the loop, because each call passes
# a dozen array descriptors and the calls, not the work, would dominate a cheap step.
step_jit = njit(cache=caching_on(), nogil=True, _nrt=False, inline="always")
