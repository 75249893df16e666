"""The embedded default model, built offline by the ``bootstrap`` stage: a tokenizer trained with
``tokenizers`` and a small Llama from a config (``tinymodel``), warm-started (``warm_start``) on role
transcripts rendered from the seed generator (``transcripts``)."""
