"""Compilation settings of the engine's jitted functions, and two things numba does not give them:
a prefetch instruction, and a 1-d view of consecutive rows without a reshape's call (rows_from)."""
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

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


@intrinsic
def prefetch(typingctx, array, i):
    """Ask the processor to bring array[i] (a 1-d array) into its cache and go on (llvm.prefetch:
    a read, kept in every level): for a line the engine will read a step or more later, whose miss
    would otherwise stall it then."""
    def codegen(context, builder, signature, args):
        kind = signature.args[0]
        ary = context.make_array(kind)(context, builder, args[0])
        at = [context.cast(builder, args[1], signature.args[1], types.intp)]
        ptr = cgutils.get_item_pointer(context, builder, kind, ary, at, wraparound=False)
        byte_ptr, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, byte_ptr), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()
    return types.void(array, i), codegen


@intrinsic
def rows_from(typingctx, array, r, row, n):
    """array[r, row:] of a C-ordered 3-d array as one 1-d array of its first n items (row after row;
    no copy, and no numba reshape, whose C helper costs more than the work it serves)."""
    if not (isinstance(array, types.Array) and array.ndim == 3 and array.layout == "C"):
        return None
    out_t = types.Array(array.dtype, 1, "C")

    def codegen(context, builder, signature, args):
        kind = signature.args[0]
        ary = context.make_array(kind)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        at = [context.cast(builder, a, t, types.intp) for a, t in zip(args[1:3], signature.args[1:3])] + [zero]
        ptr = cgutils.get_item_pointer(context, builder, kind, ary, at, wraparound=False)
        count = context.cast(builder, args[3], signature.args[3], types.intp)
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(array.dtype)))
        out = context.make_array(out_t)(context, builder)
        context.populate_array(out, data=ptr, shape=cgutils.pack_array(builder, [count]),
                               strides=cgutils.pack_array(builder, [itemsize]), itemsize=itemsize, meminfo=None)
        return out._getvalue()
    return out_t(array, r, row, n), codegen
