"""trident.jit(model) on Hugging Face causal LMs, called as generate() calls them: every argument by keyword,
some of them (cache_position, return_dict) received only by the forward's **kwargs, and a ModelOutput back.

Tiny random-init configs of the real transformers classes (Llama, Qwen2, Mistral, Gemma, GPT-2; no downloads).
Each decode step is compared with an identical eager twin (model and StaticCache) bit for bit, and the jitted
model's counters prove that the steps ran compiled code: one compile, every other step a native hit, no eager
call. generate() on the jitted model: greedy, sampling and batch 8 against eager's generate."""
from __future__ import annotations

import collections
import dataclasses
from typing import Any

import pytest
import torch
from helpers_native import assert_native, jit_state
from torch import nn

import trident
from trident import exc
from trident.testing import allow_fallback, count_compiles, expect_fallback

transformers = pytest.importorskip("transformers")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
MAX_LEN = 16
POSITIONS = range(5)


# Families whose config takes Llama's arguments: (config class, causal-LM class, extra config arguments).
_LLAMA_LIKE = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", {}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
}


def _config(family: str) -> tuple[Any, type, int, int]:
    """A tiny config of the family, its causal-LM class, and the StaticCache's kv heads and head dim."""
    if family in _LLAMA_LIKE:
        config_name, cls_name, extra = _LLAMA_LIKE[family]
        config = getattr(transformers, config_name)(
            vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=MAX_LEN, **extra,
        )
        cls, kv_heads, head_dim = getattr(transformers, cls_name), 2, 16
    else:
        config = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=MAX_LEN,
                                         bos_token_id=0, eos_token_id=0)
        cls, kv_heads, head_dim = transformers.GPT2LMHeadModel, 4, 16
    config._attn_implementation = "sdpa"
    return config, cls, kv_heads, head_dim


def _model_and_cache(family: str, device: str) -> tuple[nn.Module, Any]:
    """The model (seeded weights, eval) and its fp32 StaticCache of MAX_LEN positions: twins when called twice."""
    config, cls, kv_heads, head_dim = _config(family)
    torch.manual_seed(0)
    model = cls(config).to(device).eval()
    cache = transformers.StaticCache(config=config, max_cache_len=MAX_LEN)
    cache.early_initialization(batch_size=1, num_heads=kv_heads, head_dim=head_dim, dtype=torch.float32,
                               device=device)
    return model, cache


def _for_generate(family: str) -> tuple[nn.Module, nn.Module, Any]:
    """A seeded model of the family (eval, CPU), trident.jit of it, and an uninitialized StaticCache for it."""
    config, cls, _, _ = _config(family)
    torch.manual_seed(0)
    model = cls(config).eval()
    return model, trident.jit(model), transformers.StaticCache(config=config, max_cache_len=MAX_LEN)


def _step_inputs(pos: int, device: str) -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.tensor([[(7 * pos + 3) % 128]], device=device),
        "position_ids": torch.tensor([[pos]], device=device),
        "cache_position": torch.tensor([pos], device=device),
    }


def _cache_tensors(cache: Any) -> list[torch.Tensor]:
    """Every tensor of every layer: keys, values and the positions the layer counts (cumulative_length)."""
    tensors = [t for layer in cache.layers for _, t in sorted(vars(layer).items()) if isinstance(t, torch.Tensor)]
    assert len(tensors) >= 2 * len(cache.layers)
    return tensors


def _assert_same_output(result: Any, expected: Any, cache: Any) -> None:
    """Eager's type and fields: the logits bit for bit, past_key_values the cache passed in (by identity)."""
    assert type(result) is type(expected)
    assert list(result.keys()) == list(expected.keys())
    assert torch.equal(result.logits, expected.logits)
    assert result.past_key_values is cache
    for field in dataclasses.fields(expected):
        if field.name not in ("logits", "past_key_values"):
            assert getattr(result, field.name) is None and getattr(expected, field.name) is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "gemma", "gpt2"])
def test_decode_static_cache(family: str, device: str) -> None:
    """The whole model jitted, called by keyword with a StaticCache: one compile, then native hits."""
    eager, eager_cache = _model_and_cache(family, device)
    model, cache = _model_and_cache(family, device)
    jitted = trident.jit(model)
    with torch.no_grad():
        for pos in POSITIONS:
            expected = eager(**_step_inputs(pos, device), past_key_values=eager_cache, use_cache=True)
            result = jitted(**_step_inputs(pos, device), past_key_values=cache, use_cache=True)
            _assert_same_output(result, expected, cache)
            for got, want in zip(_cache_tensors(cache), _cache_tensors(eager_cache), strict=True):
                assert torch.equal(got, want)
    # Positions are tensors (Hugging Face's API): one specialization serves every step.
    assert_native(jitted, hits=len(POSITIONS), compiles=1)
    assert jit_state(jitted).param_names[-1] == "cache_position"  # a keyword only **kwargs receives


def test_keyword_omitted_and_tuple_results() -> None:
    """return_dict reaches only **kwargs. return_dict=False returns eager's tuple (logits, the cache itself); a
    call that omits return_dict afterwards misses (the keyword is guarded as not passed), compiles and returns
    eager's ModelOutput; passing it again hits the first specialization."""
    eager, eager_cache = _model_and_cache("llama", "cpu")
    model, cache = _model_and_cache("llama", "cpu")
    jitted = trident.jit(model)
    plan = [False, False, None, None, False]  # return_dict per step; None: not passed
    with torch.no_grad():
        for pos, return_dict in zip(POSITIONS, plan, strict=True):
            extra = {} if return_dict is None else {"return_dict": return_dict}
            expected = eager(**_step_inputs(pos, "cpu"), past_key_values=eager_cache, use_cache=True, **extra)
            result = jitted(**_step_inputs(pos, "cpu"), past_key_values=cache, use_cache=True, **extra)
            if return_dict is None:
                _assert_same_output(result, expected, cache)
            else:
                assert type(result) is tuple and len(result) == len(expected) == 2
                assert torch.equal(result[0], expected[0]) and result[1] is cache
    assert_native(jitted, hits=len(plan), compiles=2)
    assert jit_state(jitted).entry.hits() == [3, 2]


def test_unknown_keyword_as_eager() -> None:
    """A keyword the forward does not name goes to its **kwargs, as in eager (Hugging Face ignores it): the call
    compiles with it. Calls Python cannot bind raise eager's TypeError, word for word."""
    eager, eager_cache = _model_and_cache("llama", "cpu")
    model, cache = _model_and_cache("llama", "cpu")
    jitted = trident.jit(model)
    with torch.no_grad():
        for pos in range(2):
            expected = eager(**_step_inputs(pos, "cpu"), past_key_values=eager_cache, not_a_parameter=pos)
            result = jitted(**_step_inputs(pos, "cpu"), past_key_values=cache, not_a_parameter=pos)
            _assert_same_output(result, expected, cache)
        assert_native(jitted, hits=2, compiles=2)  # the int keyword is a constant, then symbolic
        tokens = torch.tensor([[1]])
        bad_calls: list[tuple[tuple[object, ...], dict[str, object]]] = [
            ((tokens, tokens), {"input_ids": tokens}),  # a parameter given twice
            ((tokens,) * 12, {}),  # too many positional arguments
        ]
        for args, kwargs in bad_calls:
            with pytest.raises(TypeError) as eager_error:
                eager(*args, **kwargs)
            with pytest.raises(TypeError) as jitted_error:
                jitted(*args, **kwargs)
            assert str(jitted_error.value) == str(eager_error.value)


@dataclasses.dataclass
class Output:
    total: torch.Tensor
    scale: float
    state: object = None


class Options(nn.Module):
    """A forward whose options only **kwargs receives, returning a dataclass, a named tuple and a dict."""

    Pair = collections.namedtuple("Pair", ["first", "second"])

    def forward(self, x: torch.Tensor, /, **options: Any) -> Any:
        scale = options.get("scale", 2.0)
        total = x * scale + options["shift"] if "shift" in options else x * scale
        pair = Options.Pair(total.sum(), options.get("state"))
        return {"out": Output(total, scale, options.get("state")), "pair": pair, "x": x}


def test_kwargs_module_results() -> None:
    """Dataclass, named tuple and dict results are built with eager's types and the objects passed in; a call
    that omits a keyword it passed before runs what eager runs for it (a new specialization)."""
    module = Options()
    jitted = trident.jit(Options())
    state = object()
    x = torch.randn(4)
    calls = [
        {"scale": 3.0, "shift": x, "state": state},
        {"scale": 3.0, "shift": x, "state": state},
        {"scale": 3.0, "state": state},  # shift omitted
        {"state": state},
        {"scale": 3.0, "shift": x, "state": state},
    ]
    with torch.no_grad():
        for options in calls:
            expected, result = module(x, **options), jitted(x, **options)
            assert type(result) is dict and list(result) == ["out", "pair", "x"]
            assert type(result["out"]) is Output and type(result["pair"]) is Options.Pair
            assert torch.equal(result["out"].total, expected["out"].total)
            assert result["out"].scale == expected["out"].scale and result["out"].state is state
            assert torch.equal(result["pair"].first, expected["pair"].first) and result["pair"].second is state
            assert result["x"] is x
    assert_native(jitted, hits=len(calls), compiles=3)
    # A keyword with the name of a positional-only parameter goes to **kwargs in eager: such a call runs
    # eagerly (the entry would bind it to the parameter).
    with expect_fallback("names a positional-only parameter"):
        result = jitted(x, x=1.0, state=state)
    assert torch.equal(result["out"].total, module(x, x=1.0, state=state)["out"].total)


def test_dataclass_inside_tuple() -> None:
    """A built result below a tuple: the entry looks for it only in results headed so (a builder without type)."""

    @trident.jit
    def f(x: torch.Tensor, scale: float) -> tuple[Output, torch.Tensor]:
        return Output(x * scale, scale), x

    x = torch.randn(3)
    with torch.no_grad():
        for _ in range(3):
            out, same = f(x, 2.0)
            assert type(out) is Output and torch.equal(out.total, x * 2.0) and out.scale == 2.0 and out.state is None
            assert same is x
    assert_native(f, hits=3, compiles=1)


def test_function_kwargs_compile_and_args_are_refused() -> None:
    """**kwargs of a plain function: each keyword it receives is bound natively; a call without one passes the
    function nothing for it (not the entry's not-passed marker). *args is refused with the reason."""

    @trident.jit
    def f(x: torch.Tensor, **options: object) -> torch.Tensor:
        assert all(isinstance(v, (int, float)) for v in options.values()), options
        return x * options.get("scale", 1.0) + len(options)

    x = torch.randn(3)
    with torch.no_grad():
        for options in ({"scale": 2.0}, {"scale": 2.0}, {}, {"scale": 2.0, "bias": 1}, {}):
            assert torch.equal(f(x, **options), x * options.get("scale", 1.0) + len(options))
    state = jit_state(f)
    assert state.eager_calls == 0 and sum(state.entry.hits()) == 5, trident.explain(f)

    def g(x: torch.Tensor, *rest: object) -> torch.Tensor:
        return x

    with pytest.raises(exc.UnsupportedSignature, match=r"'rest' is \*rest; list the parameters explicitly"):
        trident.jit(g)(torch.ones(2))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_generate_on_the_jitted_model_with_its_own_static_cache(family: str) -> None:
    """model.generate() on trident.jit(model), unchanged, with one StaticCache of the user's, reset before each
    generate: greedy tokens equal eager's; every call runs natively; compiles do not grow with the number of new
    tokens or of generate calls. Llama's prefill reads the cache's position in Python (masking_utils' `q_offset ==
    0`, a tensor after reset()): a truth its guard computes again for each call (capture/value_reads.py)."""
    model, jitted, cache = _for_generate(family)
    ids = torch.tensor([[3, 17, 42]])
    kwargs: dict[str, Any] = {"do_sample": False, "pad_token_id": 0, "disable_compile": True}
    with torch.no_grad(), allow_fallback() as fallbacks:
        compiles_after = []
        with count_compiles() as compiles:
            for new_tokens in (4, 9, 9):
                expected = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
                cache.reset()
                actual = jitted.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                         past_key_values=cache, **kwargs)
                assert torch.equal(actual, expected), (new_tokens, actual, expected)
                compiles_after.append(compiles())
    state = jit_state(jitted)
    # The decode step's specializations are made in the first two generates; the third compiles nothing.
    assert compiles_after[1] == compiles_after[2] <= 3, (compiles_after, trident.explain(jitted))
    # Every call of the three generates (a prefill and n - 1 decode steps each) ran natively.
    calls = (1 + 3) + (1 + 8) * 2
    assert state.eager_calls == 0 and sum(state.entry.hits()) == calls and not fallbacks, trident.explain(jitted)
    if family == "llama":
        assert "if q_offset == 0 and ( -> True" in trident.explain(jitted), trident.explain(jitted)
    # The compiled prefill allocated the cache's tensors; like eager's, they carry the static-address mark.
    marks = {getattr(t, "_dynamo_static_input_type", None) for layer in cache.layers for t in (layer.keys, layer.values)}
    assert marks == {"unguarded"}, marks


def _sdpa_with_mask(torch_ir: str) -> list[bool]:
    """For each attention call of a compiled program (its torch-dialect stage), whether it passes a mask tensor:
    every SDPA variant takes query, key and value, and a mask or bias as a fourth tensor operand if any."""
    calls = [line for line in torch_ir.splitlines() if "scaled_dot_product" in line and "attention" in line]
    return [line.rsplit(" : (", 1)[1].split(") -> ")[0].count("!torch.vtensor") > 3 for line in calls]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "gemma", "gpt2"])
def test_prefill_reads_the_attention_mask_as_eager_does(family: str, device: str) -> None:
    """generate()'s prefill passes an all-ones attention_mask. Eager reads it (masking_utils' fast_all), drops it
    and calls SDPA with is_causal=True; so does the compiled prefill, guarded on the mask's truth (on a GPU the
    masked and the causal kernels round differently, and greedy tokens followed). A mask with padding misses and
    compiles the masked program."""
    config, cls, _, _ = _config(family)
    torch.manual_seed(0)
    # bf16 on CUDA, as models run there: in fp32 with grouped KV heads no fused SDPA kernel applies, and the math
    # fallback decomposes into matmuls and a softmax, leaving no attention call to look at.
    model = cls(config).to(device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32).eval()
    jitted = trident.jit(model)
    ids = torch.tensor([[3, 14, 15, 92, 65, 35]], device=device)
    full = torch.ones_like(ids)
    padded = full.clone()
    padded[0, 0] = 0
    with torch.no_grad():
        for mask in (full, padded, full, padded):
            kwargs = {"input_ids": ids, "attention_mask": mask, "use_cache": True}
            expected = model(**kwargs, past_key_values=transformers.DynamicCache(config=config))
            result = jitted(**kwargs, past_key_values=transformers.DynamicCache(config=config))
            assert torch.equal(result.logits, expected.logits)
    assert_native(jitted, hits=4, compiles=2)
    causal, masked = (spec.compiled.stages["torch"] for spec in jit_state(jitted).specializations)
    layers = config.num_hidden_layers
    assert _sdpa_with_mask(causal) == [False] * layers and _sdpa_with_mask(masked) == [True] * layers
    assert "fast_all(padding_mask)): -> True" in trident.explain(jitted), trident.explain(jitted)


def test_dict_arguments_are_walked_like_tuples() -> None:
    """A dict with str keys (generate passes Qwen2's masks per layer type so) is an argument structure, not an
    object: new dicts of the same keys hit, their tensors read at each call; other keys or key order miss."""

    @trident.jit
    def f(masks: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return x * masks["full"] + masks["sliding"]

    x = torch.randn(4)
    calls = [{"full": torch.randn(4), "sliding": torch.randn(4)} for _ in range(3)]
    calls += [{"sliding": torch.randn(4), "full": torch.randn(4)}, {"full": torch.randn(4), "sliding": torch.randn(4)}]
    with torch.no_grad(), count_compiles() as compiles:
        for masks in calls:
            assert torch.equal(f(dict(masks), x), x * masks["full"] + masks["sliding"])
    assert_native(f, hits=len(calls), compiles=2)  # the second key order is a structure of its own
    assert compiles() == 2 and jit_state(f).entry.hits() == [4, 1], trident.explain(f)
    assert "masks: dict with keys ['full', 'sliding']" in trident.explain(f)
    assert "keys mismatch: expected ['full', 'sliding'], got ['sliding', 'full']" in jit_state(f).last_miss_reason


def test_sampling_generate_on_the_jitted_model_equals_eager_under_the_same_seed() -> None:
    """do_sample=True: the sampled tokens depend on the logits bit for bit; under one seed they equal eager's."""
    model, jitted, cache = _for_generate("llama")
    ids = torch.tensor([[9, 4]])
    kwargs: dict[str, Any] = {"max_new_tokens": 8, "min_new_tokens": 8, "do_sample": True, "top_k": 20,
                              "temperature": 1.3, "pad_token_id": 0, "disable_compile": True}
    sampled = []
    with torch.no_grad(), allow_fallback():
        for seed in (1, 2):
            torch.manual_seed(seed)
            expected = model.generate(ids, **kwargs)
            torch.manual_seed(seed)
            cache.reset()
            assert torch.equal(jitted.generate(ids, past_key_values=cache, **kwargs), expected), seed
            sampled.append(expected)
    assert not torch.equal(*sampled)  # it sampled: two seeds, two sequences
    state = jit_state(jitted)
    assert sum(state.entry.hits()) + state.eager_calls == 2 * 8 and state.eager_calls <= 2, trident.explain(jitted)


def test_batch_8_generate_on_the_jitted_model() -> None:
    """Eight prompts at once (no padding): greedy tokens equal eager's, decode steps native."""
    model, jitted, cache = _for_generate("llama")
    ids = torch.randint(1, 128, (8, 4), generator=torch.Generator().manual_seed(3))
    kwargs: dict[str, Any] = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "pad_token_id": 0,
                              "disable_compile": True}
    with torch.no_grad(), allow_fallback():
        for _ in range(2):
            expected = model.generate(ids, **kwargs)
            cache.reset()
            assert torch.equal(jitted.generate(ids, past_key_values=cache, **kwargs), expected)
    assert len(set(expected[:, -1].tolist())) > 1  # eight different continuations
    state = jit_state(jitted)
    assert sum(state.entry.hits()) + state.eager_calls == 2 * 6 and state.eager_calls <= 2, trident.explain(jitted)


@pytest.mark.parametrize("device", DEVICES)
def test_generate_with_its_own_caches_compiles_a_bounded_number_of_times(device: str) -> None:
    """generate() makes a new cache per call (the default DynamicCache, or a StaticCache with
    cache_implementation="static"): a cache is a state object (capture/inputs.py), read at each call, so new
    caches of one layout run the same specializations. DynamicCache's steps assign new tensors into the cache
    (`self.keys = torch.cat(...)`), and StaticCache's prefill allocates its tensors lazily
    (`self.keys = torch.zeros(...)`): compiled code makes those assignments too, so every call runs natively.
    On CUDA, a specialization that assigns is never recorded as a graph (recording runs a call more than once).
    bf16 there, as models run: in fp32 with grouped KV heads SDPA takes its math path, whose CUDA trace needs the
    cache length's value (each length a specialization, bounded: test_dynamism.py)."""
    model, jitted, _ = _for_generate("llama")
    model = model.to(device=device, dtype=torch.bfloat16 if device == "cuda" else torch.float32)
    ids = torch.tensor([[3, 17, 42]], device=device)
    for implementation in ("dynamic", "static"):
        kwargs: dict[str, Any] = {"do_sample": False, "pad_token_id": 0, "disable_compile": True,
                                  "cache_implementation": implementation}
        jitted = trident.jit(model)
        compiles_after = []
        with torch.no_grad(), allow_fallback() as fallbacks, count_compiles() as compiles:
            for new_tokens in (4, 9, 9, 12):
                expected = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
                actual = jitted.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **kwargs)
                assert torch.equal(actual, expected), (implementation, new_tokens)
                compiles_after.append(compiles())
        # The prefill's and the decode step's specializations, each once more when sizes first change.
        assert compiles_after[1] == compiles_after[3] <= 4, (implementation, compiles_after, trident.explain(jitted))
        state = jit_state(jitted)
        calls = sum((1 + n - 1) for n in (4, 9, 9, 12))
        assert sum(state.entry.hits()) + state.eager_calls == calls, trident.explain(jitted)
        assert state.eager_calls == 0 and not fallbacks, trident.explain(jitted)
        cache_class = "DynamicCache" if implementation == "dynamic" else "StaticCache"
        assert f"past_key_values: {cache_class} object with attributes" in trident.explain(jitted)
        if device == "cuda" and implementation == "dynamic":
            assert "which a recording cannot repeat" in trident.explain(jitted), trident.explain(jitted)

@pytest.mark.parametrize("implementation", ["static", "dynamic"])
def test_the_cache_of_a_generate_dies_with_it(implementation: str) -> None:
    """A generate's cache (and its tensors) is freed when the caller drops the output, by reference counts alone
    (the collector off), as eager's is: on CUDA the next generate's cache then takes the same addresses, and the
    graph recorded for the first keeps replaying. A cycle through the compiled call's objects kept it until a
    collection, so every generate recorded a graph again."""
    import gc
    import weakref

    model, jitted, _ = _for_generate("llama")
    ids = torch.tensor([[3, 17, 42]])
    kwargs = dict(do_sample=False, pad_token_id=0, disable_compile=True, cache_implementation=implementation,
                  max_new_tokens=4, min_new_tokens=4, return_dict_in_generate=True)
    gc.collect()
    gc.disable()
    try:
        with torch.no_grad():
            for ready in (model, jitted, jitted):  # eager, the compiling generate, one that hits
                out = ready.generate(ids, **kwargs)
                cache = out.past_key_values
                refs = [weakref.ref(obj) for obj in (cache, *_cache_tensors(cache))]
                del out, cache
                assert [r() for r in refs] == [None] * len(refs), ready is model
        state = jit_state(jitted)
        assert state.eager_calls == 0 and sum(state.entry.hits()) > 0, trident.explain(jitted)
    finally:
        gc.enable()


@pytest.mark.parametrize("device", DEVICES)
def test_a_new_static_cache_takes_the_memory_of_the_last_one_once_it_is_gone(device: str) -> None:
    """Each generate makes a StaticCache whose tensors are allocated at its first update (the prefill). Compiled code
    places them where the last generate's were once that cache is gone, whatever the caller allocated in between
    (the caching allocator would place them by what else is live), so a CUDA graph recorded for the decode step
    keeps reading them in place. A cache the caller still holds is never shared: the next one gets other memory,
    and the held one keeps its contents. Every generate's tokens and cache equal eager's."""
    model, jitted, _ = _for_generate("llama")
    model, jitted = model.to(device), trident.jit(model.to(device))
    kwargs = dict(do_sample=False, pad_token_id=0, disable_compile=True, cache_implementation="static",
                  max_new_tokens=4, min_new_tokens=4, return_dict_in_generate=True)

    def generate(ids: torch.Tensor) -> tuple[Any, list[int]]:
        out, expected = jitted.generate(ids, **kwargs), model.generate(ids, **kwargs)
        assert torch.equal(out.sequences, expected.sequences)
        tensors = _cache_tensors(out.past_key_values)
        assert all(torch.equal(a, b) for a, b in zip(tensors, _cache_tensors(expected.past_key_values)))
        # keys and values; on CUDA also the position tensor the first update moves there (on the CPU it stays the
        # one the cache was made with)
        kept = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        if device == "cuda":
            kept = tensors
        return out, [t.data_ptr() for t in kept]

    ids = torch.tensor([[3, 17, 42]], device=device)
    caller = []
    with torch.no_grad():
        addresses = []
        for n in range(4):
            out, kept = generate(ids + n)
            addresses.append(kept)
            caller.append(torch.empty(1000 * (n + 1), device=device))  # the caller allocates between generates
            del out
        assert addresses[1:] == addresses[:-1], addresses
        held, held_addresses = generate(ids)
        contents = [t.clone() for t in _cache_tensors(held.past_key_values)]
        _, other = generate(ids + 5)
        assert not set(other) & set(held_addresses)
        assert all(torch.equal(a, b) for a, b in zip(_cache_tensors(held.past_key_values), contents))
    state = jit_state(jitted)
    assert state.eager_calls == 0 and sum(state.entry.hits()) > 0, trident.explain(jitted)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_forward_without_a_cache_returns_the_dynamic_cache_it_made_natively(family: str) -> None:
    """`jitted(input_ids)`: the forward makes a DynamicCache and returns it. Each call gets a new cache object of
    eager's class holding eager's tensors (as the traced call left it), and decoding continues from it natively."""
    config, cls, _, _ = _config(family)
    torch.manual_seed(0)
    model = cls(config).eval()
    jitted = trident.jit(model)
    caches = []
    with torch.no_grad():
        for n in (6, 6, 7):
            ids = torch.randint(1, 100, (1, n), generator=torch.Generator().manual_seed(n))
            result, expected = jitted(ids), model(ids)
            assert torch.equal(result.logits, expected.logits)
            cache, eager_cache = result.past_key_values, expected.past_key_values
            assert type(cache) is type(eager_cache) and vars(cache).keys() == vars(eager_cache).keys()
            assert [vars(layer).keys() for layer in cache.layers] == [vars(layer).keys() for layer in eager_cache.layers]
            assert all(torch.equal(a, b) for a, b in zip(_cache_tensors(cache), _cache_tensors(eager_cache)))
            caches.append(cache)
        assert caches[0] is not caches[1] and caches[0].layers[0] is not caches[1].layers[0]
        assert not any(a.data_ptr() == b.data_ptr() for a, b in zip(_cache_tensors(caches[0]), _cache_tensors(caches[1])))
        token = result.logits[:, -1:].argmax(-1)
        assert torch.equal(jitted(token, past_key_values=cache).logits, model(token, past_key_values=eager_cache).logits)
    assert_native(jitted, hits=4, compiles=3)
