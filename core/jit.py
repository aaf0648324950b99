"""Compilation settings of the engine's jitted functions."""
from numba import njit

# Compiled once and cached on disk. No reference counting: these functions never allocate (their
# callers pass every array in), and counting references to the arrays handed from one function
# to the next would cost about a third of a simulation's run time.
engine_jit = njit(cache=True, _nrt=False)
# Functions that run once or more per engine step: inlined into the loop, because each call passes
# a dozen array descriptors and the calls, not the work, would dominate a cheap step.
step_jit = njit(cache=True, _nrt=False, inline="always")
