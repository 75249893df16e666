"""The training-throughput benchmark's parts: its pre-tokenised step is the library's step (same
batches, same loss), and its FLOP count is the textbook one."""

from __future__ import annotations

import pytest

import benchmarks.bench_training_throughput as bench
from selfevolve.embedded import tinymodel
from selfevolve.embedded.transcripts import arith_transcripts, as_rows


@pytest.fixture(scope="module")
def setup():
    transcripts = arith_transcripts(64, seed=3)
    tok = tinymodel.build_tokenizer((m["content"] for _, c in transcripts for m in c), vocab_size=256)
    return tok, as_rows(transcripts)


def _model(tok):
    return tinymodel.build_model(tok, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                                 max_position_embeddings=512, seed=0)


def test_pretokenised_steps_train_exactly_as_the_library_step(setup):
    tok, rows = setup
    args = dict(steps=3, batch_size=8, lr=1e-3, precision="float32", max_length=512)
    plain = bench.fit_phases(_model(tok), tok, rows, **args)
    pre = bench.fit_phases(_model(tok), tok, rows, pretokenised=True, **args)
    assert pre["final_loss"] == pytest.approx(plain["final_loss"], rel=1e-6)
    assert (pre["real_tokens"], pre["padded_positions"]) == (plain["real_tokens"], plain["padded_positions"])
    assert 0 < plain["real_tokens"] and 0 < plain["padded_positions"]   # a shared prefix runs once: fewer positions than tokens
    assert set(plain["phases"]) == {"tokenise", "forward", "backward", "optimizer"}


def test_training_flops_are_six_per_matmul_parameter_and_token_plus_attention(setup):
    tok, _ = setup
    model = _model(tok)
    cfg = model.config
    matmul = sum(p.numel() for n, p in model.named_parameters() if p.dim() == 2 and "embed_tokens" not in n)
    if cfg.tie_word_embeddings:
        matmul += model.get_input_embeddings().weight.numel()
    assert bench.training_flops(model, 1000, 50.0) == 6 * matmul * 1000 + 12 * 2 * 32 * 50.0 * 1000
    assert matmul < sum(p.numel() for p in model.parameters())  # norms and (untied) embeddings are not matmuls


def test_training_runs_eager_attention_on_the_cpu_same_loss_and_the_saved_model_keeps_the_default(setup, tmp_path):
    """``training_attention`` swaps the kernel, not the method: the same steps give the same loss
    with eager and sdpa attention; the policy loader applies it; a saved model does not carry it."""
    import torch

    from selfevolve.config import LoraParams
    from selfevolve.training.rl import load_policy, training_attention

    tok, rows = setup
    eager, sdpa = training_attention(_model(tok)), _model(tok)
    sdpa.set_attn_implementation("sdpa")
    assert not torch.cuda.is_available() and eager.config._attn_implementation == "eager"
    args = dict(steps=3, batch_size=8, lr=1e-3, precision="float32", max_length=512)
    assert bench.fit_phases(eager, tok, rows, **args)["final_loss"] == pytest.approx(
        bench.fit_phases(sdpa, tok, rows, **args)["final_loss"], rel=1e-4)
    eager.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    assert "eager" not in (tmp_path / "m" / "config.json").read_text()
    model, _ = load_policy(tmp_path / "m", LoraParams())
    assert model.config._attn_implementation == "eager"


def test_a_shared_prompt_prefix_runs_once_same_loss_fewer_positions(setup):
    """``fit_phases(share_prefix=...)``, what ``--pretrained`` compares: rows whose prompts share a
    long instruction (a pretrained model's role prompts) train to the same loss with the prefix run
    once as with the plain length cut, on far fewer positions."""
    from selfevolve.records import Rollout

    tok, rows = setup
    shared = "Solve the problem step by step and give the answer at the end. " * 4
    rows = [Rollout(id=f"s{i}", role="solver", group="g", question_id="q", prompt=shared + r.prompt, completion=r.completion,
                    reward=1.0) for i, r in enumerate(rows)]
    args = dict(steps=3, batch_size=8, lr=1e-3, precision="float32", max_length=512)
    once = bench.fit_phases(_model(tok), tok, rows, **args)
    plain = bench.fit_phases(_model(tok), tok, rows, share_prefix=False, **args)
    assert once["final_loss"] == pytest.approx(plain["final_loss"], rel=1e-4)
    assert once["real_tokens"] == plain["real_tokens"] and once["padded_positions"] < 0.9 * plain["padded_positions"]


def test_the_passive_threads_variant_runs_the_steps_in_a_child_with_passive_openmp(monkeypatch):
    """The child gets OMP_WAIT_POLICY=PASSIVE and no spin count (libgomp reads them when it loads),
    runs the library's steps and reports their seconds."""
    import subprocess

    seen = {}
    real_run = subprocess.run

    def run(args, env, **kw):
        seen.update(env=env, args=args)
        return real_run(args, env=env, **kw)

    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    monkeypatch.setattr(bench.subprocess, "run", run)
    seconds = bench.passive_fit_seconds(["--steps", "1", "--transcripts", "40", "--threads", "2"])
    assert seconds > 0
    assert seen["env"]["OMP_WAIT_POLICY"] == "PASSIVE" and "GOMP_SPINCOUNT" not in seen["env"]
    assert "--fit-only" in seen["args"]
