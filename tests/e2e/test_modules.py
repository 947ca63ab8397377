"""trident.jit(module): a module compiled as torch.compile(model) is written, still a module.

Each test counts compiles and native hits and compares with eager, so a stale specialization cannot pass: a
train()/eval() flip (also of one submodule), a rebound parameter and a .to() must each select or compile the
specialization eager's behaviour needs."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import trident
from trident.testing import count_compiles


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.drop = nn.Dropout(0.5)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, dim))
        self.some_attr = "block"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.norm(self.lin(x))) * self.scale


class Model(nn.Module):
    def __init__(self, dim: int = 8, depth: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def same_as_eager(wrapped: nn.Module, model: nn.Module, x: torch.Tensor) -> None:
    """One call each, from the same RNG state (dropout in training draws from it)."""
    torch.manual_seed(1)
    actual = wrapped(x)
    torch.manual_seed(1)
    expected = model(x)
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def hits(wrapped: nn.Module) -> list[int]:
    """Calls each specialization ran natively (the compiling call runs through it too)."""
    return wrapped._trident.entry.hits()  # type: ignore[attr-defined,no-any-return]


def test_multilayer_module_equals_eager_in_eval() -> None:
    model = Model().eval()
    wrapped = trident.jit(model)
    x = torch.randn(3, 8)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(4):
            same_as_eager(wrapped, model, x)
    assert compiles() == 1
    assert hits(wrapped) == [4]
    assert wrapped._trident.eager_calls == 0  # type: ignore[attr-defined]


def test_train_eval_flip_follows_eager() -> None:
    model = Model().eval()
    wrapped = trident.jit(model)
    x = torch.randn(3, 8)
    with torch.no_grad(), count_compiles() as compiles:
        same_as_eager(wrapped, model, x)  # eval: compiles specialization 0
        wrapped.train()
        assert model.training and model.layers[1].drop.training  # the wrapper's train() is the model's
        same_as_eager(wrapped, model, x)  # train: dropout is in the program, specialization 1
        same_as_eager(wrapped, model, x)
        model.eval()  # flipping the original is seen too
        same_as_eager(wrapped, model, x)
        model.train()
        same_as_eager(wrapped, model, x)
    assert compiles() == 2
    assert hits(wrapped) == [2, 3]
    assert wrapped._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert "last miss: layers.0.drop.training: value mismatch: expected False, got True" in trident.explain(wrapped)


def test_submodule_flip_follows_eager() -> None:
    model = Model().eval()
    wrapped = trident.jit(model)
    x = torch.randn(3, 8)
    with torch.no_grad(), count_compiles() as compiles:
        same_as_eager(wrapped, model, x)
        wrapped.layers[0].train()  # only the first block's dropout is active
        same_as_eager(wrapped, model, x)
        same_as_eager(wrapped, model, x)
        wrapped.layers[0].eval()
        same_as_eager(wrapped, model, x)
    assert compiles() == 2
    assert hits(wrapped) == [2, 2]
    assert "last miss: layers.0.drop.training: value mismatch: expected False, got True" in trident.explain(wrapped)


def test_wrapper_is_the_module() -> None:
    model = Model().eval()
    wrapped = trident.jit(model)
    assert isinstance(wrapped, Model) and isinstance(wrapped, nn.Module)
    assert list(wrapped.state_dict()) == list(model.state_dict())
    assert all(a is b for a, b in zip(wrapped.parameters(), model.parameters()))
    assert wrapped.layers[1].some_attr == "block" and wrapped.layers is model.layers
    wrapped.note = 3  # an attribute set through the wrapper is the module's
    assert model.note == 3
    assert wrapped.training is False
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        wrapped.missing  # noqa: B018


def test_a_copied_or_pickled_jitted_module_is_jitted_again() -> None:
    """The wrapper's class exists in one process only: copy.deepcopy and pickle store the plain module and jit it
    again when loaded; the copy is a separate module that compiles and runs natively on its own."""
    import copy
    import io

    model = Model().eval()
    wrapped = trident.jit(model)
    x = torch.randn(3, 8)
    buffer = io.BytesIO()
    torch.save(wrapped, buffer)
    buffer.seek(0)
    for copied in (copy.deepcopy(wrapped), torch.load(buffer, weights_only=False)):
        assert isinstance(copied, Model) and type(copied) is not Model and copied is not wrapped
        assert all(a is not b and torch.equal(a, b) for a, b in zip(copied.parameters(), model.parameters()))
        with torch.no_grad(), count_compiles() as compiles:
            same_as_eager(copied, model, x)
            same_as_eager(copied, model, x)
        assert compiles() == 1 and hits(copied) == [2] and copied._trident.eager_calls == 0  # type: ignore[attr-defined]


def test_in_place_weight_update_and_load_state_dict_are_seen() -> None:
    model = Model().eval()
    wrapped = trident.jit(model)
    x = torch.randn(3, 8)
    with torch.no_grad(), count_compiles() as compiles:
        same_as_eager(wrapped, model, x)
        model.layers[0].lin.weight.mul_(2)  # in place: the same tensor, by reference
        same_as_eager(wrapped, model, x)
        wrapped.load_state_dict(Model().state_dict())  # copies in place
        same_as_eager(wrapped, model, x)
    assert compiles() == 1
    assert hits(wrapped) == [3]


def test_rebinding_a_parameter_or_moving_the_module_recompiles() -> None:
    model = Model().eval()
    wrapped = trident.jit(model)
    x = torch.randn(3, 8)
    with torch.no_grad(), count_compiles() as compiles:
        same_as_eager(wrapped, model, x)
        model.head.weight = nn.Parameter(torch.randn(4, 8))  # another tensor under the same name
        same_as_eager(wrapped, model, x)
        assert "head.weight: rebound to another Parameter since capture" in trident.explain(wrapped)
        wrapped.load_state_dict(Model().state_dict(), assign=True)  # rebinds every parameter and buffer
        same_as_eager(wrapped, model, x)
        assert compiles() == 3
        assert wrapped.to(torch.float64) is wrapped  # parameters change dtype in place (.data is replaced)
        same_as_eager(wrapped, model, x.double())
        assert compiles() == 4
        same_as_eager(wrapped, model, x.double())
    assert hits(wrapped)[-1] == 2


def test_explain_names_parameters_by_path() -> None:
    model = Model().eval()
    wrapped = trident.jit(model)
    with torch.no_grad():
        wrapped(torch.randn(3, 8))
    text = trident.explain(wrapped)
    for name in ("layers.0.lin.weight (8, 8)", "layers.0.lin.bias (8,)", "layers.0.scale (8,)", "head.weight (4, 8)"):
        assert name in text
    assert "layers.0.drop.training" in text and "layers.1.norm.eps: float == 1e-05" in text
    assert "constant #0 " not in text
    assert "disk cache" not in text  # off in the suite; tests/cache checks what it says for modules


def test_wrong_call_raises_eagers_type_error() -> None:
    model = Model().eval()
    wrapped = trident.jit(model)
    x = torch.randn(3, 8)
    for args, kwargs in [((), {}), ((x, x), {}), ((x,), {"y": x})]:
        with pytest.raises(TypeError) as eager:
            model(*args, **kwargs)
        with pytest.raises(TypeError) as jitted, torch.no_grad():
            wrapped(*args, **kwargs)
        assert str(jitted.value) == str(eager.value)


def test_jit_on_forward_in_the_class_body() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        @trident.jit
        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.lin(x) * 2 if self.training else self.lin(x) + 1

    model = Scaled().eval()
    x = torch.randn(2, 4)
    with torch.no_grad(), count_compiles() as compiles:
        for training in (False, True, False, True):
            model.train(training)
            expected = model.lin(x) * 2 if training else model.lin(x) + 1
            torch.testing.assert_close(model(x), expected, rtol=0, atol=0)
    assert compiles() == 2
    assert Scaled.forward._trident.entry.hits() == [2, 2]  # type: ignore[attr-defined]


def test_jit_of_a_module_class_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"trident.jit got the class Model; jit an instance"):
        trident.jit(Model)


def test_hooks_registered_or_removed_after_capture_are_followed() -> None:
    model = Model().eval()
    wrapped = trident.jit(model)
    x = torch.randn(3, 8)
    with torch.no_grad(), count_compiles() as compiles:
        same_as_eager(wrapped, model, x)
        handle = model.layers[1].norm.register_forward_hook(lambda mod, args, out: out * 3)
        same_as_eager(wrapped, model, x)  # the new hook runs: a recompile, not the hook-less program
        assert "hooks registered (RemovableHandle.next_id): value mismatch" in trident.explain(wrapped)
        same_as_eager(wrapped, model, x)
        handle.remove()
        same_as_eager(wrapped, model, x)  # without the hook again (the counter moved on: one more compile)
        assert "last miss: layers.1.norm._forward_hooks[" in trident.explain(wrapped)
        same_as_eager(wrapped, model, x)
    assert compiles() == 3
    assert hits(wrapped) == [1, 2, 2]


def test_a_slice_of_a_module_list_made_in_forward_is_not_guarded() -> None:
    """`self.layers[:n]` (Hugging Face's decoder loop) builds a new ModuleList in every call. Its state is the
    call's own work: guarding it (as it was while being filled) made the specialization reject its own call."""

    class Sliced(Model):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers[: len(self.layers)]:
                x = layer(x)
            return self.head(x)

    model = Sliced().eval()
    wrapped = trident.jit(model)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(3):
            same_as_eager(wrapped, model, torch.randn(3, 8))
    assert compiles() == 1
    assert hits(wrapped) == [3] and wrapped._trident.eager_calls == 0  # type: ignore[attr-defined]
