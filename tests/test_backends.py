"""Backends: the transformers backend on a real tiny model, make_backend, and vLLM's CPU-side logic."""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import pytest

from selfevolve.backends import make_backend
from selfevolve.backends.base import Completion, SamplingConfig
from selfevolve.backends.hf import HFBackend
from selfevolve.backends.rows import finish_row
from selfevolve.config import ModelParams

GREEDY = dict(temperature=0.0)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def conversations() -> list[list[dict[str, str]]]:
    """Prompts of very different lengths (about 8 to 110 tokens)."""
    from selfevolve.embedded.transcripts import arith_transcripts

    every_role = {"solver": 1, "challenger": 1, "planner": 1, "critic_question": 1, "critic_plan": 1}
    convs = [t[:1] for _, t in arith_transcripts(10, seed=1, role_weights=every_role)]
    convs += [user("hi"), user("Compute 7 + 5."), [{"role": "system", "content": "Be brief."}, *user("Compute 12 * 3.")]]
    return convs


@pytest.fixture(scope="module")
def hf(varied_tiny_model_dir):
    backend = HFBackend(varied_tiny_model_dir, device="cpu", batch_size=64)
    yield backend
    backend.close()


# ---------------------------------------------------------------------------- hf backend
def test_batched_generation_shapes_and_token_counts(hf, conversations):
    s = SamplingConfig(max_new_tokens=12, n=3, **GREEDY)
    out = hf.chat(conversations, s)
    assert len(out) == len(conversations)
    prompt_lens = [len(ids) for ids in hf.encode(conversations)]
    for comps, plen, conv in zip(out, prompt_lens, conversations):
        assert len(comps) == 3
        assert all(isinstance(c, Completion) for c in comps)
        expected_plen = len(hf.tokenizer(hf.tokenizer.apply_chat_template(conv, add_generation_prompt=True, tokenize=False),
                                         add_special_tokens=False)["input_ids"])
        assert plen == expected_plen
        for c in comps:
            assert c.prompt_tokens == plen
            assert 1 <= c.output_tokens <= 12
            assert c.finish_reason in ("stop", "length")
            if c.finish_reason == "length":
                assert c.output_tokens == 12
        # greedy: the n samples of one prompt are identical
        assert len({(c.text, c.output_tokens) for c in comps}) == 1
    assert hf.last_stats.rows == 3 * len(conversations)
    assert hf.last_stats.output_tokens == sum(c.output_tokens for comps in out for c in comps)
    assert hf.chat([], s) == []


def test_left_padding_gives_same_greedy_output_alone_and_in_batch(varied_tiny_model_dir, hf, conversations):
    s = SamplingConfig(max_new_tokens=24, **GREEDY)
    alone = [hf.chat([c], s)[0][0] for c in conversations]
    batched = [comps[0] for comps in hf.chat(conversations, s)]
    lens = sorted(len(ids) for ids in hf.encode(conversations))
    assert lens[-1] - lens[0] > 50, "the batch must mix very different prompt lengths"
    assert [c.text for c in batched] == [c.text for c in alone]
    assert [c.output_tokens for c in batched] == [c.output_tokens for c in alone]
    assert len({c.text for c in alone}) > len(conversations) // 2, "outputs should depend on the prompt"
    # micro-batches of 3 (several generate calls, reordered by length) give the same result in input order
    small = HFBackend.from_pretrained_objects(hf.model, hf.tokenizer, batch_size=3)
    micro = [comps[0] for comps in small.chat(conversations, s)]
    assert small.last_stats.micro_batches == -(-len(conversations) // 3)
    assert [c.text for c in micro] == [c.text for c in alone]


def test_shared_prompt_prefix_is_computed_once_and_changes_no_completion(hf):
    """Role prompts share a long prefix (worked exchanges + instruction): the backend computes it
    once per call and each micro-batch starts from a copy of its cache. In float32 every
    completion (greedy and seeded sampling, n > 1, several micro-batches, streamed text) is what
    the backend without the cache gives."""
    from selfevolve.roles.templates import worked_examples

    shots = worked_examples("solver", "math", "arith")
    convs = [shots + user(f"Problem: Compute {a} + {b}.") for a, b in [(7, 5), (12, 30), (407, 96), (3, 1234), (88, 48)]]
    plain = HFBackend.from_pretrained_objects(hf.model, hf.tokenizer, batch_size=4, prefix_cache=False)
    cached = HFBackend.from_pretrained_objects(hf.model, hf.tokenizer, batch_size=4)
    for s in (SamplingConfig(max_new_tokens=20, **GREEDY), SamplingConfig(temperature=1.0, max_new_tokens=20, n=3, seed=5)):
        want = plain.chat(convs, s)
        streamed: dict[tuple[int, int], str] = {}
        got = cached.chat(convs, s, on_text=lambda p, k, d, acc=streamed: acc.__setitem__((p, k), acc.get((p, k), "") + d))
        assert got == want
        assert cached.last_stats.micro_batches > 1
        assert all(got[p][k].text.startswith(t) for (p, k), t in streamed.items()) and streamed
    shared = len(hf.encode(convs)[0]) - 15
    assert cached.last_stats.cached_prefix_tokens >= min(shared, 100) and plain.last_stats.cached_prefix_tokens == 0
    # prompts with little in common are not cached; a lone prompt caches all but its last token
    cached.chat([user("hi"), user("Compute 7 + 5.")], SamplingConfig(max_new_tokens=4, **GREEDY))
    assert cached.last_stats.cached_prefix_tokens == 0
    cached.chat(convs[:1], SamplingConfig(max_new_tokens=4, **GREEDY))
    assert cached.last_stats.cached_prefix_tokens == len(hf.encode(convs[:1])[0]) - 1


def test_micro_batches_sorted_by_length_limit_padding(hf, conversations):
    s = SamplingConfig(max_new_tokens=2, **GREEDY)
    small = HFBackend.from_pretrained_objects(hf.model, hf.tokenizer, batch_size=4)
    small.chat(conversations, s)
    st = small.last_stats
    assert st.prompt_tokens == sum(len(ids) for ids in hf.encode(conversations))
    # sorted micro-batches pad far less than one batch of everything would
    one_batch_padding = max(len(ids) for ids in hf.encode(conversations)) * len(conversations)
    assert st.padded_prompt_tokens < 0.8 * one_batch_padding
    budget = HFBackend.from_pretrained_objects(hf.model, hf.tokenizer, batch_size=64, max_batch_tokens=300)
    budget.chat(conversations, s)
    assert budget.last_stats.micro_batches > 1


def test_stop_strings_truncate(hf, conversations):
    s = SamplingConfig(max_new_tokens=30, **GREEDY)
    full = [comps[0] for comps in hf.chat(conversations, s)]
    k = max(range(len(full)), key=lambda i: len(full[i].text))
    text = full[k].text
    assert len(text) >= 12
    stop = text[len(text) // 2: len(text) // 2 + 2]
    cut = text.find(stop)
    got = hf.chat([conversations[k]], SamplingConfig(max_new_tokens=30, stop=[stop, "\x00never\x00"], **GREEDY))[0][0]
    assert got.text == text[:cut]
    assert stop not in got.text
    assert got.finish_reason == "stop"
    assert got.output_tokens < full[k].output_tokens or full[k].finish_reason == "stop"
    assert got.output_tokens >= 1
    # a stop string that never appears changes nothing
    same = hf.chat([conversations[k]], SamplingConfig(max_new_tokens=30, stop=["\x00never\x00"], **GREEDY))[0][0]
    assert same == full[k]


def test_max_new_tokens_gives_length_and_eos_gives_stop(hf, conversations):
    out = [comps[0] for comps in hf.chat(conversations, SamplingConfig(max_new_tokens=5, **GREEDY))]
    assert any(c.finish_reason == "length" for c in out)
    for c in out:
        assert (c.finish_reason == "length") == (c.output_tokens == 5) or c.finish_reason == "stop"
    long = [comps[0] for comps in hf.chat(conversations, SamplingConfig(max_new_tokens=60, **GREEDY))]
    for short, c in zip(out, long):
        if c.finish_reason == "length":
            assert c.output_tokens == 60
        else:  # EOS before the limit: counted, and the greedy prefix agrees
            assert c.output_tokens < 60
        if short.finish_reason == "length":
            assert c.text.startswith(short.text[:-1] if short.text else "")


def test_seed_reproducibility_and_rng_isolation(hf, conversations):
    import torch

    s = SamplingConfig(temperature=1.0, top_p=0.95, max_new_tokens=12, n=3, seed=123)
    state = torch.get_rng_state()
    a = hf.chat(conversations[:4], s)
    assert torch.equal(state, torch.get_rng_state()), "a seeded call must not move the global RNG"
    b = hf.chat(conversations[:4], s)
    c = hf.chat(conversations[:4], s.model_copy(update={"seed": 124}))
    assert a == b
    assert a != c
    assert any(len({x.text for x in comps}) > 1 for comps in a), "the n samples should differ"


def test_from_pretrained_objects_restores_train_mode(varied_tiny_model_dir, hf, conversations):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(varied_tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(varied_tiny_model_dir)
    tok.padding_side = "right"  # a trainer's setting; the backend pads by hand and must not care
    model.train()
    backend = HFBackend.from_pretrained_objects(model, tok)
    s = SamplingConfig(max_new_tokens=10, **GREEDY)
    got = backend.chat(conversations[:5], s)
    assert model.training and tok.padding_side == "right"
    assert got == hf.chat(conversations[:5], s)


def test_context_limit(varied_tiny_model_dir, conversations):
    backend = HFBackend(varied_tiny_model_dir, device="cpu", max_model_len=60)
    lens = [len(ids) for ids in backend.encode(conversations)]
    out = backend.chat(conversations, SamplingConfig(max_new_tokens=20, **GREEDY))
    for plen, comps in zip(lens, out):
        c = comps[0]
        if plen >= 60:
            assert c == Completion(text="", prompt_tokens=plen, output_tokens=0, finish_reason="length")
        else:
            assert c.output_tokens <= min(20, 60 - plen)
    assert any(p >= 60 for p in lens) and any(p < 45 for p in lens)


def test_finish_row_rules():
    def decode(ids):
        return "".join(chr(ord("a") + i) for i in ids if i < 26)

    eos, pad = {30}, 31
    assert finish_row([0, 1, 30, 31, 31], limit=10, eos_ids=eos, pad_id=pad, decode=decode, stop=[]) == ("ab", 3, "stop")
    assert finish_row([0, 1, 2, 3], limit=4, eos_ids=eos, pad_id=pad, decode=decode, stop=[]) == ("abcd", 4, "length")
    # ids past the row's own limit are dropped
    assert finish_row([0, 1, 2, 3], limit=2, eos_ids=eos, pad_id=pad, decode=decode, stop=[]) == ("ab", 2, "length")
    # stop string: text cut before it, tokens counted up to the one completing it
    assert finish_row([0, 1, 2, 3, 4, 31], limit=10, eos_ids=eos, pad_id=pad, decode=decode, stop=["cd"]) == ("ab", 4, "stop")
    # the earliest stop string wins, even when EOS comes later
    assert finish_row([0, 1, 2, 30], limit=10, eos_ids=eos, pad_id=pad, decode=decode, stop=["x", "b"]) == ("a", 2, "stop")
    # pad == eos (tokenizers without a pad token): padding after a stop string is not counted
    assert finish_row([0, 1, 2, 30, 30], limit=10, eos_ids=eos, pad_id=30, decode=decode, stop=["c"]) == ("ab", 3, "stop")


# ---------------------------------------------------------------------------- make_backend
def test_make_backend_hf_uses_model_path_override(varied_tiny_model_dir):
    params = ModelParams(base="does/not/exist", backend="hf", device="cpu", max_model_len=128)
    backend = make_backend(params, model_path=varied_tiny_model_dir, batch_size=8)
    assert isinstance(backend, HFBackend)
    assert backend.max_model_len == 128 and backend.batch_size == 8
    out = backend.chat([user("hi")], SamplingConfig(max_new_tokens=3, **GREEDY))
    assert len(out) == 1 and len(out[0]) == 1


def test_make_backend_openai(monkeypatch):
    from selfevolve.backends.openai_backend import OpenAIBackend

    with pytest.raises(ValueError, match="openai_base_url"):
        make_backend(ModelParams(backend="openai"))
    monkeypatch.setenv("MY_KEY", "sk-test")
    params = ModelParams(backend="openai", openai_base_url="http://127.0.0.1:9/v1", openai_api_key_env="MY_KEY",
                         max_concurrency=3, max_retries=1, request_timeout_s=5)
    b = make_backend(params, model_path="models/c1")
    assert isinstance(b, OpenAIBackend)
    assert (b.model, b.max_concurrency, b.max_retries, b.timeout_s) == ("models/c1", 3, 1, 5.0)
    assert b.client.api_key == "sk-test"
    assert make_backend(params.model_copy(update={"openai_model": "served"})).model == "served"
    with pytest.raises(ValueError, match="adapter"):
        make_backend(params, adapter_path="models/c1/adapter")


# ---------------------------------------------------------------------------- vllm (CPU-side)
from selfevolve.backends.vllm_backend import (  # noqa: E402
    VLLMBackend,
    VLLMUnavailable,
    adapter_rank,
    from_vllm_outputs,
    lora_rank_slot,
    to_vllm_sampling_kwargs,
)

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def test_vllm_sampling_kwargs():
    s = SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=33, n=4, seed=5, stop=["</answer>", ""])
    assert to_vllm_sampling_kwargs(s) == {"temperature": 0.7, "top_p": 0.9, "max_tokens": 33, "n": 4, "seed": 5,
                                          "stop": ["</answer>"]}
    assert to_vllm_sampling_kwargs(SamplingConfig(temperature=0))["seed"] is None


def test_from_vllm_outputs_duck_typed():
    def co(index, text, ids, reason):
        return SimpleNamespace(index=index, text=text, token_ids=ids, finish_reason=reason)

    outputs = [
        SimpleNamespace(prompt_token_ids=[1, 2, 3], outputs=[co(1, "b", (5, 6, 2), "stop"), co(0, "a", [7], "length")]),
        SimpleNamespace(prompt_token_ids=[4], outputs=[co(0, None, [], "abort")]),
    ]
    got = from_vllm_outputs(outputs)
    assert got == [
        [Completion(text="a", prompt_tokens=3, output_tokens=1, finish_reason="length"),
         Completion(text="b", prompt_tokens=3, output_tokens=3, finish_reason="stop")],
        [Completion(text="", prompt_tokens=1, output_tokens=0, finish_reason="error")],
    ]


def test_lora_rank_helpers(tmp_path):
    assert adapter_rank(tmp_path) is None
    (tmp_path / "adapter_config.json").write_text('{"r": 24, "lora_alpha": 48}')
    assert adapter_rank(tmp_path) == 24
    assert [lora_rank_slot(r) for r in (1, 8, 24, 64, 300, 1000)] == [8, 8, 32, 64, 320, 1000]


@pytest.mark.skipif(HAVE_VLLM, reason="vllm is installed here")
def test_vllm_backend_without_vllm_raises_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # make sure the import fails even if a stub is around
    with pytest.raises(VLLMUnavailable, match="requirements-gpu.txt"):
        VLLMBackend("models/base")
    with pytest.raises(ImportError, match="CUDA machine"):
        make_backend(ModelParams(backend="vllm"))


def _cuda_and_vllm() -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return HAVE_VLLM and torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_and_vllm(), reason="needs CUDA and vllm")
def test_vllm_backend_generates_on_gpu(varied_tiny_model_dir, hf, conversations):
    backend = VLLMBackend(varied_tiny_model_dir, dtype="float32", max_model_len=256, gpu_memory_utilization=0.3, enforce_eager=True)
    try:
        s = SamplingConfig(max_new_tokens=16, n=2, **GREEDY)
        out = backend.chat(conversations, s)
        assert [len(c) for c in out] == [2] * len(conversations)
        ref = hf.chat(conversations, s)
        for got, want in zip(out, ref):
            assert got[0].prompt_tokens == want[0].prompt_tokens
            assert 1 <= got[0].output_tokens <= 16
        # greedy output agrees with transformers on most prompts (kernels differ slightly)
        agree = sum(g[0].text == w[0].text for g, w in zip(out, ref))
        assert agree >= len(conversations) // 2
        seeded = SamplingConfig(temperature=1.0, max_new_tokens=8, n=2, seed=3, stop=["e"])
        assert backend.chat(conversations[:3], seeded) == backend.chat(conversations[:3], seeded)
    finally:
        backend.close()


def test_validation_sees_the_weights_generation_will_use():
    import torch

    from selfevolve.backends.hf import in_dtype

    policy = torch.nn.Linear(4, 4)  # float32, as a policy is trained
    assert in_dtype(policy, "float32") is policy
    view = in_dtype(policy, "bfloat16")
    assert view is not policy and view.weight.dtype == torch.bfloat16 and policy.weight.dtype == torch.float32
    assert torch.equal(view.weight, policy.weight.to(torch.bfloat16))
    with pytest.raises(ValueError, match="dtype"):
        in_dtype(policy, "int8")


def test_auto_dtype_on_a_cpu_is_bfloat16_only_where_the_cpu_has_it(monkeypatch):
    """Emulated bfloat16 matmuls ran ~90x slower than float32 (an AVX2 CPU), so ``auto`` avoids them."""
    import torch

    from selfevolve import runtime_env
    from selfevolve.backends.hf import in_dtype

    policy = torch.nn.Linear(4, 4)
    monkeypatch.setattr(runtime_env, "native_bfloat16", lambda: False)
    assert in_dtype(policy, "auto") is policy
    monkeypatch.setattr(runtime_env, "native_bfloat16", lambda: True)
    assert in_dtype(policy, "auto").weight.dtype == torch.bfloat16 and policy.weight.dtype == torch.float32
