"""The persisted form of an artifact's context constants (record.ConstantRecipe), and back.

Persisting (constant_recipes): each constant of a compiled specialization's artifact gets a recipe saying how
another process finds or makes it: a tensor constant by its provenance path from the function's roots, a view
of an earlier constant by its layout, a small created tensor by value, an identity-guarded argument by its
path, an object a module-state guard reads by its path, a scalar by value, a buffer pool by its site count, a
Triton launch site by its LaunchRecipe (launch_sites.py). Loading (resolve_constants) turns the recipes back into
constants in this process; runtime/specialization.instantiate makes the runtime objects from them. The module-state
guards' owners and compared objects are persisted by path the same way (persisted_attributes, bind_attributes).
"""
from __future__ import annotations

import dataclasses
import importlib
import io
from collections.abc import Sequence

import torch

from ..artifact import BufferPoolConstant, LaunchSiteConstant, ResultBuilderConstant
from .. import abi
from ..capture.inputs import ABSENT, CallFacts, LeafKind, LeafPath, SequenceFact, leaf_value
from ..capture.trace import Trace
from ..guards.guard_set import GuardSet
from ..guards.module_state import AttributeGuard
from ..guards.values import SequenceGuard
from . import launch_sites
from .fingerprint import StateWalk, format_path, is_library_module
from .record import SCALAR_TYPES, ConstantRecipe, CorruptRecord, ObjectAt, Record

CREATED_CONSTANT_LIMIT = 4096  # elements: a trace-created constant larger than a literal is not stored by value


class Rejected(Exception):
    """A record that does not fit this process or call (not corrupt: kept for other processes)."""


def resolve_constants(
    recipes: Sequence[ConstantRecipe], constants: list[object], walk: StateWalk, values: Sequence[object],
) -> list[object]:
    """`constants` (those resolved so far) followed by the artifact constant of each of `recipes` in this process: the
    object itself, or what instantiate makes the runtime object from (a BufferPoolConstant, a LaunchSiteConstant)."""
    constants = list(constants)
    for recipe in recipes:
        i = len(constants)
        if recipe.kind == "tensor":
            tensor = walk.tensors.get(recipe.path)
            if tensor is None:
                raise Rejected(f"constant #{i} is not at {format_path(recipe.path)} in this process")
            constants.append(tensor)
        elif recipe.kind == "object":
            constants.append(_object_at(walk, recipe.path))
        elif recipe.kind == "view":
            base, sizes, strides, offset = recipe.path
            constants.append(constants[base].as_strided(sizes, strides, offset))  # type: ignore[attr-defined]
        elif recipe.kind == "created":
            constants.append(recipe.created_tensor())
        elif recipe.kind == "argument":
            param, items = recipe.path
            constants.append(leaf_value(LeafPath(param, items, ""), values, []))
        elif recipe.kind == "argument_class":
            constants.append(_class_at(recipe.path, str(recipe.value), values))
        elif recipe.kind == "value":
            constants.append(recipe.value)
        elif recipe.kind == "triton_launch":
            try:
                constants.append(LaunchSiteConstant(launch_sites.rebuild(recipe.value)))  # type: ignore[arg-type]
            except launch_sites.LaunchSiteMismatch as e:
                raise Rejected(str(e)) from e
        elif recipe.kind == "result_builder":
            module, qualname, names, nested, fresh = recipe.value  # type: ignore[misc]
            cls = None if module is None else class_named(module, qualname)
            if module is not None and cls is None:
                raise Rejected(f"the result's class {module}.{qualname} is not defined in this process")
            constants.append(ResultBuilderConstant(cls, names, nested, fresh))
        elif recipe.kind == "buffer_pool":  # empty, with this process's limit
            constants.append(BufferPoolConstant(recipe.value))  # type: ignore[arg-type]
        else:
            raise CorruptRecord(f"unknown constant recipe {recipe.kind!r}")
    return constants


def bind_call_objects(record: Record, values: Sequence[object]) -> tuple[GuardSet, CallFacts]:
    """The record's guards and facts with this call's objects: the identity-guarded ones, and the classes of its
    state objects (see ConstantRecipe)."""
    identity_objects: list[object] = list(record.guards.identity_objects)
    for ig in record.guards.identities:
        identity_objects[ig.constant_index] = leaf_value(ig.path, values, [])
    sequences = tuple(
        dataclasses.replace(s, cls=_class_at((s.path.param, s.path.items), s.class_name, values))
        if s.kind == abi.SEQ_OBJECT else s
        for s in record.facts.sequences
    )
    guards = dataclasses.replace(
        record.guards, identity_objects=tuple(identity_objects), sequences=tuple(map(SequenceGuard, sequences))
    )
    return guards, CallFacts(record.facts.leaves, sequences)


def _class_at(path: tuple[object, ...], name: str, values: Sequence[object]) -> type:
    param, items = path
    try:
        cls = type(leaf_value(LeafPath(param, items, ""), values, []))  # type: ignore[arg-type]
    except (IndexError, TypeError):
        raise Rejected(f"this call has no object at argument path {path}") from None
    if SequenceFact.name_of(cls) != name:
        raise Rejected(f"the object at argument path {path} is a {SequenceFact.name_of(cls)}, the record's a {name}")
    return cls


def class_named(module: str, qualname: str) -> type | None:
    """The class a module (imported if need be) defines under `qualname`, or None (a class made in a function)."""
    if "<locals>" in qualname:
        return None
    try:
        value: object = importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
    except Exception:  # noqa: BLE001 -- any failure to find it means another process cannot
        return None
    return value if isinstance(value, type) else None


def _object_at(walk: StateWalk, path: tuple[object, ...]) -> object:
    if path not in walk.objects:
        raise Rejected(f"no object at {format_path(path)} in this process")
    return walk.objects[path]


def persisted_attributes(guards: GuardSet, walk: StateWalk) -> tuple[list[AttributeGuard], str | None]:
    """The module-state guards with their owners (and objects compared by identity) as paths from the roots."""
    out = []
    for ag in guards.attributes:
        if isinstance(ag.owner, type):
            out.append(ag)  # a library class (the hook counter's): pickled by name
            continue
        owner = walk.object_paths.get(id(ag.owner))
        if owner is None:
            return [], f"it reads module state ({ag.label}) of a module not reachable from the function's roots"
        value = ag.value
        if ag.kind is LeafKind.OBJECT and value is not ABSENT:
            where = walk.object_paths.get(id(value))
            if where is None:
                return [], f"the object it read as {ag.label} is not reachable from the function's roots"
            value = ObjectAt(where)
        out.append(dataclasses.replace(ag, owner=ObjectAt(owner), value=value))
    return out, None


def bind_attributes(guards: GuardSet, walk: StateWalk) -> GuardSet:
    """The record's module-state guards with this process's objects for their ObjectAt paths."""
    def bind(value: object) -> object:
        return _object_at(walk, value.path) if isinstance(value, ObjectAt) else value

    attributes = tuple(dataclasses.replace(ag, owner=bind(ag.owner), value=bind(ag.value)) for ag in guards.attributes)
    return dataclasses.replace(guards, attributes=attributes)


def constant_recipes(
    guards: GuardSet, trace: Trace, constants: Sequence[object], live: Sequence[object], walk: StateWalk
) -> tuple[list[ConstantRecipe], str | None]:
    """How a new process gets each artifact constant (record.ConstantRecipe), or why one cannot be persisted. `live`
    holds the objects instantiated from the constants (a launch site's variants are on its live object)."""
    identity_paths = {
        id(guards.identity_objects[ig.constant_index]): (ig.path.param, ig.path.items) for ig in guards.identities
    }
    class_paths = {id(sg.fact.cls): (sg.fact.path.param, sg.fact.path.items) for sg in reversed(guards.sequences)
                   if sg.fact.cls is not None}  # reversed: the first object of each class wins
    recipes: list[ConstantRecipe] = []
    for i, obj in enumerate(constants):  # a pool or a launch site as the lowering described it
        if i < len(trace.constants):
            assert isinstance(obj, torch.Tensor)
            path = walk.tensor_paths.get(id(obj))
            if i in trace.derived_constants:  # a view of an earlier constant made at capture: made again
                layout = (tuple(obj.shape), tuple(obj.stride()), obj.storage_offset())
                recipes.append(ConstantRecipe("view", (trace.derived_constants[i], *layout)))
            elif path is not None:
                recipes.append(ConstantRecipe("tensor", path))
            elif i in trace.created_constants:
                if obj.numel() > CREATED_CONSTANT_LIMIT:
                    return [], (
                        f"{guards.constant_label(i)}, a tensor of {obj.numel()} elements the function creates "
                        "from Python data, is "
                        f"larger than the {CREATED_CONSTANT_LIMIT} elements stored by value"
                    )
                buffer = io.BytesIO()
                torch.save(obj.detach().clone(), buffer)
                recipes.append(ConstantRecipe("created", data=buffer.getvalue()))
            else:
                return [], (
                    f"{guards.constant_label(i)} (a {tuple(obj.shape)} {str(obj.dtype).removeprefix('torch.')} "
                    "tensor the function "
                    "reads) was not found from the function's roots (self, closure cells, globals its code names, "
                    "arguments passed by identity, and globals of the user code that ran), so another process "
                    "could not find it again"
                )
        else:
            recipe, reason = _object_recipe(obj, live[i], identity_paths, walk.object_paths, class_paths)
            if recipe is None:
                return [], reason
            recipes.append(recipe)
    return recipes, None


def _object_recipe(
    obj: object,
    live: object,
    identity_paths: dict[int, tuple[object, ...]],
    object_paths: dict[int, tuple[object, ...]],
    class_paths: dict[int, tuple[object, ...]],
) -> tuple[ConstantRecipe | None, str | None]:
    """The recipe of an artifact constant other than the trace's tensors (one branch per kind of object the lowering
    adds to the context), or why it has none. `live` is the object instantiated from the constant."""
    if id(obj) in identity_paths:
        return ConstantRecipe("argument", identity_paths[id(obj)]), None
    if id(obj) in class_paths:  # the class a state-object guard compares with
        return ConstantRecipe("argument_class", class_paths[id(obj)], SequenceFact.name_of(obj)), None  # type: ignore[arg-type]
    if type(obj) in (torch.device, torch.dtype):  # a value guard's
        return ConstantRecipe("value", value=obj), None
    if type(obj) in SCALAR_TYPES:
        return ConstantRecipe("value", value=obj), None
    if type(obj) is tuple and all(type(key) is str for key in obj):  # an iterated container's keys (guards)
        return ConstantRecipe("value", value=obj), None
    if isinstance(obj, ResultBuilderConstant):  # a model output, named tuple or dict the entry builds: by class name
        if obj.cls is None:
            return ConstantRecipe("result_builder", value=(None, None, obj.names, obj.nested, False)), None
        module, qualname = obj.cls.__module__, obj.cls.__qualname__
        if class_named(module, qualname) is not obj.cls:
            return None, f"its result is a {module}.{qualname}, a class another process cannot find by that name"
        return ConstantRecipe("result_builder", value=(module, qualname, obj.names, obj.nested, obj.fresh)), None
    if isinstance(obj, BufferPoolConstant):  # a new process starts with empty pools, of its own limit
        return ConstantRecipe("buffer_pool", value=obj.sites), None
    if isinstance(obj, LaunchSiteConstant):
        launch, reason = launch_sites.recipe_of(obj.launch, live)
        return (None, reason) if launch is None else (ConstantRecipe("triton_launch", value=launch), None)
    if isinstance(obj, type) and (is_library_module(obj.__module__) or
                                  class_named(obj.__module__, obj.__qualname__) is obj):
        return ConstantRecipe("value", value=obj), None  # a class (the hook counter's, a returned one): by name
    if id(obj) in object_paths:  # what module-state guards read: a module, its _parameters dict, a submodule
        return ConstantRecipe("object", object_paths[id(obj)]), None
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    return None, f"its context holds a {kind}, which has no persisted form"
