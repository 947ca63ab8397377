"""`torch.compile(fn, backend="trident")` (trident/dynamo.py), end to end against eager.

Each Dynamo graph becomes a JitFunction whose native entry Dynamo calls; `trident.dynamo.compiled_graphs()` lists
them, so each test asserts what ran through Trident's own counters (native hits, specializations, no eager call),
not only that results equal eager's (an eager fallback always equals eager).

The backend is found by name through torch's entry-point discovery (`torch_dynamo_backends`, declared in
pyproject.toml). An install made before the declaration lacks it in its metadata; the module fixture then feeds
pyproject's declaration to that same discovery, and the subprocess test that needs the installed metadata skips
(`pip install -e .` makes it run).

Dynamo traces user Triton kernels only where torch.utils._triton.has_triton() holds, which needs a GPU: on CPU it
inlines into Triton's launcher and fails. The CPU Triton test makes has_triton() answer True for Dynamo so that
the graph holds the `triton_kernel_wrapper_mutation` node a GPU machine would give it; Trident then runs the
launch through Triton's interpreter. The `gpu` variant needs no patch.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from helpers_native import assert_launches_native, assert_native
from torch._dynamo.backends import registry
from torch._dynamo.exc import BackendCompilerFailed

import trident
import trident.dynamo
from trident.capture.triton_launches import interpret_cpu_launches
from trident.testing import count_compiles, expect_fallback, triton_launch_sites

ROOT = Path(__file__).resolve().parents[2]
GROUP = "torch_dynamo_backends"


def declared_entry_points() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][GROUP]


def installed_declares_backend() -> bool:
    return "trident" in importlib.metadata.entry_points(group=GROUP).names


@pytest.fixture(scope="module", autouse=True)
def _backend_discoverable() -> Iterator[None]:
    """`backend="trident"` resolves through torch's own discovery: from the installed metadata, or else from
    pyproject's declaration handed to that discovery (what the metadata of a fresh install holds)."""
    if not installed_declares_backend():
        real = importlib.metadata.entry_points
        declared = importlib.metadata.EntryPoints(
            importlib.metadata.EntryPoint(name=name, value=value, group=GROUP)
            for name, value in declared_entry_points().items()
        )

        def entry_points(**selection: object) -> object:
            return declared if selection.get("group") == GROUP else real(**selection)

        importlib.metadata.entry_points = entry_points  # type: ignore[assignment]
        try:
            registry._discover_entrypoint_backends.cache_clear()
            registry._discover_entrypoint_backends()
        finally:
            importlib.metadata.entry_points = real
    yield


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@contextlib.contextmanager
def new_graphs() -> Iterator[list[object]]:
    """The graphs the backend made inside the block (JitFunctions, oldest first), filled when it ends."""
    before = {id(g) for g in trident.dynamo.compiled_graphs()}
    made: list[object] = []
    yield made
    made += [g for g in trident.dynamo.compiled_graphs() if id(g) not in before]


def assert_graph_native(graph: object, *, hits: int, compiles: int = 1) -> None:
    assert_native(graph.entry, hits=hits, compiles=compiles)  # type: ignore[attr-defined]


# -- registration ------------------------------------------------------------------------------------------------
def test_pyproject_declares_the_backend_and_torch_discovers_it() -> None:
    assert declared_entry_points() == {"trident": "trident.dynamo:backend"}
    assert "trident" in torch._dynamo.list_backends()
    assert registry.lookup_backend("trident") is trident.dynamo.backend


@pytest.mark.skipif(not installed_declares_backend(), reason="the installed trident's metadata predates the entry "
                    "point: reinstall (pip install -e .) to test discovery with nothing imported but torch")
def test_backend_by_name_with_only_torch_imported() -> None:
    code = textwrap.dedent("""
        import sys, torch
        f = torch.compile(lambda x: torch.sin(x) + 1, backend="trident")
        with torch.no_grad():
            x = torch.randn(8)
            assert torch.equal(f(x), torch.sin(x) + 1)
            assert torch.equal(f(x), torch.sin(x) + 1)
        import trident.dynamo
        (graph,) = trident.dynamo.compiled_graphs()
        assert sum(graph.entry.hits()) == 2 and graph.eager_calls == 0, trident.explain(graph.entry)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=600)


def test_import_trident_does_not_import_the_backend() -> None:
    code = ("import sys, trident; assert 'trident.dynamo' not in sys.modules; "
            "assert trident.dynamo.backend is sys.modules['trident.dynamo'].backend")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)


# -- graph breaks ------------------------------------------------------------------------------------------------
W = torch.randn(8, 8)


def step(x: torch.Tensor) -> torch.Tensor:
    h = torch.tanh(x @ W)
    if x.sum().item() > 0:  # graph break: Dynamo runs the branch in Python
        h = h * 2
    else:
        h = h - 1
    print("step")  # graph break
    return h.relu() + x


def test_graph_breaks_equal_eager_and_each_graph_runs_natively(capsys: pytest.CaptureFixture[str]) -> None:
    compiled = torch.compile(step, backend="trident")
    signs = [1, 1, 1, -1, -1]
    with new_graphs() as graphs, torch.no_grad():
        for sign in signs:
            x = torch.randn(4, 8).abs() * sign
            assert torch.equal(compiled(x), step(x))
    # The print runs at every call, in Python (under trident.jit it would run once, at capture).
    assert capsys.readouterr().out.count("step\n") == 2 * len(signs)
    # One graph before the .item(), one per branch, one after the print (Dynamo may split a branch further).
    assert len(graphs) >= 4, [g.name for g in graphs]
    for graph in graphs:
        assert graph.eager_calls == 0 and len(graph.specializations) == graph.misses == 1, trident.explain(graph.entry)
        assert "(torch.compile graph " in graph.name
    first = [g for g in graphs if g.name.startswith("step (")]
    assert len(first) == 1
    assert_graph_native(first[0], hits=len(signs))
    assert sum(sum(g.entry.hits()) for g in graphs) >= 3 * len(signs)


# -- modules -----------------------------------------------------------------------------------------------------
def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU(), torch.nn.Linear(16, 4))


def test_module_equals_eager_and_runs_natively() -> None:
    model = make_model().eval()
    compiled = torch.compile(model, backend="trident")
    with new_graphs() as graphs, torch.no_grad(), count_compiles() as compiles:
        for _ in range(3):
            x = torch.randn(5, 8)
            assert torch.allclose(compiled(x), model(x), atol=1e-6)
    (graph,) = graphs
    assert_graph_native(graph, hits=3)
    assert compiles() == 1
    assert graph.name.startswith("Sequential.forward (torch.compile graph")


def test_module_with_grad_runs_eagerly_and_trains_as_eager() -> None:
    """Trident compiles inference only: with grad on and parameters requiring grad, the graph runs eagerly (one
    warning), so autograd sees eager's graph and gradients are eager's."""
    model = make_model()
    reference = make_model()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="trident")
    x = torch.randn(5, 8)
    with expect_fallback("requires grad"), pytest.warns(UserWarning, match="requires grad") as warned:
        compiled(x).square().sum().backward()
    assert warned[0].filename == __file__  # the warning names the line that called the model
    reference(x).square().sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_hf_llama_decode_step(device: str) -> None:
    """A one-layer Hugging Face Llama writing one token per step into a StaticCache (positions are tensors, so
    one Dynamo graph and one specialization serve every step), against the same model run eagerly."""
    transformers = pytest.importorskip("transformers")

    def decode(compiled: bool) -> list[torch.Tensor]:
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                          num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                          max_position_embeddings=16, tie_word_embeddings=True)
        config._attn_implementation = "sdpa"
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to(device).eval()
        cache = transformers.StaticCache(config=config, max_cache_len=16)
        cache.early_initialization(batch_size=1, num_heads=2, head_dim=16, dtype=torch.float32, device=device)

        def step(tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
            return model(input_ids=tokens, position_ids=position_ids, past_key_values=cache, use_cache=True).logits

        run = torch.compile(step, backend="trident") if compiled else step
        with torch.no_grad():
            return [run(torch.tensor([[7 * pos + 3]], device=device), torch.full((1, 1), pos, device=device))
                    for pos in range(5)]  # fmt: skip

    with new_graphs() as graphs:
        compiled = decode(compiled=True)
    for got, expected in zip(compiled, decode(compiled=False)):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    (graph,) = graphs
    assert_graph_native(graph, hits=5)


# -- mutation, aliasing, dynamic shapes, recompiles ------------------------------------------------------------------
def accumulate(x: torch.Tensor, buf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    buf.add_(x)
    return buf, x.view(-1)[:3], x * 2


def test_input_mutation_and_output_aliasing_as_eager() -> None:
    compiled = torch.compile(accumulate, backend="trident")
    with new_graphs() as graphs, torch.no_grad():
        for _ in range(2):
            x, buf = torch.randn(2, 4), torch.ones(2, 4)
            out, view, doubled = compiled(x, buf)
            assert torch.equal(doubled, x * 2)
            assert torch.equal(buf, x + 1)  # the input was written
            assert out is buf  # the graph returns its input: the same object, as eager returns it
            assert view._base is x and torch.equal(view, x.view(-1)[:3])
            view.zero_()  # a view of the input: writes reach x
            assert torch.equal(x.view(-1)[:3], torch.zeros(3))
    (graph,) = graphs
    assert_graph_native(graph, hits=2)


def softmax_head(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x * 2, -1)[:, :2]


def test_dynamic_sizes_stay_symbolic_from_the_first_compile() -> None:
    compiled = torch.compile(softmax_head, backend="trident", dynamic=True)
    with new_graphs() as graphs, torch.no_grad(), count_compiles() as compiles:
        for n in (8, 16, 33):
            x = torch.randn(n, n + 1)
            assert torch.allclose(compiled(x), softmax_head(x))
    (graph,) = graphs
    assert_graph_native(graph, hits=3)  # one specialization: Dynamo's symbolic sizes are Trident's too
    assert compiles() == 1


def test_automatic_dynamic_one_compile_per_dynamo_graph() -> None:
    compiled = torch.compile(softmax_head, backend="trident")
    with new_graphs() as graphs, torch.no_grad(), count_compiles() as compiles:
        for n in (8, 16, 33):
            x = torch.randn(n, n + 1)
            assert torch.allclose(compiled(x), softmax_head(x))
    static, dynamic = graphs  # Dynamo: static first, symbolic once a size changed
    assert_graph_native(static, hits=1)
    assert_graph_native(dynamic, hits=2)
    assert compiles() == 2


def scaled_sum(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).sum(0)


def test_dtype_change_recompiles_in_dynamo_and_in_trident() -> None:
    compiled = torch.compile(scaled_sum, backend="trident")
    with new_graphs() as graphs, torch.no_grad(), count_compiles() as compiles:
        for dtype in (torch.float32, torch.float64, torch.float32, torch.float64, torch.float64):
            x = torch.randn(3, 4, dtype=dtype)
            assert torch.equal(compiled(x), scaled_sum(x))
    f32, f64 = graphs  # Dynamo guards the dtype: a new graph, which Trident compiles once
    assert_graph_native(f32, hits=2)
    assert_graph_native(f64, hits=3)
    assert compiles() == 2


# -- user Triton kernels ---------------------------------------------------------------------------------------------
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def add_then_relu(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    return out.relu() * 2


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_user_triton_kernel_launches_from_the_compiled_graph(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if device == "cpu":
        import torch.utils._triton as torch_triton  # (a plain `import torch.utils...` would make torch a local)

        monkeypatch.setattr(torch_triton, "has_triton", lambda *args, **kwargs: True)  # module docstring says why
    compiled = torch.compile(add_then_relu, backend="trident")
    with new_graphs() as graphs, torch.no_grad():
        for n in (100, 100, 300, 500):
            x, y = torch.randn(n, device=device), torch.randn(n, device=device)
            result = compiled(x, y)
            with interpret_cpu_launches() if device == "cpu" else contextlib.nullcontext():
                assert torch.equal(result, add_then_relu(x, y))
    static, dynamic = graphs  # n = 100, then n symbolic
    for graph, hits in ((static, 2), (dynamic, 2)):
        assert "triton_kernel_wrapper_mutation" in graph.fn.__self__.code
        assert_graph_native(graph, hits=hits)
        (site,) = triton_launch_sites(graph.entry)
        if device == "cuda":
            assert_launches_native(graph.entry)
        else:
            assert site.kernel_name == "add_kernel"


# -- what falls back ---------------------------------------------------------------------------------------------
def scale_by_sum(x: torch.Tensor) -> torch.Tensor:
    return x * x.sum().item()


def test_a_graph_trident_cannot_capture_runs_eagerly_with_the_reason() -> None:
    """With capture_scalar_outputs, Dynamo keeps `.item()` inside the graph; Trident's capture refuses it and
    the graph runs eagerly, as a jitted function with `.item()` does."""
    compiled = torch.compile(scale_by_sum, backend="trident")
    x = torch.randn(4)
    with torch._dynamo.config.patch(capture_scalar_outputs=True), torch.no_grad():
        with new_graphs() as graphs, expect_fallback(".item()", function=None):
            assert torch.equal(compiled(x), scale_by_sum(x))
    (graph,) = graphs
    assert graph.eager_calls == 1 and not graph.specializations


# -- options -----------------------------------------------------------------------------------------------------
def compile_error(options: dict[str, object] | None = None, mode: str | None = None) -> BaseException:
    compiled = torch.compile(scaled_sum, backend="trident", options=options, mode=mode)
    with pytest.raises(BackendCompilerFailed) as failed, torch.no_grad():
        compiled(torch.randn(3))
    assert isinstance(failed.value.inner_exception, trident.exc.InvalidOption)
    return failed.value.inner_exception


def test_unknown_option_names_it_and_the_valid_ones() -> None:
    message = str(compile_error({"max_specialisations": 4}))
    assert "unknown option 'max_specialisations'" in message
    assert "max_specializations" in message and "see_through" in message


def test_option_of_the_wrong_type_and_options_that_are_not_options() -> None:
    assert "option 'see_through' must be a bool, got str 'no'" in str(compile_error({"see_through": "no"}))
    assert "'disk_cache' is not an option" in str(compile_error({"disk_cache": True}))
    assert "takes no mode (got mode='max-autotune')" in str(compile_error(mode="max-autotune"))


def test_options_apply_to_the_graphs_compiles(tmp_path: Path) -> None:
    compiled = torch.compile(scaled_sum, backend="trident", options={"dump_ir": str(tmp_path), "buffer_pool_mb": 0})
    with new_graphs() as graphs, torch.no_grad():
        x = torch.randn(3, 4)
        assert torch.equal(compiled(x), scaled_sum(x))
    (graph,) = graphs
    assert_graph_native(graph, hits=1)
    assert list(tmp_path.rglob("*.mlir")), "dump_ir wrote no IR"
    assert trident.knobs.dump_ir is None  # only while the graph compiled
    assert graph.specializations[0].compiled.buffer_pool is None


@pytest.mark.parametrize("graphs", [None, False])
def test_the_cuda_graphs_option_reaches_the_graphs_entry(graphs: bool | None) -> None:
    """Graph replay is set on a graph's entry when the backend makes it (not on its misses): on by default (on CPU
    the recorder, at the third hit, says there is no CUDA tensor), off with options={"cuda_graphs": False}."""
    options = {} if graphs is None else {"cuda_graphs": graphs}
    compiled = torch.compile(scaled_sum, backend="trident", options=options)
    with new_graphs() as made, torch.no_grad():
        x = torch.randn(3, 4)
        for _ in range(4):
            assert torch.equal(compiled(x), scaled_sum(x))
    (graph,) = made
    assert_graph_native(graph, hits=4)
    said = "CUDA graph: none (no CUDA tensor among the arguments)" in trident.explain(graph.entry)
    assert said == (graphs is None), trident.explain(graph.entry)


def test_disable_option_returns_the_graph_itself() -> None:
    compiled = torch.compile(scaled_sum, backend="trident", options={"disable": True})
    with new_graphs() as graphs, torch.no_grad():
        x = torch.randn(3, 4)
        assert torch.equal(compiled(x), scaled_sum(x))
    assert graphs == []
