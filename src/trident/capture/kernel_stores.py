"""Which pointer parameters a Triton kernel may store through: Trident's own reading of the kernel's TTIR.

torch's analysis (`identify_accessed_tensors`) answers first (capture/triton_launches.kernel_writes). It rebuilds
the kernel's control flow and stops at what it does not model: an op with a region it does not know
(`tl.map_elementwise`'s `tt.map_elementwise`), an impure inline-asm op, recursion. Its answer is then "every
tensor", which keeps a custom op whose schema says otherwise opaque. This analysis reads the same TTIR (torch's
`generate_ttir`, on the launch as it was recorded: defaults bound, autotune configs and heuristics applied) with
an over-approximation instead of a model of each op:

  - provenance: each SSA value of pointer or tensor-descriptor type carries the set of the function's parameters
    it may point into (an int carries none: it becomes an address only through `tt.addptr`'s offset, which adds
    nothing, or `tt.int_to_ptr`). A parameter carries itself; `tt.addptr` carries its pointer operand's; a load carries nothing (the data it reads is not a
    parameter's address) unless it loads a pointer, and `tt.int_to_ptr` makes one from an int: both point
    anywhere (UNKNOWN). Every other op, known or not, carries the union of its operands', and an op with regions
    gives the union of its operands' and its terminators' (yielded values) to its results and to its regions' block
    arguments, iterated until nothing changes: loop-carried pointers, `scf.if` results, reductions.
  - writes: a store-like op writes what its first operand (a pointer or a tensor descriptor) points into; a call
    writes what its callee's written parameters point into (recursion: UNKNOWN); an op with memory effects this
    module does not know (impure inline asm, any op outside the list of ops known not to write) writes what any
    of its operands points into.

Over-approximation is sound here: a parameter reported written that is not only costs precision (the op may stay
opaque); a write never goes unreported. UNKNOWN among the written means "cannot decide": every tensor then counts
as written, as with torch's failure.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

UNKNOWN = -1  # a provenance token: a pointer to anywhere

# Ops whose first operand is the memory they write (a pointer, a tensor of pointers or a tensor descriptor).
_STORES = ("tt.store", "tt.atomic_rmw", "tt.atomic_cas", "tt.descriptor_store", "tt.descriptor_reduce",
           "tt.descriptor_scatter", "tt.experimental_descriptor_store", "tt.experimental_tensormap_create")
# Ops that write no memory (the rest of TTIR's vocabulary an elementwise, reduction or matmul kernel uses).
_NO_WRITES_PREFIXES = ("arith.", "math.", "scf.", "cf.", "ub.", "builtin.")
_NO_WRITES = frozenset((
    "tt.func", "tt.return", "tt.load", "tt.descriptor_load", "tt.descriptor_gather", "tt.experimental_descriptor_load",
    "tt.splat", "tt.unsplat", "tt.broadcast", "tt.expand_dims", "tt.reshape", "tt.trans", "tt.cat", "tt.join",
    "tt.split", "tt.addptr", "tt.advance", "tt.make_range", "tt.make_tensor_ptr", "tt.make_tensor_descriptor",
    "tt.get_program_id", "tt.get_num_programs", "tt.dot", "tt.dot_scaled", "tt.reduce", "tt.reduce.return",
    "tt.scan", "tt.scan.return", "tt.map_elementwise", "tt.map_elementwise.return", "tt.histogram", "tt.gather",
    "tt.bitcast", "tt.fp_to_fp", "tt.int_to_ptr", "tt.ptr_to_int", "tt.precise_sqrt", "tt.precise_divf",
    "tt.mulhiui", "tt.clampf", "tt.assert", "tt.print", "tt.extern_elementwise", "tt.elementwise_inline_asm",
    "tt.call",  # written by its callee: handled on its own
))
_TERMINATOR_SUFFIXES = (".yield", ".return", ".condition")
# Ops whose address result comes from data (memory, or an int), not from a parameter's address: anywhere.
_ADDRESS_FROM_DATA = ("tt.load", "tt.descriptor_load", "tt.experimental_descriptor_load", "tt.int_to_ptr")


@dataclasses.dataclass
class _Op:
    name: str
    operands: list[int]
    results: list[int]
    regions: list[int]
    block: int  # the block it is in (-1: none)
    callee: str | None = None
    pure: bool = True  # tt.elementwise_inline_asm's `pure`
    inner_args: list[int] = dataclasses.field(default_factory=list)  # its regions' block arguments
    yields: list[int] = dataclasses.field(default_factory=list)  # its regions' terminators' operands


@dataclasses.dataclass
class _Function:
    name: str
    params: list[int]  # value ids of the entry block's arguments
    ops: list[_Op]
    addresses: set[int]  # the module's values of pointer or tensor-descriptor type


def _is_address(type_text: str) -> bool:
    return "!tt.ptr" in type_text or "tensordesc" in type_text


def _functions(module: Any) -> dict[str, _Function]:
    """The module's functions with their ops, read through Triton's IR bindings (the walk is post-order)."""
    ops: list[_Op] = []
    addresses: set[int] = set()  # values of pointer or tensor-descriptor type
    block_region: dict[int, int] = {}  # block -> its region
    region_blocks: dict[int, list[int]] = defaultdict(list)  # region -> its blocks, the entry block first
    block_args: dict[int, list[int]] = {}
    func_names: dict[int, str] = {}  # id(tt.func op) -> its symbol

    def visit(op: Any) -> None:
        name = op.get_name()
        if name == "builtin.module":
            return
        block = op.get_block()
        block_id = -1
        if block is not None:
            block_id = block.id()
            if block_id not in block_args:
                arguments = [block.get_argument(i) for i in range(block.get_num_arguments())]
                block_args[block_id] = [a.id() for a in arguments]
                addresses.update(a.id() for a in arguments if _is_address(str(a.get_type())))
                parent = block.get_parent()
                if parent is not None:
                    block_region[block_id] = parent.id()
                    region_blocks[parent.id()].append(block_id)
        results = [op.get_result(i) for i in range(op.get_num_results())]
        addresses.update(r.id() for r in results if _is_address(str(r.get_type())))
        record = _Op(
            name, [op.get_operand(i).id() for i in range(op.get_num_operands())], [r.id() for r in results],
            [op.get_region(i).id() for i in range(op.get_num_regions())], block_id,
        )  # fmt: skip
        if name == "tt.call":
            record.callee = op.get_flat_symbol_ref_attr("callee")
        elif name == "tt.elementwise_inline_asm":
            record.pure = bool(op.get_bool_attr("pure"))
        elif name == "tt.func":
            func_names[id(record)] = op.get_str_attr("sym_name")
        ops.append(record)

    module.walk(visit)
    region_owner = {region: op for op in ops for region in op.regions}
    owner_of_block = {block: region_owner.get(region) for block, region in block_region.items()}
    functions: dict[str, _Function] = {}
    for op in ops:
        name = func_names.get(id(op))
        if name is not None:
            blocks = region_blocks.get(op.regions[0], []) if op.regions else []
            functions[name] = _Function(name, block_args[blocks[0]] if blocks else [], [], addresses)
    for op in ops:
        owner = owner_of_block.get(op.block)
        if owner is not None and owner.name != "tt.func" and op.name.endswith(_TERMINATOR_SUFFIXES):
            owner.yields.extend(op.operands)
        outer, seen = owner, set()  # the function an op is in: up the chain of region owners
        while outer is not None and outer.name != "tt.func" and id(outer) not in seen:
            seen.add(id(outer))
            outer = owner_of_block.get(outer.block)
        if op.name != "tt.func" and outer is not None and id(outer) in func_names:
            functions[func_names[id(outer)]].ops.append(op)
    for block, owner in owner_of_block.items():
        if owner is not None and owner.name != "tt.func":
            owner.inner_args.extend(block_args.get(block, []))
    return functions


def _written(functions: dict[str, _Function], name: str, active: set[str], memo: dict[str, frozenset[int]]
             ) -> frozenset[int]:
    """Indices of `name`'s parameters it may store through (UNKNOWN among them: cannot tell)."""
    if name in memo:
        return memo[name]
    if name in active or name not in functions:
        return frozenset({UNKNOWN})  # recursion, or a callee the module does not define
    active.add(name)
    function = functions[name]
    prov: dict[int, frozenset[int]] = defaultdict(frozenset)
    for i, value in enumerate(function.params):
        if value in function.addresses:  # an int parameter reaches an address only through int_to_ptr: UNKNOWN
            prov[value] = frozenset({i})
    changed = True
    while changed:  # unions only grow, over a finite set of tokens
        changed = False
        for op in function.ops:
            inputs = frozenset().union(*(prov[v] for v in op.operands))
            for result in op.results:
                if result not in function.addresses:
                    continue  # only addresses carry provenance (see the module docstring)
                if op.name == "tt.addptr":
                    new = prov[op.operands[0]]
                elif op.name in _ADDRESS_FROM_DATA:
                    new = frozenset({UNKNOWN})
                else:
                    new = inputs.union(*(prov[v] for v in op.yields))
                if not new <= prov[result]:
                    prov[result] = prov[result] | new
                    changed = True
            if op.inner_args:
                new = inputs.union(*(prov[v] for v in op.yields))
                for arg in op.inner_args:
                    if arg in function.addresses and not new <= prov[arg]:
                        prov[arg] = prov[arg] | new
                        changed = True
    written: set[int] = set()
    for op in function.ops:
        if op.name in _STORES or "store" in op.name or "atomic" in op.name or "scatter" in op.name:
            written |= prov[op.operands[0]] if op.operands else {UNKNOWN}
        elif op.name == "tt.call":
            callee = _written(functions, op.callee or "", active, memo)
            if UNKNOWN in callee:
                written.add(UNKNOWN)
            for i in callee - {UNKNOWN}:
                written |= prov[op.operands[i]] if i < len(op.operands) else {UNKNOWN}
        elif (op.name == "tt.elementwise_inline_asm" and not op.pure) or not (
                op.name in _NO_WRITES or op.name.startswith(_NO_WRITES_PREFIXES)):
            for v in op.operands:  # memory effects this module cannot read: whatever it may point into
                written |= prov[v]
    active.discard(name)
    memo[name] = frozenset(written)
    return memo[name]


def stored_parameters(module: Any, kernel_name: str, arg_names: list[str]) -> list[str] | str:
    """The names (of `arg_names`, the kernel function's parameters in order) a launch may store through, or why
    this analysis cannot tell."""
    functions = _functions(module)
    names = [n for n in functions if n == kernel_name] or [n for n in functions if kernel_name in n]
    if not names:
        return f"the TTIR has no function named like the kernel '{kernel_name}'"
    written = _written(functions, names[0], set(), {})
    if UNKNOWN in written:
        return "a store goes through a pointer the analysis cannot trace to a parameter (a loaded pointer, an " \
               "int made a pointer, recursion)"
    if any(i >= len(arg_names) for i in written):
        return "the TTIR function has more parameters than the launch's arguments"
    return [arg_names[i] for i in sorted(written)]
