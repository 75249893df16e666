"""``selfevolve serve`` and the OpenAI-compatible backend.

A real ``selfevolve serve`` subprocess (127.0.0.1, free port) is queried by ``OpenAIBackend``;
retries, error handling, ``n`` fallbacks and the concurrency limit are checked against a small
scripted ``http.server`` on 127.0.0.1; the server's batching worker and error paths run in-process.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from selfevolve.backends.base import Backend, Completion, SamplingConfig
from selfevolve.backends.openai_backend import OpenAIBackend, backoff_delay, split_tokens

GREEDY = dict(temperature=0.0)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- real server
@pytest.fixture(scope="module")
def server(varied_tiny_model_dir, tmp_path_factory):
    """``selfevolve serve TINY --port P`` in a subprocess; yields its base URL; SIGTERM then kill."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    # one intra-op thread: the server shares 2 cores with this test process (OpenMP spin-waiting with
    # more threads than cores turns 0.1 s generations into 10 s ones)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1",
               OMP_WAIT_POLICY="PASSIVE")
    cmd = [sys.executable, "-c", "from selfevolve.cli import app; app()", "serve", str(varied_tiny_model_dir),
           "--port", str(port), "--model-name", "tiny", "--device", "cpu", "--threads", "1", "--log-level", "warning"]
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"selfevolve serve exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                pytest.fail(f"selfevolve serve not healthy after 120 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.25)
        yield base
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


@pytest.fixture(scope="module")
def local_hf(varied_tiny_model_dir):
    from selfevolve.backends.hf import HFBackend

    return HFBackend(varied_tiny_model_dir, device="cpu")


@pytest.mark.slow
def test_health_and_models(server):
    assert httpx.get(f"{server}/health").json() == {"status": "ok", "model": "tiny"}
    models = httpx.get(f"{server}/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["tiny"]


@pytest.mark.slow
def test_raw_chat_completion_schema(server):
    body = {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "text", "text": "Compute 2 + 2."}]}],
            "max_tokens": 6, "n": 2, "temperature": 0, "stop": "\x00none", "seed": 1}
    r = httpx.post(f"{server}/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    data = r.json()
    assert data["object"] == "chat.completion" and data["model"] == "tiny" and data["id"].startswith("chatcmpl-")
    assert isinstance(data["created"], int)
    assert [c["index"] for c in data["choices"]] == [0, 1]
    for c in data["choices"]:
        assert c["message"]["role"] == "assistant" and isinstance(c["message"]["content"], str)
        assert c["finish_reason"] in ("stop", "length")
    u = data["usage"]
    assert u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and u["prompt_tokens"] > 0


@pytest.mark.slow
def test_server_errors(server):
    r = httpx.post(f"{server}/v1/chat/completions", json={"model": "other", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404 and "tiny" in r.json()["error"]["message"]
    r = httpx.post(f"{server}/v1/chat/completions", json={"messages": []})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(f"{server}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}], "temperature": -1})
    assert r.status_code == 400 and "temperature" in r.json()["error"]["message"]
    r = httpx.post(f"{server}/v1/completions", json={"model": "other", "prompt": "x"})
    assert r.status_code == 404 and "tiny" in r.json()["error"]["message"]
    r = httpx.post(f"{server}/v1/completions", json={"prompt": []})
    assert r.status_code == 400 and "prompt" in r.json()["error"]["message"]
    for bad in ([[]], [[1, -2]], [[1, 10**9]]):
        r = httpx.post(f"{server}/v1/completions", json={"prompt": bad})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt", (bad, r.text)
    r = httpx.post(f"{server}/v1/completions", json={"prompt": "x", "logprobs": 1, "echo": True, "max_tokens": 1, "stream": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"
    r = httpx.post(f"{server}/v1/completions", json={"prompt": "x", "logprobs": 9})
    assert r.status_code == 400 and "logprobs" in r.json()["error"]["message"]
    r = httpx.post(f"{server}/v1/completions", json={"prompt": "x", "max_tokens": 0})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"


def openai_client(server):
    from openai import OpenAI

    return OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0, timeout=60)


def test_openai_client_streams_chat_as_the_plain_answer(server):
    """Issue 26: ``stream=True`` got 400. Now the official client's stream yields
    ``chat.completion.chunk`` objects: the role first, the text in pieces that join to the greedy
    answer of the same request without streaming, one finish_reason per choice, then the usage."""
    client = openai_client(server)
    ask = dict(model="tiny", messages=user("Compute 12 + 7."), max_tokens=24, temperature=0, n=2)
    plain = client.chat.completions.create(**ask)
    chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    for i, want in enumerate(plain.choices):
        mine = [ch for c in chunks for ch in c.choices if ch.index == i]
        assert mine[0].delta.role == "assistant"
        pieces = [ch.delta.content for ch in mine if ch.delta.content]
        assert "".join(pieces) == want.message.content and want.message.content
        assert len(pieces) > 1  # handed out while generated, not in one piece at the end
        assert [ch.finish_reason for ch in mine if ch.finish_reason] == [want.finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == plain.usage.model_dump()


def test_openai_client_completions(server, local_hf):
    """Issue 26: ``/v1/completions`` was 404. Raw prompts (no chat template), several at once with
    ``n``, ``stop``, ``echo`` and streaming, as the official client sends them."""
    client = openai_client(server)
    prompts = ["Compute 12 + 7.", "<question>"]
    got = client.completions.create(model="tiny", prompt=prompts, max_tokens=10, temperature=0, n=2)
    want = local_hf.complete(prompts, SamplingConfig(max_new_tokens=10, n=2, **GREEDY))
    assert got.object == "text_completion"
    assert [c.index for c in got.choices] == [0, 1, 2, 3]
    assert [c.text for c in got.choices] == [c.text for comps in want for c in comps]
    assert [c.finish_reason for c in got.choices] == [c.finish_reason for comps in want for c in comps]
    assert got.usage.prompt_tokens == sum(comps[0].prompt_tokens for comps in want)
    assert got.usage.completion_tokens == sum(c.output_tokens for comps in want for c in comps)
    # raw prompts are not the chat-templated ones
    assert want[0][0].prompt_tokens != local_hf.chat([user(prompts[0])], SamplingConfig(max_new_tokens=1))[0][0].prompt_tokens
    text = want[0][0].text
    stop = text[4:6]
    cut = client.completions.create(model="tiny", prompt=prompts[0], max_tokens=10, temperature=0, stop=[stop])
    assert cut.choices[0].text == text[:text.index(stop)] and cut.choices[0].finish_reason == "stop"
    echoed = client.completions.create(model="tiny", prompt=prompts[0], max_tokens=10, temperature=0, echo=True)
    assert echoed.choices[0].text == prompts[0] + text
    streamed = list(client.completions.create(model="tiny", prompt=prompts[0], max_tokens=10, temperature=0, stream=True))
    assert "".join(ch.text for c in streamed for ch in c.choices) == text
    assert [ch.finish_reason for c in streamed for ch in c.choices if ch.finish_reason] == [want[0][0].finish_reason]


def test_hf_score_is_the_models_log_likelihood(local_hf):
    """``HFBackend.score``: each token's log-probability given the ones before it, as a plain forward
    pass gives it, for a text prompt (special tokens added as ``complete`` adds them) and a token-id
    one, batched with padding; the greedy continuation is the top token at every position."""
    import torch

    prompts = ["Compute 12 + 7.", "<question>"]
    greedy = [c[0] for c in local_hf.complete(prompts, SamplingConfig(max_new_tokens=6, **GREEDY))]
    assert all(c.token_ids is not None and local_hf.tokenizer.decode(c.token_ids) == c.text for c in greedy)
    ids = local_hf.tokenizer(prompts[1])["input_ids"]
    got = local_hf.score([prompts[0], ids], [c.token_ids for c in greedy], top=2)
    tok = local_hf.tokenizer
    for prompt, cont, lp in zip(prompts, greedy, got):
        head = tok(prompt)["input_ids"]
        seq = head + cont.token_ids
        with torch.inference_mode():
            logp = torch.log_softmax(local_hf.model(input_ids=torch.tensor([seq])).logits[0].float(), -1)
        want = [logp[j - 1, seq[j]].item() for j in range(1, len(seq))]
        assert lp.prompt_tokens == len(head) and len(lp.tokens) == len(seq) and lp.token_logprobs[0] is None
        assert lp.token_logprobs[1:] == pytest.approx(want, abs=1e-4)
        assert lp.top_logprobs[0] is None and all(len(t) <= 2 for t in lp.top_logprobs[1:])
        for j in range(lp.prompt_tokens, len(seq)):  # generated greedily: the top token, its logprob the max
            assert lp.token_logprobs[j] == pytest.approx(max(lp.top_logprobs[j].values()), abs=1e-5)
        assert lp.tokens[lp.prompt_tokens:] == [tok.decode([t]) for t in cont.token_ids]
        assert lp.text_offset == [sum(len(t) for t in lp.tokens[:j]) for j in range(len(seq))]
        tail = lp.tail(lp.prompt_tokens)
        assert tail.text_offset[0] == 0 and tail.tokens == lp.tokens[lp.prompt_tokens:]
    as_text = local_hf.score([prompts[0]], ["12"], top=0)[0]  # a text continuation is tokenised without special tokens
    assert as_text.tokens[as_text.prompt_tokens:] == [tok.decode([t]) for t in tok("12", add_special_tokens=False)["input_ids"]]
    assert as_text.top_logprobs == [None] * len(as_text.tokens)
    with pytest.raises(ValueError):
        local_hf.score(prompts, ["x"])


@pytest.mark.slow
def test_openai_client_completions_with_logprobs(server, local_hf):
    """Issue 26: ``logprobs`` was refused. The official client asks for them on a text and a
    token-id prompt, with and without ``echo``, and with ``max_tokens`` 0 (scoring only): the
    numbers are the model's own (``HFBackend.score``)."""
    client = openai_client(server)
    prompt = "Compute 12 + 7."
    done = local_hf.complete([prompt], SamplingConfig(max_new_tokens=5, **GREEDY))[0][0]
    text, want = done.text, local_hf.score([prompt], [done.token_ids], top=3)[0]
    got = client.completions.create(model="tiny", prompt=prompt, max_tokens=5, temperature=0, logprobs=3)
    lp = got.choices[0].logprobs
    assert got.choices[0].text == text and lp.tokens == want.tokens[want.prompt_tokens:]
    assert lp.token_logprobs == pytest.approx(want.token_logprobs[want.prompt_tokens:], abs=1e-4)
    assert lp.text_offset[0] == 0
    for top, top_want in zip(lp.top_logprobs, want.top_logprobs[want.prompt_tokens:], strict=True):
        assert top == pytest.approx(top_want, abs=1e-4)
    assert all(1 <= len(t) <= 3 for t in lp.top_logprobs)
    echoed = client.completions.create(model="tiny", prompt=prompt, max_tokens=5, temperature=0, logprobs=1, echo=True)
    lp = echoed.choices[0].logprobs
    assert echoed.choices[0].text == prompt + text and lp.tokens == want.tokens and lp.token_logprobs[0] is None
    assert lp.token_logprobs[1:] == pytest.approx(want.token_logprobs[1:], abs=1e-4)
    ids = local_hf.tokenizer(prompt)["input_ids"]
    assert client.completions.create(model="tiny", prompt=ids, max_tokens=5, temperature=0).choices[0].text == text
    scored = client.completions.create(model="tiny", prompt=ids, max_tokens=0, logprobs=0, echo=True)
    only = local_hf.score([ids], [""], top=0)[0]
    assert scored.choices[0].text == local_hf.tokenizer.decode(ids) and scored.usage.completion_tokens == 0
    assert scored.choices[0].logprobs.token_logprobs[1:] == pytest.approx(only.token_logprobs[1:], abs=1e-4)
    plain = client.completions.create(model="tiny", prompt=prompt, max_tokens=5, temperature=0)
    assert plain.choices[0].logprobs is None


@pytest.mark.slow
def test_lm_evaluation_harness_scores_a_multiple_choice_task_through_selfevolve_serve(server, local_hf, tmp_path):
    """Issue 26: log-likelihood tasks could not be scored (the server refused ``logprobs``).
    lm-evaluation-harness' ``local-completions`` with the model's tokenizer runs a multiple-choice
    task from a local JSONL file: it sends token ids with ``echo``, ``logprobs`` and ``max_tokens``
    1, and the log-likelihood it records for every choice is the model's own (``HFBackend.score``);
    its accuracy is that of picking the likeliest choice."""
    docs = [{"question": f"What is {a} + {b}?", "choices": [str(a + b), str(a + b + 1), str(a * b)], "label": 0}
            for a, b in [(12, 7), (3, 4), (25, 30), (8, 9)]]
    (tmp_path / "mc.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "served_mc.yaml").write_text(json.dumps({
        "task": "served_mc", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(tmp_path / "mc.jsonl")}},
        "test_split": "test", "output_type": "multiple_choice", "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_choice": "{{choices}}", "doc_to_target": "{{label}}", "target_delimiter": " ",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}), encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    model_dir = local_hf.model_path
    r = subprocess.run([sys.executable, "-m", "lm_eval", "run", "--model", "local-completions", "--model_args",
                        f"base_url={server}/v1/completions,model=tiny,tokenizer_backend=huggingface,tokenizer={model_dir},"
                        "num_concurrent=1,max_retries=1", "--tasks", "served_mc", "--include_path", str(tmp_path / "tasks"),
                        "--output_path", str(tmp_path / "out"), "--log_samples"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    samples = sorted((json.loads(line) for f in (tmp_path / "out").rglob("samples_served_mc_*.jsonl")
                      for line in f.read_text().splitlines()), key=lambda s: s["doc_id"])
    assert len(samples) == len(docs)
    tok, picked = local_hf.tokenizer, []
    for doc, sample in zip(docs, samples):
        context = f"Question: {doc['question']}\nAnswer:"
        lls = []
        for choice, resp in zip(doc["choices"], sample["resps"]):
            ctx = tok(context)["input_ids"]
            cont = tok(context + " " + choice)["input_ids"][len(ctx):]
            lp = local_hf.score([ctx + cont], [""], top=1)[0]
            lls.append(sum(lp.token_logprobs[len(ctx):]))
            assert float(resp[0][0]) == pytest.approx(lls[-1], abs=1e-3)
        picked.append(int(max(range(len(lls)), key=lls.__getitem__) == doc["label"]))
    results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())["results"]["served_mc"]
    assert results["acc,none"] == pytest.approx(sum(picked) / len(docs))


@pytest.mark.slow
def test_lm_evaluation_harness_scores_a_model_through_selfevolve_serve(server, local_hf, tmp_path):
    """Issue 26: an evaluation harness against a served model. EleutherAI's lm-evaluation-harness
    (``lm_eval run --model local-completions``, offline) runs a generate_until task from a local
    JSONL file through ``/v1/completions``: every response it records is the model's own greedy
    completion of the task's prompt (cut at the task's stop string), and its exact_match counts the
    one document whose target is that completion."""
    prompts = [f"Question: What is {a} + {b}?\nAnswer:" for a, b in [(12, 7), (3, 4), (25, 30), (8, 9)]]
    want = [c[0].text for c in local_hf.complete(prompts, SamplingConfig(max_new_tokens=8, temperature=0.0, stop=["\n"]))]
    docs = [{"question": p.removeprefix("Question: ").removesuffix("\nAnswer:"), "answer": want[0] if i == 0 else f"#{i}"}
            for i, p in enumerate(prompts)]
    (tmp_path / "arith.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "served_arith.yaml").write_text(json.dumps({  # YAML is a superset of JSON
        "task": "served_arith", "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": str(tmp_path / "arith.jsonl")}},
        "test_split": "test", "output_type": "generate_until", "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_target": "{{answer}}", "generation_kwargs": {"until": ["\n"], "max_gen_toks": 8, "do_sample": False, "temperature": 0},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True}]}), encoding="utf-8")
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    r = subprocess.run([sys.executable, "-m", "lm_eval", "run", "--model", "local-completions", "--model_args",
                        f"base_url={server}/v1/completions,model=tiny,tokenizer_backend=none,num_concurrent=1,max_retries=1",
                        "--tasks", "served_arith", "--include_path", str(tmp_path / "tasks"), "--output_path", str(tmp_path / "out"),
                        "--log_samples"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    samples = [json.loads(line) for f in (tmp_path / "out").rglob("samples_served_arith_*.jsonl") for line in f.read_text().splitlines()]
    assert [s["arguments"]["gen_args_0"]["arg_0"] for s in sorted(samples, key=lambda s: s["doc_id"])] == prompts
    assert [s["resps"][0][0] for s in sorted(samples, key=lambda s: s["doc_id"])] == want
    results = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())["results"]["served_arith"]
    assert results["exact_match,none"] == pytest.approx(1 / len(prompts))


@pytest.mark.slow
def test_openai_backend_against_selfevolve_serve_matches_hf(server, local_hf):
    from selfevolve.embedded.transcripts import arith_transcripts

    convs = [t[:1] for _, t in arith_transcripts(6, seed=2)] + [user("hi")]
    backend = OpenAIBackend(f"{server}/v1", "tiny", timeout_s=60, max_retries=1, max_concurrency=4)
    try:
        s = SamplingConfig(max_new_tokens=10, n=2, **GREEDY)
        got = backend.chat(convs, s)
        want = local_hf.chat(convs, s)
        assert [len(c) for c in got] == [2] * len(convs)
        for g, w in zip(got, want):
            assert [c.text for c in g] == [c.text for c in w]
            assert [c.finish_reason for c in g] == [c.finish_reason for c in w]
            assert g[0].prompt_tokens == w[0].prompt_tokens
            assert sum(c.output_tokens for c in g) == sum(c.output_tokens for c in w)
        assert backend.last_stats.requests == len(convs) and backend.last_stats.failed_prompts == 0
        # stop strings and max_tokens go through the server
        text = want[0][0].text
        stop = text[len(text) // 2: len(text) // 2 + 2] if len(text) > 4 else "\x00"
        cut = backend.chat([convs[0]], SamplingConfig(max_new_tokens=10, stop=[stop], **GREEDY))[0][0]
        assert cut.text == local_hf.chat([convs[0]], SamplingConfig(max_new_tokens=10, stop=[stop], **GREEDY))[0][0].text
        one = backend.chat([convs[1]], SamplingConfig(max_new_tokens=1, **GREEDY))[0][0]
        assert one.output_tokens == 1 and one.finish_reason in ("length", "stop")
        # seeded sampling is reproducible through the server
        seeded = SamplingConfig(temperature=1.0, max_new_tokens=8, n=3, seed=11)
        assert backend.chat(convs[:3], seeded) == backend.chat(convs[:3], seeded)
    finally:
        backend.close()


# ---------------------------------------------------------------------------- scripted server
class Scripted:
    """Shared state of the scripted server: what to answer and what was seen."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.bodies: list[dict] = []
        self.fail_first = 0          # answer the first k requests with fail_status
        self.fail_status = 503
        self.fail_content = None     # always fail requests whose last message has this content
        self.reject_n = False        # 400 when n > 1
        self.ignore_n = False        # one choice whatever n is
        self.sleep_s = 0.0
        self.retry_after = None


def _make_handler(state: Scripted):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # keep test output clean
            pass

        def _send(self, status: int, payload: dict, headers: dict | None = None):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.calls += 1
                k = state.calls
                state.bodies.append(body)
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            try:  # the reply is built, and the request counted out, before it is sent: a client that got
                # its answer may send the next request before this thread would otherwise have counted down
                reply = self._reply(body, k)
            finally:
                with state.lock:
                    state.in_flight -= 1
            return self._send(*reply)

        def _reply(self, body: dict, k: int) -> tuple:
            if state.sleep_s:
                time.sleep(state.sleep_s)
            content = body["messages"][-1]["content"]
            if k <= state.fail_first or content == state.fail_content:
                headers = {"Retry-After": str(state.retry_after)} if state.retry_after is not None else None
                return state.fail_status, {"error": {"message": "scripted failure"}}, headers
            n = body.get("n", 1)
            if state.reject_n and n > 1:
                return 400, {"error": {"message": "n must be 1"}}
            n_out = 1 if state.ignore_n else n
            choices = [{"index": i, "message": {"role": "assistant", "content": f"{content}#{body.get('seed')}#{i}"},
                        "finish_reason": "length" if body.get("max_tokens") == 1 else "stop"} for i in range(n_out)]
            return 200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"], "choices": choices,
                         "usage": {"prompt_tokens": 7, "completion_tokens": 5 * n_out, "total_tokens": 7 + 5 * n_out}}

    return Handler


@pytest.fixture()
def scripted():
    state = Scripted()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(state))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield state
    httpd.shutdown()
    httpd.server_close()


def fast_backend(url: str, **kw) -> OpenAIBackend:
    kw = {"max_retries": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 10, **kw}
    return OpenAIBackend(url, "m", **kw)


def test_retries_with_backoff_then_succeeds(scripted):
    scripted.fail_first = 2
    b = fast_backend(scripted.url)
    out = b.chat([user("q")], SamplingConfig(max_new_tokens=4))
    assert out == [[Completion(text="q#None#0", prompt_tokens=7, output_tokens=5, finish_reason="stop")]]
    assert scripted.calls == 3
    assert (b.last_stats.requests, b.last_stats.retries, b.last_stats.failed_prompts) == (3, 2, 0)


def test_rate_limit_is_retried(scripted):
    scripted.fail_first, scripted.fail_status, scripted.retry_after = 1, 429, 0
    b = fast_backend(scripted.url)
    assert b.chat([user("q")], SamplingConfig())[0][0].text == "q#None#0"
    assert scripted.calls == 2


def test_failing_prompt_yields_error_completion_not_batch_failure(scripted, caplog):
    scripted.fail_content = "bad"
    b = fast_backend(scripted.url, max_retries=2)
    with caplog.at_level(logging.WARNING, logger="selfevolve.backends.openai_backend"):
        out = b.chat([user("a"), user("bad"), user("c")], SamplingConfig(n=2))
    assert [c.text for c in out[0]] == ["a#None#0", "a#None#1"]
    assert out[1] == [Completion(text="", finish_reason="error")] * 2
    assert [c.text for c in out[2]] == ["c#None#0", "c#None#1"]
    assert b.last_stats.failed_prompts == 1
    assert sum(1 for body in scripted.bodies if body["messages"][-1]["content"] == "bad") == 3  # 1 + 2 retries
    assert any("failed after retries" in r.message for r in caplog.records)


def test_client_errors_are_not_retried(scripted):
    scripted.fail_first, scripted.fail_status = 1, 401
    b = fast_backend(scripted.url)
    assert b.chat([user("q")], SamplingConfig())[0][0].finish_reason == "error"
    assert scripted.calls == 1


def test_connection_refused_gives_error_completions():
    b = fast_backend(f"http://127.0.0.1:{free_port()}/v1", max_retries=1)
    out = b.chat([user("q")], SamplingConfig(n=3))
    assert [c.finish_reason for c in out[0]] == ["error"] * 3
    assert b.last_stats.retries == 1


def test_concurrency_limit_respected(scripted):
    scripted.sleep_s = 0.15
    b = fast_backend(scripted.url, max_concurrency=3)
    out = b.chat([user(str(i)) for i in range(10)], SamplingConfig())
    assert [o[0].text for o in out] == [f"{i}#None#0" for i in range(10)]
    assert scripted.max_in_flight == 3
    assert b.last_stats.max_in_flight == 3


def test_request_fields_and_n_honoured(scripted):
    b = fast_backend(scripted.url)
    s = SamplingConfig(temperature=0.5, top_p=0.8, max_new_tokens=9, n=3, seed=4, stop=["</answer>"])
    out = b.chat([user("q")], s)
    assert [c.text for c in out[0]] == ["q#4#0", "q#4#1", "q#4#2"]
    assert sum(c.output_tokens for c in out[0]) == 15 and all(c.prompt_tokens == 7 for c in out[0])
    body = scripted.bodies[0]
    assert (body["model"], body["temperature"], body["top_p"], body["max_tokens"], body["n"], body["seed"], body["stop"]) == (
        "m", 0.5, 0.8, 9, 3, 4, ["</answer>"])
    assert scripted.calls == 1
    assert b.chat([user("q")], SamplingConfig(max_new_tokens=1))[0][0].finish_reason == "length"


def test_server_ignoring_n_gets_repeated_requests(scripted):
    scripted.ignore_n = True
    b = fast_backend(scripted.url)
    out = b.chat([user("q")], SamplingConfig(n=3, seed=10))
    assert [c.text for c in out[0]] == ["q#10#0", "q#11#0", "q#12#0"]  # seed + k keeps repeats distinct
    assert [body["n"] for body in scripted.bodies] == [3, 2, 1]


def test_server_rejecting_n_falls_back_to_single_samples(scripted):
    scripted.reject_n = True
    b = fast_backend(scripted.url)
    out = b.chat([user("q"), user("r")], SamplingConfig(n=2))
    assert [len(o) for o in out] == [2, 2] and all(c.finish_reason == "stop" for o in out for c in o)
    # each conversation asks for n=2 at most once (both may race before the switch), then one at a time
    assert sum(body["n"] > 1 for body in scripted.bodies) <= 2
    assert sum(body["n"] == 1 for body in scripted.bodies) == 4


def test_backoff_and_token_split_helpers():
    import random

    rng = random.Random(0)
    for attempt in range(6):
        d = backoff_delay(attempt, 0.5, 4.0, rng)
        cap = min(4.0, 0.5 * 2 ** attempt)
        assert cap / 2 <= d <= cap
    assert split_tokens(10, ["aaa", "a"]) in ([8, 2], [7, 3])
    assert sum(split_tokens(11, ["ab", "abc", "a"])) == 11
    assert split_tokens(4, ["", ""]) == [2, 2]
    assert split_tokens(0, []) == []


# ---------------------------------------------------------------------------- in-process app
class FakeBackend(Backend):
    """Records batch sizes; blocks the first call until released (to let requests queue up)."""

    def __init__(self):
        self.batches: list[int] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = False

    def chat(self, conversations, sampling):
        self.entered.set()
        if not self.batches:
            self.release.wait(10)
        self.batches.append(len(conversations))
        if self.fail:
            raise RuntimeError("boom")
        return [[Completion(text=c[-1]["content"].upper(), prompt_tokens=3, output_tokens=2) for _ in range(sampling.n)]
                for c in conversations]

    def complete(self, prompts, sampling):
        return self.chat([user(p) for p in prompts], sampling)


def test_worker_batches_queued_compatible_requests():
    from selfevolve.backends.serve import GenerationWorker

    fake = FakeBackend()
    worker = GenerationWorker(fake, max_batch_prompts=8)
    try:
        greedy = SamplingConfig(temperature=0)
        first = worker.submit([user("first")], greedy)
        assert fake.entered.wait(10)  # the worker is now blocked inside the first call
        same = [worker.submit([user(f"g{i}")], greedy) for i in range(5)]
        seeded = [worker.submit([user(f"s{i}")], SamplingConfig(temperature=1.0, seed=1)) for i in range(2)]
        other = worker.submit([user("o")], SamplingConfig(temperature=0, max_new_tokens=3))
        fake.release.set()
        assert first.result(5)[0][0].text == "FIRST"
        assert [f.result(5)[0][0].text for f in same] == [f"G{i}" for i in range(5)]
        assert [f.result(5)[0][0].text for f in seeded] == ["S0", "S1"]
        assert other.result(5)[0][0].text == "O"
        # first alone; the five greedy ones together; seeded sampling one by one; the odd one alone
        assert fake.batches == [1, 5, 1, 1, 1]
    finally:
        worker.stop()


def test_app_reports_backend_failure_as_500():
    from fastapi.testclient import TestClient

    from selfevolve.backends.serve import create_app

    fake = FakeBackend()
    fake.release.set()
    app = create_app(fake, "fake", model_path="/models/fake")
    with TestClient(app) as client:
        ok = client.post("/v1/chat/completions", json={"model": "/models/fake", "messages": [{"role": "user", "content": "hi"}], "n": 2})
        assert ok.status_code == 200
        assert [c["message"]["content"] for c in ok.json()["choices"]] == ["HI", "HI"]
        assert ok.json()["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
        fake.fail = True
        bad = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert bad.status_code == 500 and "boom" in bad.json()["error"]["message"]


class _TokenizingFake(FakeBackend):
    def __init__(self, tokenizer, max_model_len: int):
        super().__init__()
        self.release.set()
        self.tokenizer, self.max_model_len = tokenizer, max_model_len


def test_request_limits_refuse_before_generation(varied_tiny_model_dir):
    """Issue 24, row 12: a 10 MB prompt got HTTP 200 with an empty reply after 24 s while other
    clients waited. Now a body over the limit gets 413 before it is read and a prompt with no room
    in the context 400, and neither reaches the generation worker."""
    from fastapi.testclient import TestClient
    from transformers import AutoTokenizer

    from selfevolve.backends.serve import create_app

    fake = _TokenizingFake(AutoTokenizer.from_pretrained(varied_tiny_model_dir), max_model_len=64)
    app = create_app(fake, "fake", max_body_bytes=100_000)
    with TestClient(app) as client:
        huge = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x" * 10_000_000}]})
        assert huge.status_code == 413 and "over the limit of 100000 bytes" in huge.json()["error"]["message"]
        long = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Compute 2 + 2. " * 200}]})
        assert long.status_code == 400 and "prompt exceeds the context" in long.json()["error"]["message"], long.text
        huge = client.post("/v1/completions", json={"prompt": "x" * 10_000_000})
        assert huge.status_code == 413
        long = client.post("/v1/completions", json={"prompt": ["hi", "Compute 2 + 2. " * 200], "stream": True})
        assert long.status_code == 400 and "prompt exceeds the context" in long.json()["error"]["message"], long.text
        assert long.json()["error"]["param"] == "prompt"
        assert fake.batches == []
        ok = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert ok.status_code == 200 and fake.batches == [1]
        ok = client.post("/v1/completions", json={"prompt": ["hi", "yo"]})
        assert ok.status_code == 200 and fake.batches == [1, 2]
        assert [c["text"] for c in ok.json()["choices"]] == ["HI", "YO"]


def test_completions_need_a_backend_that_continues_raw_text():
    from fastapi.testclient import TestClient

    from selfevolve.backends.serve import create_app

    class ChatOnly(Backend):
        def chat(self, conversations, sampling):
            raise AssertionError("not reached")

    with TestClient(create_app(ChatOnly(), "chat-only")) as client:
        r = client.post("/v1/completions", json={"prompt": "hi"})
    assert r.status_code == 501 and "/v1/chat/completions" in r.json()["error"]["message"]


class _Streaming(Backend):
    """Hands out 'Hel', then waits until the client has it before finishing with 'Hello'."""

    streams = True

    def __init__(self):
        self.client_has_first = threading.Event()
        self.waited = None

    def chat(self, conversations, sampling, on_text=None):
        on_text(0, 0, "Hel")
        self.waited = self.client_has_first.wait(10)
        return [[Completion(text="Hello", prompt_tokens=2, output_tokens=3)]]


def test_stream_reaches_the_client_while_generation_runs():
    """A server that collected the whole reply before sending would keep 'Hel' until the backend
    returned, which it does only after the client got 'Hel' (or after 10 s: then waited is False)."""
    import uvicorn

    from selfevolve.backends.serve import create_app

    fake = _Streaming()
    server = uvicorn.Server(uvicorn.Config(create_app(fake, "s"), host="127.0.0.1", port=free_port(), log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        pieces = []
        for chunk in openai_client(f"http://127.0.0.1:{port}").chat.completions.create(model="s", messages=user("hi"), stream=True):
            for ch in chunk.choices:
                if ch.delta.content:
                    pieces.append(ch.delta.content)
                    fake.client_has_first.set()
        assert fake.waited is True and pieces == ["Hel", "lo"]
    finally:
        server.should_exit = True
        thread.join(10)


def test_hf_streamed_pieces_are_a_prefix_of_the_final_text(local_hf):
    """``HFBackend`` hands out text while generating; with stop strings and n > 1 the pieces of
    each completion join to a prefix of its final text, never past a stop string."""
    from selfevolve.embedded.transcripts import arith_transcripts

    convs = [t[:1] for _, t in arith_transcripts(3, seed=5)]
    plain = local_hf.chat(convs, SamplingConfig(max_new_tokens=24, n=2, **GREEDY))
    stop = [plain[0][0].text[10:12], plain[1][0].text[5:8]]
    sampling = SamplingConfig(max_new_tokens=24, n=2, stop=stop, **GREEDY)
    pieces: dict[tuple[int, int], list[str]] = {}
    final = local_hf.chat(convs, sampling, on_text=lambda p, k, d: pieces.setdefault((p, k), []).append(d))
    assert set(pieces) == {(p, k) for p in range(3) for k in range(2)}
    for (p, k), got in pieces.items():
        joined = "".join(got)
        assert final[p][k].text.startswith(joined) and not any(s in joined for s in stop)
    assert final == local_hf.chat(convs, sampling)  # streaming does not change what is generated
    assert sum(len(v) for v in pieces.values()) > 6  # more than one piece per completion
