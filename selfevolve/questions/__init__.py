"""Question sources: the generated seed sets (``arith``, ``tiny_code``), the SAGE paper's seed set
(``paper``), the benchmark loaders (``benchmarks``: GSM8K, MATH, OlympiadBench, HumanEval, MBPP or a
questions file) and the split of a campaign's seed set into pool, validation and held-out
questions (``seed_sets``)."""
