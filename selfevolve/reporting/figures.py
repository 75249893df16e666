"""The campaign report's figures (matplotlib, Agg canvas): one PNG per figure of ``FIGURES``; a
figure whose data is missing is still written and says what is missing."""

from __future__ import annotations

import re
from pathlib import Path
from statistics import fmean

from selfevolve.reporting.collect import CampaignData
from selfevolve.reporting.series import ROLES

#: A value label: x (cycle position), y (data units), text, color.
Label = tuple[int, float, str, str]

#: figure name -> (file name, title)
FIGURES: dict[str, tuple[str, str]] = {
    "frontier": ("frontier.png", "Held-out accuracy: frontier (never supervised) and seed forms, per cycle"),
    "forms": ("heldout_forms.png", "Held-out accuracy per question form and cycle"),
    "benchmarks": ("benchmarks.png", "Benchmark scores per cycle"),
    "pool_size": ("pool_size.png", "Question pool size per cycle"),
    "pool_levels": ("pool_levels.png", "Question pool difficulty: level distribution per cycle"),
    "pool_pass_rate": ("pool_pass_rate.png", "Question pool difficulty: Solver pass rates per cycle"),
    "critic": ("critic_pass_rates.png", "Critic pass rates per cycle"),
    "rewards": ("rewards.png", "Mean reward per role per cycle"),
    "mass": ("mass_fitness.png", "MASS champion fitness per cycle"),
}




def _new_figure(ncols: int = 1, width: float = 7.5, height: float = 4.5):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), dpi=110, layout="constrained")
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def _no_data(ax, title: str, message: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, "no data\n" + message, ha="center", va="center", transform=ax.transAxes, fontsize=11,
            color="dimgray", wrap=True)
    ax.set_xticks([])
    ax.set_yticks([])


def _cycle_axis(ax, cycles: list[str], xlabel: str = "cycle") -> None:
    ax.set_xticks(range(len(cycles)), cycles)
    ax.set_xlim(-0.5, len(cycles) - 0.5)
    ax.set_xlabel(xlabel)
    ax.grid(True, axis="y", alpha=0.3)


def _lines(ax, cycles: list[str], rows: list[dict], fields: list[tuple[str, str, dict]], annotate: bool = True,
           notes: dict[tuple[str, int], str] | None = None) -> list[Label]:
    """One line per field (``(key, label, style)``) over the cycles; gaps where a value is None.
    Returns the value labels to draw: with ``annotate`` (and at most 8 cycles) one per point, its
    value followed by ``notes[(key, x)]`` on a second line when given; ``_finish`` places them
    once the axes' limits are final."""
    pos = {c: i for i, c in enumerate(cycles)}
    labels: list[Label] = []
    for key, label, style in fields:
        pts = [(pos[r["cycle"]], r.get(key)) for r in rows if r.get(key) is not None and r["cycle"] in pos]
        if not pts:
            continue
        xs, ys = zip(*pts)
        (line,) = ax.plot(xs, ys, marker="o", label=label, **style)
        if annotate and len(cycles) <= 8:
            for x, y in pts:
                note = (notes or {}).get((key, x))
                labels.append((x, y, f"{y:.2f}" + (f"\n{note}" if note else ""), line.get_color()))
    return labels


LABEL_PT = 8  # font size of value labels, points


def _place_labels(ax, labels: list[Label]) -> None:
    """Draw value labels (``(x, y, text, color)``) 4 points above their points, leaving out a label
    that would overlap a label already drawn at its x (from the highest point down) or another
    point's marker there: close values then show one label, and the lines show the rest."""
    px_per_pt = ax.figure.dpi / 72
    marker = 4 * px_per_pt  # a marker's radius, with a little room
    for x in sorted({lab[0] for lab in labels}):
        here = sorted((lab for lab in labels if lab[0] == x), key=lambda lab: -lab[1])
        points = [ax.transData.transform((x, lab[1]))[1] for lab in here]
        floor = float("inf")  # lowest display y taken by the labels drawn so far at this x
        for i, (_, y, text, color) in enumerate(here):
            bottom = points[i] + marker
            top = bottom + (LABEL_PT + 2) * (text.count("\n") + 1) * px_per_pt
            if top > floor or any(bottom - marker < p < top + marker for j, p in enumerate(points) if j != i):
                continue
            ax.annotate(text, (x, y), textcoords="offset pixels", xytext=(0, marker), ha="center", va="bottom",
                        fontsize=LABEL_PT, color=color, linespacing=1.0, in_layout=False)
            floor = bottom


FRACTION = (-0.02, 1.08)  # y range of plots of fractions, with room for value labels


def _fraction_or_auto(values) -> tuple[float, float] | None:
    """``FRACTION`` when every (non-None) value lies in [0, 1], else None (matplotlib's own range)."""
    vals = [v for v in values if isinstance(v, (int, float))]
    return FRACTION if all(0.0 <= v <= 1.0 for v in vals) else None


def _finish(ax, cycles: list[str], plot_title: str, ylabel: str, ylim: tuple[float, float] | None = None,
            labels: list[Label] = (), **legend) -> None:
    """Cycle x axis, y label and range, title, the value ``labels`` (``_place_labels``) and the axes'
    legend outside them, below, so that it covers no point (``legend``: keyword arguments of
    ``Figure.legend`` over ``loc="outside lower center", ncols=2, fontsize=8``)."""
    _cycle_axis(ax, cycles)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_ylabel(ylabel)
    ax.set_title(plot_title)
    handles, names = ax.get_legend_handles_labels()
    if handles:
        ax.figure.legend(handles, names, **{"loc": "outside lower center", "ncols": 2, "fontsize": 8, **legend})
    if labels:
        ax.figure.draw_without_rendering()  # lays the axes out around the legend: labels need the final transform
        _place_labels(ax, labels)


def _plot_benchmarks(ax, data: CampaignData, series: dict) -> None:
    """The benchmarks besides the campaign's held-out set (``evaluation.benchmarks``: GSM8K, MATH-500,
    ...), pass@1 and pass@k per cycle; the held-out splits are ``frontier.png``'s."""
    title = FIGURES["benchmarks"][1]
    rows = series["benchmarks"]
    keys = [k for k in (rows[0] if rows else {}) if k not in ("cycle", "step") and not k.startswith("heldout")]
    if not rows or not any(r.get(k) is not None for r in rows for k in keys):
        _no_data(ax, title, "no benchmark besides the held-out set (frontier.png shows that one):\n"
                 "add one under evaluation.benchmarks, or run `selfevolve evaluate --cycle C --benchmark gsm8k`")
        return
    import matplotlib

    colors = matplotlib.colormaps["tab10"]
    names = []
    for k in keys:
        name = re.sub(r"_(accuracy|pass_at_\d+)$", "", k)
        if name not in names:
            names.append(name)
    fields = []
    for i, name in enumerate(names):
        color = colors(i % 10)
        fields.append((f"{name}_accuracy", f"{name} pass@1", {"color": color}))
        for k in keys:
            m = re.fullmatch(rf"{re.escape(name)}_pass_at_(\d+)", k)
            if m:
                fields.append((k, f"{name} pass@{m.group(1)}", {"color": color, "linestyle": "--"}))
    _finish(ax, data.cycles, title, "score (fraction of questions)", FRACTION, _lines(ax, data.cycles, rows, fields))


def _plot_pool_size(ax, data: CampaignData, series: dict) -> None:
    title = FIGURES["pool_size"][1]
    rows = series["pool"]
    if not rows:
        _no_data(ax, title, "no data/cycles/<cycle>/pool.jsonl and no pool_size in metrics/<cycle>/rewards.json")
        return
    pos = {c: i for i, c in enumerate(data.cycles)}
    sources = sorted({k[: -len("_questions")] for r in rows for k in r if k.endswith("_questions")})
    bottoms = {r["cycle"]: 0 for r in rows}
    import matplotlib

    colors = matplotlib.colormaps["Set2"]
    for i, s in enumerate(sources):
        xs, hs, bs = [], [], []
        for r in rows:
            v = r.get(f"{s}_questions")
            if isinstance(v, (int, float)) and v:
                xs.append(pos[r["cycle"]])
                hs.append(v)
                bs.append(bottoms[r["cycle"]])
                bottoms[r["cycle"]] += v
        if xs:
            ax.bar(xs, hs, bottom=bs, label=f"{s} questions", color=colors(i % 8), width=0.6)
    for r in rows:
        other = r["pool_size"] - bottoms[r["cycle"]]
        if other > 0:  # sizes known only from metrics (no per-source split)
            ax.bar([pos[r["cycle"]]], [other], bottom=[bottoms[r["cycle"]]], color="lightgray", width=0.6,
                   label="source unknown" if "source unknown" not in ax.get_legend_handles_labels()[1] else None)
        ax.annotate(str(r["pool_size"]), (pos[r["cycle"]], r["pool_size"]), textcoords="offset points", xytext=(0, 3),
                    ha="center", fontsize=9)
    _cycle_axis(ax, data.cycles)
    ax.set_ylabel("questions in the pool")
    ax.set_title(title)
    ax.margins(y=0.12)
    ax.legend(loc="upper left", fontsize=8)


def _plot_pool_levels(ax, data: CampaignData, series: dict) -> None:
    title = FIGURES["pool_levels"][1]
    rows = [r for r in series["pool_levels"] if r["level"] != "unknown"]
    if not rows:
        _no_data(ax, title, "no pool questions with a difficulty level\n(data/cycles/<cycle>/pool.jsonl 'level')")
        return
    import matplotlib

    pos = {c: i for i, c in enumerate(data.cycles)}
    levels = sorted({r["level"] for r in rows})
    cmap = matplotlib.colormaps["viridis"]
    bottoms: dict[str, float] = {}
    for i, lv in enumerate(levels):
        sel = [r for r in rows if r["level"] == lv]
        xs = [pos[r["cycle"]] for r in sel]
        hs = [r["fraction"] for r in sel]
        bs = [bottoms.get(r["cycle"], 0.0) for r in sel]
        ax.bar(xs, hs, bottom=bs, width=0.6, color=cmap(i / max(1, len(levels) - 1)), label=f"level {lv}")
        for r in sel:
            bottoms[r["cycle"]] = bottoms.get(r["cycle"], 0.0) + r["fraction"]
    unknown = [r for r in series["pool_levels"] if r["level"] == "unknown"]
    if unknown:
        ax.bar([pos[r["cycle"]] for r in unknown], [r["fraction"] for r in unknown],
               bottom=[bottoms.get(r["cycle"], 0.0) for r in unknown], width=0.6, color="lightgray", label="no level")
    _finish(ax, data.cycles, title, "fraction of the pool", (0, 1.0), loc="outside right upper", ncols=1, title="difficulty")


def _plot_pool_pass_rate(ax, data: CampaignData, series: dict) -> None:
    title = FIGURES["pool_pass_rate"][1]
    rows = series["pool_pass_rates"]
    if not rows:
        _no_data(ax, title, "no pool question has a measured Solver pass rate\n(Question.measured, written by the rewards stage)")
        return
    by_cycle = {c: [r["pass_rate"] for r in rows if r["cycle"] == c] for c in data.cycles}
    xs = [i for i, c in enumerate(data.cycles) if by_cycle[c]]
    vals = [by_cycle[data.cycles[i]] for i in xs]
    ax.boxplot(vals, positions=xs, widths=0.5, showmeans=True, meanprops={"marker": "D", "markerfacecolor": "tab:red",
                                                                         "markeredgecolor": "tab:red", "markersize": 5})
    for x, v in zip(xs, vals):
        ax.annotate(f"n={len(v)}\nmean {fmean(v):.2f}", (x, 1.02), ha="center", va="bottom", fontsize=8, annotation_clip=False)
    for i, c in enumerate(data.cycles):
        if not by_cycle[c]:
            ax.annotate("not measured", (i, 0.5), ha="center", fontsize=8, color="dimgray", rotation=90)
    _cycle_axis(ax, data.cycles)
    ax.set_ylim(-0.05, 1.2)
    ax.set_ylabel("Solver pass rate per question")
    ax.set_title(title)
    from matplotlib.lines import Line2D

    ax.legend(handles=[Line2D([], [], color="tab:orange", label="median"),
                       Line2D([], [], marker="D", linestyle="", color="tab:red", label="mean")], loc="lower right", fontsize=8)


def _line_figure(ax, data: CampaignData, rows: list[dict], name: str, fields: list[tuple[str, str, dict]], ylabel: str,
                 missing: str, notes: dict[tuple[str, int], str] | None = None, **legend) -> None:
    """A figure of fractions per cycle, one line per field (labels with ``notes``, see ``_lines``),
    or the note ``missing`` without rows."""
    title = FIGURES[name][1]
    if not rows:
        _no_data(ax, title, missing)
        return
    _finish(ax, data.cycles, title, ylabel, FRACTION, _lines(ax, data.cycles, rows, fields, notes=notes), **legend)


def _plot_critic(ax, data: CampaignData, series: dict) -> None:
    _line_figure(ax, data, series["critic"], "critic",
                 [("critic_question_pass_rate", "questions passing the quality gate (s_q >= alpha, valid spec)", {}),
                  ("critic_plan_pass_rate", "plans passing the plan gate (s_p >= beta)", {})],
                 "pass rate", "no metrics/<cycle>/critic_questions.json or critic_plans.json")


def _plot_rewards(ax, data: CampaignData, series: dict) -> None:
    _line_figure(ax, data, series["rewards"], "rewards", [(f"reward_{r}", r, {}) for r in ROLES], "mean reward",
                 "no reward_<role> in metrics/<cycle>/rewards.json", title="role")


def _p_notes(data: CampaignData, splits: tuple[str, ...]) -> dict[tuple[str, int], str]:
    """``p=<McNemar p vs base>`` per (``heldout_<split>_accuracy``, cycle position), where known."""
    from selfevolve.headline import fmt

    return {(f"heldout_{s}_accuracy", i): f"p={fmt(p, 'p')}" for s in splits for i, c in enumerate(data.cycles)
            if (p := data.metric(c, "evaluate", f"heldout_{s}_p_vs_base")) is not None}


def _plot_frontier(ax, data: CampaignData, series: dict) -> None:
    _line_figure(ax, data, series["benchmarks"], "frontier",
                 [("heldout_frontier_accuracy", "frontier (never supervised)", {"color": "tab:red", "linewidth": 2.5}),
                  ("heldout_beyond_accuracy", "rungs beyond the frontier (never supervised)", {"color": "tab:orange", "linewidth": 2.0}),
                  ("heldout_seed_accuracy", "seed forms (retention)", {"color": "tab:blue", "linewidth": 2.5})],
                 "greedy accuracy (held-out)", "no heldout_frontier_accuracy / heldout_seed_accuracy in metrics/<cycle>/evaluate.json\n"
                 "(a seed set without held-out splits)", notes=_p_notes(data, ("frontier", "seed")))


def _plot_forms(ax, data: CampaignData, series: dict) -> None:
    """Held-out accuracy per question form (rows) and cycle (columns), as a heat map."""
    title = FIGURES["forms"][1]
    rows = series["forms"]
    if not rows:
        _no_data(ax, title, "no heldout_accuracy_form_<form> in metrics/<cycle>/evaluate.json")
        return
    forms = sorted({r["form"] for r in rows}, key=lambda f: (sum(int(x) for x in re.findall(r"\d+", f)), f))
    cycles = [c for c in data.cycles if any(r["cycle"] == c for r in rows)]
    grid = [[next((r["accuracy"] for r in rows if r["cycle"] == c and r["form"] == f), float("nan")) for c in cycles] for f in forms]
    im = ax.imshow(grid, vmin=0.0, vmax=1.0, cmap="RdYlGn", aspect="auto")
    for i, line in enumerate(grid):
        for j, v in enumerate(line):
            if v == v:  # not NaN
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    split = {r["form"]: r.get("split") or ("frontier" if r.get("frontier") else None) for r in rows}
    ax.set_yticks(range(len(forms)), [f"{f} ({split[f]})" if split.get(f) in ("frontier", "beyond") else f for f in forms], fontsize=7)
    ax.set_xticks(range(len(cycles)), cycles)
    ax.set_xlabel("cycle")
    ax.set_title(title)
    ax.figure.colorbar(im, ax=ax, fraction=0.04)


def _plot_mass(axes, data: CampaignData, series: dict) -> None:
    ax, ax_h = axes
    title = FIGURES["mass"][1]
    rows = series["mass"]
    domains = sorted({k[: -len("_champion_fitness")] for r in rows for k in r if k.endswith("_champion_fitness") and r[k] is not None})
    if not domains:
        reason = "MASS disabled (mass.enabled = false)" if any((data.mass.get(c) or {}).get("enabled") is False for c in data.cycles) \
            else "no data/cycles/<cycle>/mass/search.json\nand no mass_<domain>_fitness in metrics/<cycle>/mass_search.json"
        _no_data(ax, title, reason)
    else:
        import matplotlib

        colors = matplotlib.colormaps["tab10"]
        fields = []
        for i, d in enumerate(domains):
            fields.append((f"{d}_champion_fitness", f"{d}: champion", {"color": colors(i)}))
            # hollow, larger and drawn above: visible where the champion is the single agent (same value)
            fields.append((f"{d}_single_agent_fitness", f"{d}: single agent (reference)",
                           {"color": colors(i), "linestyle": ":", "markersize": 11, "markerfacecolor": "none", "zorder": 3}))
        _finish(ax, data.cycles, title, "fitness (mean verified score on the search sample)",
                _fraction_or_auto(r.get(f[0]) for r in rows for f in fields), _lines(ax, data.cycles, rows, fields))
    hist = series["mass_history"]
    if not hist:
        _no_data(ax_h, "MASS search progress within each cycle", "no search history in data/cycles/<cycle>/mass/search.json")
        return
    for c in data.cycles:
        for d in sorted({h["domain"] for h in hist if h["cycle"] == c}):
            pts = sorted((h["generation"], h["champion_fitness"]) for h in hist if h["cycle"] == c and h["domain"] == d)
            ax_h.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{c} ({d})")
    ax_h.set_xlabel("generation")
    ax_h.set_ylabel("champion fitness")
    ax_h.set_title("MASS search progress within each cycle")
    if (ylim := _fraction_or_auto(h["champion_fitness"] for h in hist)) is not None:
        ax_h.set_ylim(*ylim)
    ax_h.grid(True, alpha=0.3)
    ax_h.xaxis.get_major_locator().set_params(integer=True)
    ax_h.legend(loc="best", fontsize=8)


def render_figures(data: CampaignData, series: dict, out_dir: str | Path) -> dict[str, Path]:
    """Write every figure of ``FIGURES`` into ``out_dir`` (PNG). Returns name -> path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plotters = {"frontier": _plot_frontier, "forms": _plot_forms, "benchmarks": _plot_benchmarks, "pool_size": _plot_pool_size,
                "pool_levels": _plot_pool_levels, "pool_pass_rate": _plot_pool_pass_rate, "critic": _plot_critic,
                "rewards": _plot_rewards}
    paths: dict[str, Path] = {}
    for name, (fname, _title) in FIGURES.items():
        if name == "mass":
            fig, axes = _new_figure(ncols=2, width=6.5)
            _plot_mass(axes, data, series)
        else:
            fig, (ax,) = _new_figure(width=8.5 if name == "pool_levels" else 7.5, height=6.5 if name == "forms" else 4.5)
            plotters[name](ax, data, series)
        fig.suptitle(f"campaign {data.campaign}", fontsize=9, color="dimgray")
        path = out_dir / fname
        fig.savefig(path)
        paths[name] = path
    return paths
