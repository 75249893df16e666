"""Each cycle's story on its MLflow cycle run, and each cycle's model in the MLflow Model Registry.

:func:`publish_cycles` (called by ``selfevolve report``, so by every campaign run) does, for the
base model and every cycle whose model folder exists (``models/<cycle>``: the model the cycle
kept, whatever its training did):

* logs the headline metrics (``selfevolve.headline``) on the cycle's run as
  ``headline/<readable name>`` (the MLflow charts view groups them in one section, first; p-values
  to two significant digits, ``headline.shown``), and on
  the campaign run with ``step`` = cycle index (0 = base), so the campaign run charts them over the
  cycles;
* tags the cycle run with what the cycle kept (``selfevolve.kept``);
* registers the model as one version of the registered model named like the campaign, logged on
  the cycle's run with MLflow's transformers flavour (``mlflow.transformers.load_model
  ("models:/<campaign>@c1")`` gives a text-generation pipeline); a model folder over
  ``selfevolve.tracking.MAX_ARTIFACT_BYTES`` is registered as a pointer (``model_pointer/
  pointer.json``: local path, size, DVC hash) instead of a copy. The version's tags hold the
  headline metrics (``headline.<name>``), the lineage (git commit, SHA-256 of ``dvc.lock``,
  Prefect flow run: ``selfevolve.tracking.lineage_tags``) and the model's DVC hash from
  ``dvc.lock`` (``selfevolve.model_md5``);
* sets the alias ``<cycle>`` on the cycle's version and ``champion`` on the version with the
  highest frontier accuracy (``selfevolve.headline.RANKING``; the earliest cycle on a tie).

Idempotent: a cycle whose model has the same DVC hash as its registered version is not logged
again (a re-run of the report, a campaign restored from DVC's cache); a changed model gets a new
version and the alias moves to it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from selfevolve import headline, tracking

log = logging.getLogger(__name__)

TAG_MD5, TAG_KEPT, TAG_POINTER = "selfevolve.model_md5", "selfevolve.kept", "selfevolve.pointer"
CHAMPION = "champion"
_PIP = ("torch", "transformers", "accelerate")


def model_md5(root: str | Path, cycle: str) -> str | None:
    """The DVC hash (``md5`` of the ``.dir`` entry) of ``models/<cycle>`` in ``<root>/dvc.lock``,
    or None when the lock does not record it (no lock, or the stage was run without DVC)."""
    import yaml

    lock = Path(root) / "dvc.lock"
    try:
        stages = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages", {})
    except (OSError, yaml.YAMLError):
        return None
    for entry in stages.values():
        for out in entry.get("outs", []) if isinstance(entry, dict) else []:
            if isinstance(out, dict) and out.get("path") == f"models/{cycle}":
                return out.get("md5")
    return None


def kept(metrics: dict[str, float], cycle: str, init: str | None) -> str:
    """What a cycle's model is, in words: the SFT model, the RL checkpoint, or its start (``init``)
    unchanged; ``base`` is the warm start."""
    if cycle == "base":
        return "warm start (bootstrap)"
    if metrics.get("sft kept"):
        return "SFT of the RL checkpoint (SFT kept)"
    if metrics.get("rl kept"):
        return "RL checkpoint (SFT discarded or not trained)"
    return f"its start {init} unchanged (training kept no checkpoint)" if init else "its start unchanged"


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _log_model(client, run_id: str, path: Path, name: str, tags: dict[str, str], uri: str) -> str:
    """Log ``path`` on run ``run_id`` (transformers flavour, or a pointer over the size limit) and
    register it as a new version of ``name``. Returns the version number."""
    size = _size(path)
    if size > tracking.MAX_ARTIFACT_BYTES:
        client.log_dict(run_id, {"path": str(path.resolve()), "bytes": size, "md5": tags.get(TAG_MD5)},
                        "model_pointer/pointer.json")
        try:
            client.create_registered_model(name)
        except Exception:  # noqa: BLE001 - it exists already
            pass
        mv = client.create_model_version(name, f"runs:/{run_id}/model_pointer", run_id=run_id, tags={**tags, TAG_POINTER: "true"})
        return str(mv.version)
    import mlflow
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(str(path))
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    with tracking.fluent_uri(uri), mlflow.start_run(run_id=run_id):
        info = mlflow.transformers.log_model({"model": model, "tokenizer": tokenizer}, name="model", task="text-generation",
                                             registered_model_name=name, pip_requirements=list(_PIP), tags=tags)
    version = str(info.registered_model_version)
    for k, v in tags.items():
        client.set_model_version_tag(name, version, k, v)
    return version


def publish_cycles(campaign: str, root: str | Path, cycles: list[str], inits: dict[str, str] | None = None) -> dict[str, str]:
    """Headline metrics, kept-model tags and registered model versions of ``base`` + ``cycles`` (the
    module docstring). ``inits`` maps a cycle to the cycle it starts from (for the words of
    ``selfevolve.kept``). Returns ``{cycle: registered version}`` for the cycles with a model.
    Cycles without an MLflow cycle run or a model folder are skipped. Raises what MLflow raises
    when the tracking store is unreachable."""
    import time

    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from selfevolve.paths import cycle_paths

    root = Path(root)
    uri = tracking.tracking_uri(root)
    client = MlflowClient(tracking_uri=uri)
    exp_id = tracking.experiment_id(client, campaign, root)
    lineage = tracking.lineage_tags(root)
    ts = int(time.time() * 1000)
    campaign_run = tracking.find_runs(client, exp_id, **{tracking.TAG_CYCLE: "campaign", tracking.TAG_KIND: "cycle"})
    versions: dict[str, str] = {}
    scores: dict[str, float] = {}
    order = ["base", *cycles]
    for step, cycle in enumerate(order):
        runs = tracking.find_runs(client, exp_id, **{tracking.TAG_CYCLE: cycle, tracking.TAG_KIND: "cycle"})
        if not runs:
            continue
        run_id = runs[0].info.run_id
        metrics = headline.read(cycle_paths(cycle, root).metrics_dir)
        ms = [Metric(f"headline/{k}", headline.shown(v, headline.BY_NAME[k].kind), ts, step) for k, v in metrics.items()]
        if ms:
            client.log_batch(run_id, metrics=ms)
            if campaign_run:
                client.log_batch(campaign_run[0].info.run_id, metrics=ms)
        what = kept(metrics, cycle, (inits or {}).get(cycle))
        client.set_tag(run_id, TAG_KEPT, what)
        path = root / "models" / cycle
        if not (path / "config.json").is_file():
            continue
        md5 = model_md5(root, cycle)
        tags = {**lineage, TAG_KEPT: what, tracking.TAG_CYCLE: cycle, **({TAG_MD5: md5} if md5 else {}),
                **{f"headline.{k}": headline.fmt(v, headline.BY_NAME[k].kind) for k, v in metrics.items()}}
        current = _alias_version(client, campaign, cycle)
        if current is not None and (md5 is None or current.tags.get(TAG_MD5) == md5):
            version = str(current.version)
            for k, v in tags.items():
                client.set_model_version_tag(campaign, version, k, v)
        else:
            version = _log_model(client, run_id, path, campaign, tags, uri)
            log.info("registered %s version %s: the model of %s (%s)", campaign, version, cycle, what)
        client.set_registered_model_alias(campaign, cycle, version)
        versions[cycle] = version
        if headline.RANKING in metrics:
            scores[cycle] = metrics[headline.RANKING]
    if scores:
        best = max(scores, key=lambda c: (scores[c], -order.index(c)))
        client.set_registered_model_alias(campaign, CHAMPION, versions[best])
        client.set_registered_model_tag(campaign, "selfevolve.champion", best)
    return versions


def _alias_version(client, name: str, alias: str):
    """The model version ``name@alias``, or None when the model or the alias does not exist."""
    try:
        return client.get_model_version_by_alias(name, alias)
    except Exception:  # noqa: BLE001 - MlflowException RESOURCE_DOES_NOT_EXIST
        return None
