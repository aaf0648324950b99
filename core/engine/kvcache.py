"""KV-cache block accounting of one replica, callable from the jitted engine.

Two ways to hold a sequence's KV cache:
  paged     blocks of `block_size` tokens allocated one at a time as the sequence grows
            (vLLM's PagedAttention); a request holds ceil(tokens / block_size) blocks;
  reserved  one contiguous region for the longest the sequence may become (max model length),
            taken when the request is admitted (Orca, FasterTransformer).
Replica columns live in the engine's replica table; this module only does the arithmetic.
"""
from ..jit import engine_jit


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
