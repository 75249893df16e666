"""Prefect tasks: one generic ``stage`` task that reproduces any DVC stage by its id
(``tasks/repro.py``); the campaign's closing ``report`` and ``commit dvc.lock`` (``tasks/campaign.py``);
the ``dispatch`` task that sends a stage to a worker of its pool (``tasks/dispatch.py``); and the plain
functions a worker runs for a dispatched stage (``tasks/worker.py``, called by the ``stage`` flow of
``flows/stage.py``). What they need of git, processes and services comes from
``selfevolve.orchestration``."""
