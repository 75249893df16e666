"""Answer forcing: a completion that ran out of tokens, or stopped, without its final answer gets one.

Budget forcing (Muennighoff et al. 2025, "s1: Simple test-time scaling", section 3): when a
reasoning trace hits its token budget, the end of thinking is appended and the model is made to
answer. Here: the completion so far, ``</think>`` if a ``<think>`` is still open, then ``<answer>``,
is given back to the model as the start of its own reply (the backend continues a trailing assistant
message), and up to ``max_new_tokens`` more tokens are generated greedily until ``</answer>``.

Small instruct models loop inside their reasoning until the budget ends, or end on a conclusion in
prose ("There are 6 bars left."); forcing turns such a completion into an answer the verifier can judge (usually wrong, sometimes right) instead of no
answer at all. The format reward stays that of the unforced text: the model did not write the tags.
"""

from __future__ import annotations

from typing import Sequence

from selfevolve.backends.base import Backend, Completion, Messages, SamplingConfig
from selfevolve.records import Question
from selfevolve.roles.parsers import parse_solver


def forced_prefix(text: str, tag: str = "answer") -> str:
    """The reply to continue: ``text``, ``</think>`` when a ``<think>`` is left open, then ``<tag>``
    (nothing is added to a text that ends inside an open ``<tag>``)."""
    text = text.rstrip()
    if text.rfind(f"<{tag}>") > text.rfind(f"</{tag}>"):
        return text
    open_think = text.rfind("<think>") > text.rfind("</think>")
    return text + ("\n</think>" if open_think else "") + f"\n<{tag}>"


def force_answers(backend: Backend, conversations: Sequence[Messages], texts: Sequence[str], max_new_tokens: int,
                  seed: int | None = None, tag: str = "answer") -> list[str]:
    """For each ``(conversation, text)``: ``forced_prefix(text, tag)`` continued by the model (greedy,
    at most ``max_new_tokens`` tokens, stopped at ``</tag>``) and closed with ``</tag>`` (``tag``:
    ``answer``, or a Challenger's ``tests`` / ``code``). One batched backend call; returns the B full
    completions in input order (empty input: ``[]``). Raises ``RuntimeError`` when the backend
    returns the wrong number of completions."""
    if not texts:
        return []
    close = f"</{tag}>"
    prefixes = [forced_prefix(t, tag) for t in texts]
    convs = [list(c) + [{"role": "assistant", "content": p}] for c, p in zip(conversations, prefixes)]
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=max(1, max_new_tokens), n=1, seed=seed, stop=[close])
    outs = backend.chat(convs, sampling)
    if len(outs) != len(convs) or any(len(o) != 1 for o in outs):
        raise RuntimeError("backend broke the Backend contract while forcing answers")
    return [p + o[0].text.split(close, 1)[0].rstrip() + close for p, o in zip(prefixes, outs)]


def force_missing_answers(backend: Backend, questions: Sequence[Question], convs: Sequence[Messages],
                          comps: list[list[Completion]], max_new_tokens: int, seed: int = 0) -> list[list[int]]:
    """Answer forcing in place: every math completion without an answer the Solver parser reads (cut
    off at its token limit, or stopped after a conclusion in prose) is replaced by its forced version
    (the finish reason is kept). Returns 0/1 per sample: was it forced. Nothing happens for
    ``max_new_tokens`` 0."""
    flags = [[0] * len(cs) for cs in comps]
    if max_new_tokens <= 0:
        return flags
    todo = [(i, j) for i, (q, cs) in enumerate(zip(questions, comps)) for j, c in enumerate(cs)
            if q.domain == "math" and parse_solver(c.text).answer is None]
    texts = force_answers(backend, [convs[i] for i, _ in todo], [comps[i][j].text for i, j in todo], max_new_tokens, seed)
    for (i, j), text in zip(todo, texts):
        comps[i][j] = comps[i][j].model_copy(update={"text": text})
        flags[i][j] = 1
    return flags
