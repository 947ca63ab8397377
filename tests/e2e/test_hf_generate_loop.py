"""What trident.jit(model) changes in Hugging Face's generate() loop (trident/hf_generate.py): generate never
compiles a jitted forward again, and on CUDA it reads the stop flag one token late (transformers' own
DeferredStopCheck). Tiny random-init Llama (no downloads); eager's generate is the reference, token for token."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from helpers_native import jit_state

import trident
from trident import hf_generate
from trident.knobs import override
from trident.testing import allow_fallback

transformers = pytest.importorskip("transformers")
utils = pytest.importorskip("transformers.generation.utils")


def _llama(device: str = "cpu", dtype: torch.dtype = torch.float32) -> Any:
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=64)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


def _compile_everywhere() -> Any:
    """A CompileConfig that makes generate compile the forward on any device, the CPU too (as on CUDA by default)."""
    config = transformers.CompileConfig(fullgraph=False)
    config._compile_all_devices = True
    return config


def test_generate_never_compiles_a_jitted_forward_again() -> None:
    """With a static cache and a compile config that asks for it, generate() compiles a plain model's forward
    with torch.compile (on CUDA it does so by default); on the jitted model it calls the jitted forward: every
    call a native hit, nothing compiled by torch.compile, one warning that says why, eager's tokens."""
    model = _llama()
    jitted = trident.jit(model)
    kwargs: dict[str, Any] = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "pad_token_id": 0,
                              "cache_implementation": "static"}
    generation_config = transformers.GenerationConfig(compile_config=_compile_everywhere(), **kwargs)
    model_kwargs = {"past_key_values": transformers.StaticCache(config=model.config, max_cache_len=32)}
    assert model._valid_auto_compile_criteria(model_kwargs, generation_config)  # what generate asks; plain: yes
    ids = torch.tensor([[3, 17, 42]])
    with torch.no_grad():
        expected = model.generate(ids, disable_compile=True, **kwargs)
        with allow_fallback() as fallbacks, pytest.warns(UserWarning, match="does not compile the forward again"):
            actual = jitted.generate(ids, compile_config=_compile_everywhere(), **kwargs)
    assert torch.equal(actual, expected)
    assert "_compiled_call" not in model.__dict__  # generate's torch.compile(self.__call__) never ran
    state = jit_state(jitted)
    assert state.eager_calls == 0 and sum(state.entry.hits()) == 6 and not fallbacks, trident.explain(jitted)
    with pytest.warns(UserWarning, match="does not compile the forward again"):
        assert not jitted._valid_auto_compile_criteria(model_kwargs, generation_config)


class _DeferRecorder:
    """A logits processor (generate calls it once per new token, in Python) that records whether Trident's
    deferral was asked for at that moment."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.seen.append(hf_generate._DEFER_STOP.get())
        return scores


@pytest.mark.parametrize("defer", [True, False])
def test_the_deferral_is_asked_for_inside_a_jitted_generate_only(defer: bool) -> None:
    """Inside a jitted model's generate (knob on) transformers' stop check is asked to defer; in a plain model's
    generate, and with the knob off, it is not. On the CPU transformers' answer stays no (a CPU has no events),
    so the tokens are eager's either way."""
    model = _llama()
    jitted = trident.jit(model)
    kwargs: dict[str, Any] = {"max_new_tokens": 4, "min_new_tokens": 4, "do_sample": False, "pad_token_id": 0}
    plain, inside = _DeferRecorder(), _DeferRecorder()
    with torch.no_grad(), override(hf_defer_stop=defer), allow_fallback():
        expected = model.generate(torch.tensor([[5, 6]]), logits_processor=[plain], **kwargs)
        actual = jitted.generate(torch.tensor([[5, 6]]), logits_processor=[inside], **kwargs)
    assert torch.equal(actual, expected)
    assert plain.seen == [False] * 4
    assert inside.seen == [defer] * 4
    assert hf_generate._DEFER_STOP.get() is False  # and not after it


def test_the_deferral_keeps_every_condition_of_transformers_but_the_device() -> None:
    """Asked to defer, a CUDA device gets transformers' answer for MPS: yes without a cache, or with one that is
    not returned, or one it can crop back; no for an assistant model, or a returned cache it cannot crop (a
    StaticCache). Not asked, or on another device, the answer is transformers' own (no, off MPS)."""
    assert hf_generate.install_deferred_stop()
    assert hf_generate.install_deferred_stop()  # once: the second call finds its own wrapper
    is_supported = utils.DeferredStopCheck.is_supported
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    config = _llama().config
    static = transformers.StaticCache(config=config, max_cache_len=8)
    dynamic = transformers.DynamicCache(config=config)
    assert not static.is_croppable and dynamic.is_croppable
    cases = {  # (device, cache, cache_is_returned, is_assistant) -> the answer when asked to defer
        (cuda, None, False, False): True,
        (cuda, static, False, False): True,
        (cuda, dynamic, True, False): True,
        (cuda, static, True, False): False,
        (cuda, None, False, True): False,
        (cpu, None, False, False): False,
    }
    for args, deferred in cases.items():
        with hf_generate.deferring_stop(True):
            assert is_supported(*args) is deferred, args
        with hf_generate.deferring_stop(False):
            assert is_supported(*args) is False, args
        assert is_supported(*args) is False, args


@pytest.mark.gpu
@pytest.mark.parametrize("implementation", ["static", "dynamic"])
def test_generate_on_cuda_defers_its_stop_check_and_keeps_eager_tokens(implementation: str) -> None:
    """On CUDA, with the knob on, a jitted model's generate stops one token late without waiting on the device, and
    undoes the extra step: greedy tokens equal eager's for two prompts run to their length, and for one prompt that
    an EOS stops early (the extra forward ran, and was undone); with the knob off, through transformers' own stop
    check."""
    model = _llama("cuda", torch.bfloat16)
    two, one = torch.tensor([[3, 17, 42], [9, 4, 11]], device="cuda"), torch.tensor([[5, 8, 13]], device="cuda")
    kwargs: dict[str, Any] = {"do_sample": False, "pad_token_id": 0, "cache_implementation": implementation,
                              "max_new_tokens": 12}
    with torch.no_grad():
        free_run = model.generate(one, disable_compile=True, min_new_tokens=12, **kwargs)
    eos = int(free_run[0, one.shape[1] + 3])  # the 4th new token: an EOS there stops it early
    cases = [(two, {"min_new_tokens": 12}), (one, {"eos_token_id": eos})]
    finishes: list[int] = []
    finish = utils.DeferredStopCheck.finish

    def counted_finish(self: Any) -> int:
        finishes.append(finish(self))
        return finishes[-1]

    jitted = trident.jit(model)
    try:
        utils.DeferredStopCheck.finish = counted_finish
        for defer in (True, False):
            for ids, case in cases:
                with torch.no_grad(), override(hf_defer_stop=defer), allow_fallback():
                    expected = model.generate(ids, disable_compile=True, **case, **kwargs)
                    for _ in range(2):  # the second generate hits every specialization (and on static, replays)
                        actual = jitted.generate(ids, **case, **kwargs)
                        assert torch.equal(actual, expected), (defer, case, actual, expected)
                if "eos_token_id" in case:
                    assert expected.shape[1] <= ids.shape[1] + 4  # the EOS stopped it early
    finally:
        utils.DeferredStopCheck.finish = finish
    # Deferred (the plain model's generate never is): two generates run to their length (nothing to undo), two
    # stopped by the EOS (one extra step undone each); with the knob off, none.
    assert finishes == [0, 0, 1, 1], finishes
    state = jit_state(jitted)
    assert state.eager_calls == 0, trident.explain(jitted)
