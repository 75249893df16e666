"""git, as the orchestration needs it: the commit a run came from, whether a checkout is clean, a
commit of one file. Every call runs ``git -C <root> ...`` as a child process and never prompts."""

from __future__ import annotations

import subprocess
from pathlib import Path

#: The identity a commit is made with when the repository has none configured.
FALLBACK_IDENTITY = ("-c", "user.name=selfevolve", "-c", "user.email=selfevolve@localhost")


class GitError(RuntimeError):
    """A git command failed (the message names the command, the checkout and git's error output)."""


def git(root: str | Path, *args: str, check: bool = True, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """``git -C root *args`` with text output captured. Raises ``GitError`` on a non-zero exit when
    ``check`` (with the last 800 characters of stderr), and when git is missing or times out."""
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GitError(f"git {' '.join(args)} could not run in {root}: {exc}") from exc
    if check and r.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {root}: {r.stderr.strip()[-800:]}")
    return r


def is_repository(root: str | Path) -> bool:
    """Whether ``root`` is inside a git work tree."""
    try:
        return git(root, "rev-parse", "--is-inside-work-tree", check=False).returncode == 0
    except GitError:
        return False


def head_commit(root: str | Path) -> str | None:
    """The full hash of ``HEAD`` in ``root``; None when ``root`` is not a repository (or has no commit)."""
    try:
        r = git(root, "rev-parse", "HEAD", check=False, timeout_s=30)
    except GitError:
        return None
    if r.returncode != 0:
        return None
    return r.stdout.strip() or None


def changed_tracked_files(root: str | Path) -> list[str]:
    """Tracked files of ``root`` with uncommitted changes (staged or not), as paths relative to it.
    Raises ``GitError`` when ``root`` is not a repository."""
    return [ln[3:] for ln in git(root, "status", "--porcelain", "--untracked-files=no").stdout.splitlines()]


def commit_file(root: str | Path, path: str, message: str) -> bool:
    """Commit ``path`` alone (nothing else staged goes in), when it changed. Uses the repository's
    identity, else ``FALLBACK_IDENTITY``. Returns whether a commit was made; raises ``GitError`` when
    ``root`` is not a repository or the commit fails."""
    git(root, "add", "--", path)
    if git(root, "diff", "--cached", "--quiet", "--", path, check=False).returncode == 0:
        return False
    identity = () if git(root, "config", "user.email", check=False).stdout.strip() else FALLBACK_IDENTITY
    git(root, *identity, "commit", "-q", "-m", message, "--", path)
    return True
