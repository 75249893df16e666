"""Prefect tasks: one generic ``stage`` task that reproduces any DVC stage by its id, plus the
campaign's ``report`` and ``commit dvc.lock`` (``tasks/stages.py``); the ``dispatch`` task that sends
a stage to a worker of its pool (``tasks/dispatch.py``); and the plain functions a worker runs for a
dispatched stage (``tasks/worker.py``, called by the ``stage`` flow of ``flows/stage.py``)."""
