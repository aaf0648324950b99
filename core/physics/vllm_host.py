"""What vLLM V1 does on the host around each GPU step, and what a client's TTFT holds beyond it.

The GPU side of a step (bytes, FLOPs) scales with a GPU's datasheet; what this module describes
does not: it is CPU time, the same in microseconds on an H100, an A100 or an H200.

Launch modes (vllm/config/compilation.py CUDAGraphMode, default FULL_AND_PIECEWISE; the
dispatcher in vllm/v1/cudagraph_dispatcher.py):
  full       a uniform-decode step (one new token per sequence) of at most the capture size
             replays one CUDA graph of the whole forward pass: almost no host time per layer
  piecewise  a step holding prompt tokens, at most the capture size: graph pieces between the
             attention calls, which Python launches eagerly, one per layer
  eager      a step above the largest captured size (max_cudagraph_capture_size =
             min(2 x max_num_seqs, 512), never above max_num_batched_tokens) runs without graphs:
             the host issues every kernel of the compiled model, and the step lasts at least
             that long
Async scheduling (SchedulerConfig.async_scheduling, on by default since vLLM 0.14): the engine
schedules step N+1 and prepares its inputs while the GPU runs step N, and processes step N's
outputs while N+1 runs, so a step lasts the longer of its GPU time and its host time. A request
that arrives while step N runs misses N+1 (already scheduled) and starts in N+2: one step more
before its first token than a synchronous engine.

The jitted step time lives in costmodel.vllm_step; this module holds the rules in Python, for the
engine's settings, the explanations and the tests.
"""
from __future__ import annotations

import numpy as np

# vLLM's default capture sizes stop at 512 tokens (vllm/config/vllm.py _set_cudagraph_sizes)
MAX_CAPTURE = 512


def capture_tokens(max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """Largest step vLLM replays through a CUDA graph, with its default compilation config."""
    return int(max(1, min(2 * max_num_seqs, MAX_CAPTURE, max_num_batched_tokens)))


def launch_mode(tokens: int, prompt_tokens: int, capture: int, enforce_eager: bool = False) -> str:
    """full, piecewise or eager: how vLLM V1 runs a step of `tokens` tokens, `prompt_tokens` of
    which are prompt (prefill) tokens."""
    if enforce_eager or tokens > capture:
        return "eager"
    return "piecewise" if prompt_tokens > 0 else "full"


def client_delay_s(first_step_s: np.ndarray, api_ms: float, async_scheduling: bool) -> np.ndarray:
    """Time a client waits beyond the engine's own first-token time: the API server (HTTP,
    tokenisation, hand-over to the engine process, detokenising and streaming the first token),
    and with async scheduling the step already scheduled when the request arrived."""
    extra = np.asarray(first_step_s, float) if async_scheduling else np.zeros(np.shape(first_step_s))
    return api_ms * 1e-3 + extra
