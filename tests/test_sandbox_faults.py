"""The sandbox's verdicts do not depend on machine load, and a sandbox that fails is not a wrong answer
(issue 24, rows 10 and 11)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from selfevolve.config import Params
from selfevolve.records import Attempt, MathSpec, Question, Rollout, Verdict, read_jsonl, write_jsonl
from selfevolve.verifiers import sandbox_zygote
from selfevolve.verifiers.sandbox import CodeJob, SandboxPool

BURN = ("import time\ndef f():\n    t = time.process_time()\n    while time.process_time() - t < {s}:\n        pass\n"
        "    return 1\n")


@pytest.fixture
def one_busy_core():
    """This process (and what it starts) on one core, shared with two CPU hogs: a job there gets
    at most a third of a core, as on a machine busy with other work."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        os.sched_setaffinity(0, before)


@pytest.mark.timeout(120)
def test_honest_jobs_pass_on_a_busy_machine(one_busy_core):
    """Row 10: 180 honest jobs of <= 0.33 s CPU, timeout_s=1, 8 workers on 2 cores: all judged
    'wall-clock limit exceeded'. Here 4 jobs of 0.3 s CPU with timeout_s=0.5, asked for 4 workers on
    one core shared with two hogs: the old wall limit (0.75 s) failed every one."""
    jobs = [CodeJob(program=BURN.format(s=0.3), tests=["assert f() == 1"], timeout_s=0.5) for _ in range(4)]
    with SandboxPool(max_workers=4) as pool:
        results = pool.run_batch(jobs, workers=4)
    assert [r.status for r in results] == ["passed"] * 4, [r.detail for r in results]
    assert all(r.cpu_s < 0.5 for r in results)


@pytest.mark.timeout(60)
def test_cpu_time_is_the_verdict_and_wall_clock_only_a_backstop():
    with SandboxPool(max_workers=1) as pool:
        over = pool.run(CodeJob(program=BURN.format(s=0.7), tests=["assert f() == 1"], timeout_s=0.5))
        assert over.status == "timeout" and "CPU limit of 0.5 s" in over.detail, over
        asleep = pool.run(CodeJob(program="import time\ntime.sleep(30)\n", tests=["assert True"], timeout_s=0.5))
        assert asleep.status == "timeout" and "wall-clock backstop" in asleep.detail
        assert asleep.duration_s < sandbox_zygote.wall_backstop_s(0.5) + 2


def _kill_supervisor_on(marker: str, times: int, monkeypatch) -> list[int]:
    """SIGKILL the supervisor of a job whose program holds ``marker`` just as it is sent, ``times``
    times (row 11: supervisors killed during a batch)."""
    real_run, killed = sandbox_zygote._Zygote.run, []

    def run(self, job, tmp_base):
        if marker in job.program and len(killed) < times:
            killed.append(self.proc.pid)
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return real_run(self, job, tmp_base)

    monkeypatch.setattr(sandbox_zygote._Zygote, "run", run)
    return killed


@pytest.mark.timeout(60)
def test_a_supervisor_killed_once_is_retried(monkeypatch):
    killed = _kill_supervisor_on("# victim", 1, monkeypatch)
    with SandboxPool(max_workers=1) as pool:
        res = pool.run(CodeJob(program="# victim\ndef f():\n    return 1\n", tests=["assert f() == 1"]))
    assert killed and res.passed


@pytest.mark.timeout(60)
def test_a_supervisor_killed_twice_is_an_infrastructure_error_not_a_wrong_answer(monkeypatch):
    from selfevolve.config import VerifierParams
    from selfevolve.records import CodeSpec
    from selfevolve.verifiers.grading import verify_answers, verify_fn

    killed = _kill_supervisor_on("# victim", 2, monkeypatch)
    q = Question(id="q", domain="code", text="f returns 1", spec=CodeSpec(entry_point="f", tests=["assert f() == 1"]))
    [v] = verify_answers([q], ["# victim\ndef f():\n    return 1\n"], VerifierParams(workers=1))
    assert len(killed) == 2 and v.status == "infra_error" and not v.graded
    killed.clear()
    assert verify_fn(VerifierParams(workers=1))([q], ["# victim\ndef f():\n    return 1\n"]) == [None]  # MASS: undecided, not 0


def _verify_setup(tmp_path, statuses: list[str]):
    from selfevolve.stages.context import StageContext

    ctx = StageContext(Params(), "c1", tmp_path)
    q = Question(id="q", domain="math", text="1+1?", spec=MathSpec(answer="2"))
    write_jsonl(ctx.paths.solve_set, [q])
    write_jsonl(ctx.paths.attempts, [Attempt(id=f"a{i}", question_id="q", sample=i, completion="", answer="2")
                                     for i in range(len(statuses))])
    verdicts = [Verdict(attempt_id=f"a{i}", question_id="q", correct=float(s == "correct"), status=s)
                for i, s in enumerate(statuses)]
    return ctx, q, verdicts


def test_verify_counts_infrastructure_errors_apart_and_fails_above_the_threshold(tmp_path, monkeypatch):
    from selfevolve.stages import solve
    from selfevolve.verifiers import grading

    ctx, _, verdicts = _verify_setup(tmp_path, ["correct"] * 150 + ["wrong"] * 49 + ["infra_error"])
    monkeypatch.setattr(grading, "verify_answers", lambda qs, ans, v, ids: verdicts[: len(ids)])
    m = solve.verify(ctx)
    assert m["verify_infra_errors"] == 1 and m["solver_accuracy"] == 150 / 199
    verdicts[:5] = [v.model_copy(update={"status": "infra_error", "correct": 0.0}) for v in verdicts[:5]]
    with pytest.raises(solve.VerifyInfraError, match="6 of 200 verdicts.*max_infra_error_rate"):
        solve.verify(ctx)


def test_rewards_give_an_infrastructure_error_no_reward_and_no_pass_rate(tmp_path):
    from selfevolve.stages.rewards import rewards

    ctx, q, verdicts = _verify_setup(tmp_path, ["correct", "infra_error"])
    P = ctx.paths
    for path in (P.challenge, P.critic_questions, P.plans, P.critic_plans):
        write_jsonl(path, [])
    write_jsonl(P.verdicts, verdicts)
    write_jsonl(ctx.init.pool, [q])
    rewards(ctx)
    solver = [r for r in read_jsonl(P.rollouts, Rollout) if r.role == "solver"]
    assert [r.id for r in solver] == ["a0"]
    assert read_jsonl(P.pool, Question)[0].measured.pass_rate == 1.0
