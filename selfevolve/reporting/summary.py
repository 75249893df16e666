"""End-of-campaign summary: one row per cycle with the headline metrics (``selfevolve.headline``)
from the DVC metrics files, sized to the terminal, and where to look next."""

from __future__ import annotations

from pathlib import Path

from selfevolve import headline
from selfevolve.paths import cycle_paths

#: Narrowest the summary draws (its table needs 99 columns): a narrower terminal wraps lines rather than cutting numbers.
MIN_WIDTH = 100


def _table(rows: list[dict]):
    from rich import box
    from rich.table import Table

    table = Table(title="Campaign summary (per cycle; more in `selfevolve report`)", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 1), collapse_padding=True)
    table.add_column("cycle", no_wrap=True)
    for h in headline.HEADLINE:
        table.add_column(h.short, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(r["cycle"], *(headline.fmt(r.get(h.name), h.kind) for h in headline.HEADLINE))
    return table


def render(rows: list[dict], width: int | None = None) -> str:
    """``rows`` (``{"cycle", <headline name>: value}``) as a text table ``width`` columns wide (None:
    the terminal's width as rich detects it, ``COLUMNS`` included, at least ``MIN_WIDTH``)."""
    import io

    from rich.console import Console

    detected = Console().width if width is None else width
    console = Console(width=max(MIN_WIDTH, detected), record=True, file=io.StringIO(), color_system=None)
    console.print(_table(rows))
    return console.export_text()


def markdown(rows: list[dict], links: dict[str, str] | None = None) -> str:
    """``rows`` (as :func:`campaign_summary` returns them) as a markdown table, followed by
    ``links`` (``{what: url or path}``) as a list: the campaign's summary where markdown is shown
    (the Prefect flow run's artifact)."""
    head = ["cycle", *(h.name for h in headline.HEADLINE)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(headline.HEADLINE)]
    lines += ["| " + " | ".join([r["cycle"], *(headline.fmt(r.get(h.name), h.kind) for h in headline.HEADLINE)]) + " |" for r in rows]
    lines += ["", *(f"- {what}: {url}" for what, url in (links or {}).items())]
    return "\n".join(lines)


def campaign_summary(root: str | Path = ".", cycles: list[str] | None = None, width: int | None = None) -> dict:
    """Returns ``rows`` (per cycle, ``base`` first: ``cycle`` and the headline metrics by readable
    name, missing ones absent), ``table`` (:func:`render` at ``width``) and ``next`` (hints).
    Raises ``ParamsError`` when ``cycles`` is None and ``<root>/params.yaml`` is missing or invalid."""
    root = Path(root)
    if cycles is None:
        from selfevolve.config import load_params

        cycles = load_params(root / "params.yaml").cycle_names()
    rows = [{"cycle": c, **headline.read(cycle_paths(c, root).metrics_dir)} for c in ["base", *cycles]]
    hints = ("Next: `make ui` (MLflow UI on http://127.0.0.1:5000), `dvc metrics show`, `dvc plots show`, "
             "`selfevolve report` (plots + markdown).")
    return {"rows": rows, "table": render(rows, width), "next": hints}
