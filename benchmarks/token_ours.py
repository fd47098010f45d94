"""W5's datapipe side: ``datapipe build`` of the JSONL parts through the ``tokenize`` stage into
token shards, with 1 and 2 workers, end to end (issue 31).

Not yet: the tokenize stage lands in a later slice. Until the pipeline file accepts a ``tokenize``
stage (``stage_ready``), the run prints a placeholder row, never a number. The slice that adds the
stage makes this measure by itself: ``PIPELINE`` is issue 31's pipeline file for W5, and ``builds``
times it with ``benchmarks.building.build`` as W1's builds are timed (the interpreter, the cluster's
start and the commit count); what it must check before its figures count is in the README (W5).
"""

from __future__ import annotations

import os

from benchmarks import building

NOT_YET = "not yet: the tokenize stage lands in a later slice"

PIPELINE = """\
name: w5-{tokenizer}
source: {{path: {jsonl}/*.jsonl, format: jsonl}}
stages:
  - tokenize: {{tokenizer: {path}, field: text, eos: true}}
sample: {{key: id, fields: {{tokens: tokens}}}}
shards: {{format: tokens, max_bytes: 256MB}}
"""


def stage_ready() -> bool:
    """Whether this datapipe's pipeline files know the ``tokenize`` stage."""
    from datapipe.builder import config

    return "tokenize" in getattr(config, "STAGE_KINDS", ())


def builds(name: str, tokenizer: str, jsonl: str, workdir: str, timeout: float) -> list[dict]:
    """``datapipe build`` of W5 with the tokenizer ``name`` (its file ``tokenizer``), with 1 and
    then 2 workers: [{workers, seconds, summary}]."""
    os.makedirs(workdir, exist_ok=True)
    pipeline = os.path.join(workdir, f"w5-{name}.yaml")
    with open(pipeline, "w") as f:
        f.write(PIPELINE.format(tokenizer=name, jsonl=jsonl, path=tokenizer))
    store = os.path.join(workdir, "built")
    return [building.build(pipeline, store, workers, timeout) for workers in (1, 2)]
