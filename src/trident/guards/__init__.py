"""The guards of a specialization: what a call must satisfy for its compiled code to be correct.

Each guard kind is one class that holds its three forms side by side, so they are written and read together:

  describe()  its line in trident.explain (and TRIDENT_LOG=guards);
  check()     the Python check: why a call fails it, in the user's words, or None (first_failure: miss reasons,
              and warm start rejecting a record before loading its library);
  lower()     the native check: MLIR text of the specialization's guard function, which decides every call.

check() and lower() must give the same verdict on every call; tests/unit/test_guard_differential.py holds them to
it on fuzzed calls. A kind whose guards are checked together (the sizes of one tensor, the relations after the
int64 arithmetic of all of them) overrides the group form (describe_all / check_all / lower_all).

Modules:
  base.py          the Guard protocol; PythonCheck and NativeCheck, what one check of a call carries between guards
  values.py        sequences (tuple/list/dict/state object structure), scalars, objects compared by identity
  tensors.py       a tensor leaf's type, dtype, device, rank and flags; views of constants made at capture
  symbols.py       sizes, strides, offsets and ints as symbols and expressions; ShapeEnv relations; int64 ranges
  module_state.py  module attributes, hooks and Python kernels the capture read (AttributeGuard)
  global_state.py  grad mode, autocast, inference mode, default dtype, torch function state and mode stack
  guard_set.py     GuardSet (every guard of a specialization, in the order each form visits them), first_failure,
                   describe_guards
  build.py         the complete guard set of one capture, made once (nothing adds to it later)
  int64_ranges.py  one guard per int the program computes (it must fit in int64), and why a call leaves int64

Where this package sits, and why: a guard's lower() emits MLIR with the lowering's building blocks
(ir.mlir_text's FunctionBuilder, lowering.runtime_abi's externs, lowering.leaf_access, lowering.symbolic_ints),
and build.py reads capture's facts (capture.inputs, capture.trace, capture.module_state). So this package
imports capture and those building blocks, and is imported by the guard pass (lowering/lower_guards.py, which
only creates the function and runs each kind's lower in order), the pipeline, the cache and the driver. capture/
never imports it: capture records facts (leaves, the trace, module reads), and the driver turns them into the
guard set right after the capture, in one call (build.guard_set). tests/unit/test_import_graph.py checks both.
"""
