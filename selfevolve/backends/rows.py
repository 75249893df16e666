"""Rows of token ids: the prefix they share (``common_prefix_length``, computed once by generation's
prefix cache and by training), and generated rows to text: where a row stops, how many tokens it
used, and its text handed out while it is generated. Backend-independent (no torch): ``finish_row``
for one row after generation, ``RowStreamer`` for transformers' ``generate(streamer=...)`` hook."""

from __future__ import annotations

from selfevolve.backends.base import TextCallback


def common_prefix_length(rows: list[list[int]]) -> int:
    """How many leading ids every row of ``rows`` has in common, leaving each row at least one id of
    its own (a forward on top of a cached prefix needs one new input per row); 0 for no rows."""
    if not rows:
        return 0
    first, n = rows[0], min(len(r) for r in rows) - 1
    for r in rows[1:]:
        n = next((j for j in range(n) if r[j] != first[j]), n)
    return max(0, n)


def finish_row(gen_ids: list[int], *, limit: int, eos_ids: set[int], pad_id: int | None,
               decode, stop: list[str]) -> tuple[str, int, str]:
    """Turn one row of generated ids into ``(text, output_tokens, finish_reason)``.

    Args:
        gen_ids: ids generated for the row (prompt excluded), possibly followed by padding.
        limit: the row's own token limit (``min(max_new_tokens, max_model_len - prompt_len)``);
            ids past it are dropped.
        eos_ids: ids that end generation.
        pad_id: the padding id (rows that stopped early are padded with it).
        decode: ``ids -> text`` (``tokenizer.decode(..., skip_special_tokens=True)``).
        stop: stop strings; the text is cut before the earliest one.

    ``output_tokens`` counts ids up to and including EOS, or up to the id that completed the first
    stop string (smallest prefix whose decoded text contains it). ``finish_reason`` is ``"stop"`` for
    EOS or a stop string and ``"length"`` when the row used its whole limit without either.
    """
    ids = list(gen_ids[:limit])
    eos_at = next((i for i, t in enumerate(ids) if t in eos_ids), None)
    body = ids if eos_at is None else ids[:eos_at]
    text = decode(body)
    if stop:
        cut = min((p for p in (text.find(s) for s in stop if s) if p >= 0), default=-1)
        if cut >= 0:
            # smallest prefix of ``body`` whose text already contains a stop string
            lo, hi = 1, len(body)
            while lo < hi:
                mid = (lo + hi) // 2
                t = decode(body[:mid])
                if any(s and s in t for s in stop):
                    hi = mid
                else:
                    lo = mid + 1
            return text[:cut], lo, "stop"
    if eos_at is not None:
        return text, eos_at + 1, "stop"
    n = len(body)
    if pad_id is not None and pad_id not in eos_ids:
        while n and body[n - 1] == pad_id:
            n -= 1
        if n < len(body):
            # the row stopped early (a stop criterion we could not see in the decoded text)
            return decode(body[:n]), n, "stop"
    return text, n, "length" if n >= limit else "stop"


class RowStreamer:
    """transformers' ``generate(streamer=...)`` hook for one micro-batch: hands each row's new text
    to ``on_text(prompt_index, sample_index, delta)`` while the batch is generated.

    ``rows`` are the batch's ``(prompt, sample)`` pairs in batch order, ``limits`` their token
    limits. ``generate`` calls ``put`` first with the prompt ids (batch x width, ignored) and then
    once per step with the next id of every row (shape ``(batch,)``). A row's text is decoded from
    its ids up to EOS, its limit or a stop string; the last id's text is held back (it may still
    merge with the next id), as are the last ``len(longest stop) - 1`` characters (they may start
    a stop string) and a trailing U+FFFD (an incomplete character), so what is handed out is a
    prefix of the row's final text as ``finish_row`` makes it.
    """

    def __init__(self, rows: list[tuple[int, int]], limits: list[int], *, eos_ids: set[int], decode,
                 stop: list[str], on_text: TextCallback):
        self.rows, self.limits, self.eos_ids, self.decode, self.on_text = rows, limits, eos_ids, decode, on_text
        self.stop = [s for s in stop if s]
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.ids: list[list[int]] = [[] for _ in rows]
        self.sent = [""] * len(rows)
        self.done = [False] * len(rows)
        self._prompt_seen = False

    def put(self, value) -> None:
        if not self._prompt_seen:
            self._prompt_seen = True
            return
        for r, t in enumerate(value.reshape(-1).tolist()):
            if self.done[r]:
                continue
            if t in self.eos_ids or len(self.ids[r]) >= self.limits[r]:
                self.done[r] = True
                continue
            self.ids[r].append(t)
            text = self.decode(self.ids[r][:-1])
            end = len(text) - self.hold
            cut = min((p for p in (text.find(s) for s in self.stop) if p >= 0), default=-1)
            if cut >= 0:
                self.done[r], end = True, cut
            safe = text[:max(end, 0)].rstrip("\ufffd")
            if len(safe) > len(self.sent[r]) and safe.startswith(self.sent[r]):
                self.on_text(*self.rows[r], safe[len(self.sent[r]):])
                self.sent[r] = safe

    def end(self) -> None:
        """Nothing to flush: the rest of each row's text comes with its ``Completion``."""
