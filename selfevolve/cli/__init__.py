"""The ``selfevolve`` command line: one subcommand per stage (what ``dvc.yaml`` runs and the Prefect
tasks reproduce) plus tools (evaluate, report, grade, serve, summary, stack, preset, dvc-yaml) and the cluster's
(deploy, worker).

The app is assembled here from the command functions of the modules beside this one; none of them
registers itself on import. Heavy imports happen inside the commands, so ``selfevolve --help`` is
quick. Run ``selfevolve COMMAND --help`` for a command's options.
"""

from __future__ import annotations

from selfevolve.runtime_env import apply_defaults

apply_defaults()

import typer  # noqa: E402

from selfevolve.cli import cluster, evaluate, grade, serve, stages  # noqa: E402

app = typer.Typer(
    help="Self-evolution cycles for a language model: SAGE roles, MASS workflow search, verifiers, "
    "training and evaluation. Stages read params.yaml and write files under data/ and models/.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

for _name, _command in stages.stage_commands():
    app.command(_name, rich_help_panel="Stages")(_command)
app.command("evaluate", rich_help_panel="Stages")(evaluate.evaluate)
app.command("report", rich_help_panel="Campaign")(evaluate.report)
app.command("summary", rich_help_panel="Campaign")(stages.summary)
app.command("stack", rich_help_panel="Campaign")(stages.stack)
app.command("preset", rich_help_panel="Campaign")(stages.preset)
app.command("dvc-yaml", rich_help_panel="Campaign")(stages.dvc_yaml)
app.command("ui", rich_help_panel="Campaign")(stages.ui)
app.command("deploy", rich_help_panel="Cluster")(cluster.deploy)
app.command("worker", rich_help_panel="Cluster")(cluster.worker)
app.command("screenshots", rich_help_panel="Campaign")(stages.screenshots)
app.command("grade", rich_help_panel="Tools")(grade.grade)
app.command("serve", rich_help_panel="Tools")(serve.serve)
